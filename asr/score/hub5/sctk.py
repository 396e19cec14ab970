"""Running NIST SCTK's hubscr.pl (csrfilt.sh + sclite) and reading its reports.

As Kaldi's local/score_sclite.sh: `hubscr.pl -p <sctk bin> -V -l english -h hub5 -g glm
-r stm hyp.ctm`, in a work directory holding copies of the (fixed) stm, the GLM and the
filtered CTM. sclite's per-segment alignments (`hyp.ctm.filt.pra`) become the result's
utterances, so subsets and speakers are summed like every other scorer's; the sum is then
checked against sclite's own total (`hyp.ctm.filt.raw`), so a report we misread can never
give a silently wrong number. The SCTK reports stay in the work directory.
"""

from __future__ import annotations

import logging
import os
import re
import shutil
import subprocess
from pathlib import Path

from asr.score.result import (
    CORRECT,
    DELETION,
    INSERTION,
    SUBSTITUTION,
    AlignedWord,
    ErrorCounts,
    ScoreResult,
    UttAlignment,
)
from asr.utils.errors import InputError

log = logging.getLogger(__name__)

DEBIAN_SCTK_BIN = "/usr/lib/sctk/bin"
GAP = re.compile(r"^\*+$")
_OPS = {"": CORRECT, "S": SUBSTITUTION, "D": DELETION, "I": INSERTION}


def find_sctk(sctk_bin: str = "") -> Path | None:
    """The directory holding hubscr.pl and sclite: score.sctk_bin, Debian's, or $PATH's."""
    candidates = [sctk_bin, DEBIAN_SCTK_BIN]
    on_path = shutil.which("hubscr.pl")
    if on_path:
        candidates.append(str(Path(on_path).parent))
    for directory in candidates:
        if directory and (Path(directory) / "hubscr.pl").is_file() and (Path(directory) / "sclite").is_file():
            return Path(directory)
    return None


def run_hubscr(sctk_dir: Path, work_dir: Path, stm_name: str, ctm_name: str, glm_name: str) -> None:
    command = [
        "perl",
        str(sctk_dir / "hubscr.pl"),
        "-p",
        str(sctk_dir),
        "-V",
        "-l",
        "english",
        "-h",
        "hub5",
        "-g",
        glm_name,
        "-r",
        stm_name,
        ctm_name,
    ]
    env = dict(os.environ, PATH=f"{sctk_dir}{os.pathsep}{os.environ.get('PATH', '')}")
    result = subprocess.run(command, cwd=work_dir, env=env, capture_output=True, text=True)
    (work_dir / "hubscr.log").write_text(result.stdout + result.stderr)
    if result.returncode != 0:
        tail = "\n".join((result.stdout + result.stderr).strip().splitlines()[-10:])
        raise InputError(f"NIST hubscr.pl failed in {work_dir} (exit {result.returncode}); see hubscr.log:\n{tail}")


def _cells(ref: str, hyp: str, evaluation: str) -> list[tuple[str, str, str]]:
    """Split pra's REF/HYP/Eval lines into columns by the REF tokens' offsets."""
    starts = [m.start() for m in re.finditer(r"\S+", ref)]
    bounds = starts[1:] + [max(len(ref), len(hyp), len(evaluation)) + 1]
    return [(ref[s:e].strip(), hyp[s:e].strip(), evaluation[s:e].strip()) for s, e in zip(starts, bounds)]


def _column(ref: str, hyp: str, op_mark: str, where: str) -> AlignedWord:
    if op_mark not in _OPS:
        raise InputError(f"{where}: unexpected alignment mark {op_mark!r} in sclite's pra output")
    ref_word = None if GAP.match(ref) else ref.strip("()").lower()
    hyp_word = None if (not hyp or GAP.match(hyp)) else hyp.lower()
    return AlignedWord(_OPS[op_mark], ref_word, hyp_word)


def parse_pra(text: str, source: str) -> list[UttAlignment]:
    """sclite's pra report -> one UttAlignment per scored segment (counts checked)."""
    utterances, speaker, block = [], "", {}
    for line in text.splitlines():
        speaker_line = re.match(r"Speaker sentences\s+\d+:\s+(\S+)", line)
        if speaker_line:
            speaker = speaker_line.group(1)
        elif line.startswith("id: ("):
            block = {"id": line[5:].rstrip().rstrip(")")}
        elif line.startswith("Scores: (#C #S #D #I)"):
            block["scores"] = tuple(int(x) for x in line.split(")")[1].split())
        elif line.startswith(("REF: ", "HYP: ", "Eval:")):
            block[line[:4]] = line[6:]
            if line.startswith("Eval:"):
                utterances.append(_utterance(block, speaker, source))
    return utterances


def _utterance(block: dict, speaker: str, source: str) -> UttAlignment:
    where = f"{source} ({block.get('id')})"
    columns = tuple(_column(r, h, e, where) for r, h, e in _cells(block["REF:"], block["HYP:"], block["Eval"]))
    utt = UttAlignment(block["id"], speaker, columns)
    c = utt.counts
    if (c.correct, c.substitutions, c.deletions, c.insertions) != block.get("scores"):
        raise InputError(
            f"{where}: could not read sclite's alignment (columns give {c}, sclite says {block.get('scores')})"
        )
    return utt


def parse_sum(text: str, source: str) -> ErrorCounts:
    """The `| Sum | #Snt #Wrd | Corr Sub Del Ins Err S.Err |` line of sclite's raw report."""
    for line in text.splitlines():
        cells = [c.split() for c in line.strip().strip("|").split("|")]
        if cells and cells[0] == ["Sum"] and len(cells) >= 3:
            snt, _ = (int(x) for x in cells[1][:2])
            corr, sub, dele, ins = (int(x) for x in cells[2][:4])
            return ErrorCounts(corr, sub, dele, ins, snt)
    raise InputError(f"{source}: no `Sum` line in sclite's report")


def score_sctk(sctk_dir: Path, work_dir: Path, stm_text: str, ctm_lines: list[str], glm_text: str) -> ScoreResult:
    """Score with hubscr.pl in `work_dir` (its reports stay there)."""
    work_dir.mkdir(parents=True, exist_ok=True)
    (work_dir / "stm").write_text(stm_text)
    (work_dir / "glm").write_text(glm_text)
    (work_dir / "hyp.ctm").write_text("".join(line + "\n" for line in ctm_lines))
    run_hubscr(sctk_dir, work_dir, "stm", "hyp.ctm", "glm")
    pra, raw = work_dir / "hyp.ctm.filt.pra", work_dir / "hyp.ctm.filt.raw"
    if not pra.is_file() or not raw.is_file():
        raise InputError(f"{work_dir}: hubscr.pl wrote no pra/raw report; see {work_dir / 'hubscr.log'}")
    result = ScoreResult.from_utterances(parse_pra(pra.read_text(errors="replace"), str(pra)))
    expected = parse_sum(raw.read_text(errors="replace"), str(raw))
    if result.subsets["total"] != expected:
        raise InputError(
            f"{pra}: the segments sum to {result.subsets['total']}, sclite's total is {expected}; report not understood"
        )
    return result
