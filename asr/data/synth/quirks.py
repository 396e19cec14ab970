"""Defects of the real LDC releases, reproduced on request in the synthetic corpus.

Preparers must cope with what the real files do, so tests need corpora that do it too. Each
quirk changes the written tree in one place and says where (the summary's `quirks` entry):

  asides        an MS98 line with `<b_aside> ... <e_aside>` (speech to someone in the room)
  missing_side  one conversation side's MS98 transcript files are absent (audio is there)
  past_end      an MS98 line ending 0.3 s after the end of its audio
  shorten       a Hub5-2000 SPHERE file stored shorten-compressed, as LDC2002S09 ships them
  stm_typos     every stm hesitation written with the real file's `((` typo
  unsorted      an MS98 transcript and the pem with their lines out of order

The default corpus has none of them (synth.quirks=[]).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import soundfile as sf

from asr.data.synth import layouts
from asr.data.synth import tokens as tk
from asr.data.synth.channel import RATE
from asr.data.synth.conversation import Conversation
from asr.data.synth.shorten import write_shorten_sphere
from asr.utils.errors import InputError

QUIRKS = ("asides", "missing_side", "past_end", "shorten", "stm_typos", "unsorted")
PAST_END_S = 0.3  # less than Kaldi's 0.5 s max overshoot: the segment is clipped, not dropped


def _rel(root: Path, path: Path) -> str:
    return str(path.relative_to(root))


def _lines(path: Path) -> list[str]:
    return path.read_text(encoding="ascii").splitlines()


def _write(path: Path, lines: list[str]) -> None:
    path.write_text("\n".join(lines) + "\n", encoding="ascii")


def _is_speech(line: str) -> bool:
    return line.split(maxsplit=3)[3:] != [tk.SILENCE]


def missing_side(root: Path, number: int, conversation: Conversation) -> dict:
    paths = [layouts.ms98_path(root, number, "B", kind) for kind in ("trans", "word", "phone")]
    for path in paths:
        path.unlink()
    return {"side": f"sw0{number}-B", "removed": [_rel(root, p) for p in paths]}


def asides(root: Path, number: int, conversation: Conversation) -> dict:
    path = layouts.ms98_path(root, number, "A", "trans")
    lines = _lines(path)
    i = next(i for i, line in enumerate(lines) if _is_speech(line))
    label, start, end, words = lines[i].split(maxsplit=3)
    lines[i] = f"{label} {start} {end} <b_aside> {words} <e_aside>"
    _write(path, lines)
    return {"file": _rel(root, path), "line": i + 1}


def unsorted(root: Path, number: int, conversation: Conversation) -> dict:
    path = layouts.ms98_path(root, number, "A", "trans")
    _write(path, _lines(path)[::-1])
    pem = layouts.pem_path(root)
    lines = _lines(pem)
    comments = [line for line in lines if line.startswith(";;")]
    _write(pem, comments + [line for line in lines if not line.startswith(";;")][::-1])
    return {"files": [_rel(root, path), _rel(root, pem)]}


def past_end(root: Path, number: int, conversation: Conversation) -> dict:
    """The side's last speech line ends PAST_END_S after the audio (the [silence] after it goes)."""
    path = layouts.ms98_path(root, number, "B", "trans")
    lines = _lines(path)
    last = max(i for i, line in enumerate(lines) if _is_speech(line))
    label, start, _, words = lines[last].split(maxsplit=3)
    end = conversation.num_samples / RATE + PAST_END_S
    _write(path, lines[:last] + [f"{label} {start} {end:.6f} {words}"])
    return {
        "file": _rel(root, path),
        "side": f"sw0{number}-B",
        "start": float(start),
        "end": round(end, 6),
        "audio_seconds": conversation.num_samples / RATE,
    }


def shorten(root: Path, name: str) -> dict:
    """Rewrite one Hub5 file as 16-bit PCM shorten, as the real release stores them."""
    path = layouts.hub5_audio_path(root, name)
    samples, rate = sf.read(str(path), dtype="int16", always_2d=True)
    write_shorten_sphere(path, np.ascontiguousarray(samples), rate)
    return {"file": _rel(root, path), "samples": int(len(samples))}


def stm_typos(root: Path) -> dict:
    path = layouts.stm_path(root)
    lines = _lines(path)
    typo = "(" + tk.HESITATION
    changed = 0
    for i, line in enumerate(lines):
        if not line.startswith(";;") and tk.HESITATION in line:
            lines[i] = line.replace(typo, tk.HESITATION).replace(tk.HESITATION, typo)
            changed += 1
    _write(path, lines)
    return {"file": _rel(root, path), "lines": changed}


# The quirks that edit one training conversation's transcripts, and which (by sorted name, modulo
# their number): the first QUIRK_CONVERSATIONS are all a quirk can touch.
ON_CONVERSATION = {
    "missing_side": (missing_side, 0),
    "asides": (asides, 1),
    "unsorted": (unsorted, 2),
    "past_end": (past_end, 3),
}
QUIRK_CONVERSATIONS = len(ON_CONVERSATION)


def apply_quirks(
    root: Path, quirks: list[str], conversations: list[Conversation], train_numbers: dict[str, tuple[int, int]]
) -> dict:
    """Apply the named quirks to the written tree; returns what each changed, by quirk."""
    train = sorted((c for c in conversations if c.spec.subset == "train"), key=lambda c: c.spec.name)
    evaluation = sorted(c.spec.name for c in conversations if c.spec.subset == "eval_swb")
    done = {}
    for quirk in sorted(set(quirks)):
        if quirk in ON_CONVERSATION:
            change, index = ON_CONVERSATION[quirk]
            if not train:
                raise InputError(f"synth quirk {quirk} needs training conversations")
            conversation = train[index % len(train)]
            done[quirk] = change(root, train_numbers[conversation.spec.name][0], conversation)
        elif quirk == "shorten":
            if not evaluation:
                raise InputError("synth quirk shorten needs a Switchboard-style evaluation conversation")
            done[quirk] = shorten(root, evaluation[0])
        elif quirk == "stm_typos":
            done[quirk] = stm_typos(root)
    return done
