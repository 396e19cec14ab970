"""The LDC release layouts and file formats the generator writes, as LDC releases them.

    LDC97S62/swb1_d{1..4}/data/sw0NNNN.sph                      Switchboard-1 audio
    swb_ms98_transcriptions/NN/NNNN/swNNNN{A,B}-ms98-a-{trans,word}.text
                                 swNNNN{A,B}-ms98-a-phone.text   phone times (synthetic only)
    LDC2002S09/hub5e_00/english/{sw,en}_4NNN.sph, hub5e_00.pem   Hub5-2000 audio, segments
    LDC2002T43/reference/hub5e00.english.000405.stm, en20000405_hub5.glm
    LDC2004T19/fe_03_p1_tran/data/trans/000/fe_03_00001.txt        Fisher part 1 transcripts
    LDC2004S13/fe_03_p1_sph1/audio/000/fe_03_00001.sph             Fisher part 1 audio
    LDC2005T19/fe_03_p2_tran/..., LDC2005S13/fisher_eng_tr_sp_d1/... Fisher part 2

The same corpus preparers read these and the real releases, so the formats follow the
real files: MS98 segments cover each side's whole timeline with `[silence]` between speech,
6-decimal times; the pem and stm use 2-decimal times and the same segmentation.
"""

from __future__ import annotations

from pathlib import Path
from typing import Iterable

import numpy as np
import soundfile as sf

from asr.data.synth import grammar as gr
from asr.data.synth import tokens as tk
from asr.data.synth.channel import RATE
from asr.data.synth import phones as ph
from asr.data.synth.conversation import Conversation, Segment
from asr.data.synth.speakers import Speaker

SWB_DIR = "LDC97S62"
MS98_DIR = "swb_ms98_transcriptions"
HUB5_AUDIO_DIR = "LDC2002S09/hub5e_00/english"
HUB5_TEXT_DIR = "LDC2002T43/reference"
PEM_NAME = "hub5e_00.pem"
STM_NAME = "hub5e00.english.000405.stm"
GLM_NAME = "en20000405_hub5.glm"
FISHER_TEXT_DIRS = {1: "LDC2004T19/fe_03_p1_tran", 2: "LDC2005T19/fe_03_p2_tran"}
# Part 2 audio under the later LDC naming, so that preparers meet both namings.
FISHER_AUDIO_DIRS = {1: "LDC2004S13/fe_03_p1_sph{disc}", 2: "LDC2005S13/fisher_eng_tr_sp_d{disc}"}
FISHER_DISCS = 7
FISHER_PART2_FIRST = 5851  # part 2 numbering continues after part 1's 5,850 calls
UNCERTAIN_EVERY = 9  # one Fisher line in this many is an uncertain "(( ... ))" transcription
FISHER_NOISES = ("[noise]", "[cough]", "[breath]", "[lipsmack]", "[sigh]")
IGNORE = "IGNORE_TIME_SEGMENT_IN_SCORING"
TYPO_EVERY = 12  # one segment with a hesitation in this many has a "((%HESITATION)" typo


# ---- paths ----------------------------------------------------------------------------


def swb_audio_path(root: Path, number: int, disc: int) -> Path:
    return root / SWB_DIR / f"swb1_d{disc}" / "data" / f"sw0{number}.sph"


def ms98_path(root: Path, number: int, side: str, kind: str) -> Path:
    """kind is 'trans', 'word' or 'phone' (ours); the folders are the number's first two digits, then it."""
    return root / MS98_DIR / f"{number // 100:02d}" / f"{number}" / f"sw{number}{side}-ms98-a-{kind}.text"


def hub5_audio_path(root: Path, name: str) -> Path:
    return root / HUB5_AUDIO_DIR / f"{name}.sph"


def fisher_name(number: int) -> str:
    return f"fe_03_{number:05d}"


def fisher_part(number: int) -> int:
    return 1 if number < FISHER_PART2_FIRST else 2


def fisher_transcript_path(root: Path, number: int) -> Path:
    part = fisher_part(number)
    return root / FISHER_TEXT_DIRS[part] / "data" / "trans" / f"{number // 100:03d}" / f"{fisher_name(number)}.txt"


def fisher_audio_path(root: Path, number: int, disc: int) -> Path:
    folder = FISHER_AUDIO_DIRS[fisher_part(number)].format(disc=disc)
    return root / folder / "audio" / f"{number // 100:03d}" / f"{fisher_name(number)}.sph"


def pem_path(root: Path) -> Path:
    return root / HUB5_AUDIO_DIR / PEM_NAME


def stm_path(root: Path) -> Path:
    return root / HUB5_TEXT_DIR / STM_NAME


def glm_path(root: Path) -> Path:
    return root / HUB5_TEXT_DIR / GLM_NAME


# ---- audio ----------------------------------------------------------------------------


def write_sphere(path: Path, audio: np.ndarray) -> None:
    """2-channel 8 kHz mu-law NIST SPHERE; column 0 is side A (channel 1)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    sf.write(str(path), audio, RATE, format="NIST", subtype="ULAW")


# ---- MS98 -----------------------------------------------------------------------------


def _seconds6(samples: int) -> str:
    return f"{samples / RATE:.6f}"


def _timeline(segments: list[Segment], num_samples: int) -> list[tuple[int, int, Segment | None]]:
    """The side's whole recording as speech segments with [silence] (None) between them."""
    out: list[tuple[int, int, Segment | None]] = []
    at = 0
    for segment in segments:
        if segment.start > at:
            out.append((at, segment.start, None))
        out.append((segment.start, segment.end, segment))
        at = segment.end
    if at < num_samples:
        out.append((at, num_samples, None))
    return out


def ms98_lines(
    number: int, side: str, segments: list[Segment], num_samples: int
) -> tuple[list[str], list[str], list[str]]:
    """Lines of swNNNN{side}-ms98-a-trans.text, -word.text and -phone.text (asr.data.synth.phones)."""
    trans, words, phones = [], [], []
    for i, (start, end, segment) in enumerate(_timeline(segments, num_samples), 1):
        prefix = f"sw{number}{side}-ms98-a-{i:04d} {_seconds6(start)} {_seconds6(end)}"
        if segment is None:
            trans.append(f"{prefix} {tk.SILENCE}")
            words.append(f"{prefix} {tk.SILENCE}")
            continue
        timed = [t for t in segment.tokens if t.token.ms98]
        trans.append(f"{prefix} " + " ".join(t.token.ms98 for t in timed))
        segment_id = prefix.split()[0]
        words += [f"{segment_id} {_seconds6(t.start)} {_seconds6(t.end)} {t.token.ms98}" for t in timed]
        phones += [ph.phone_line(segment_id, p, RATE) for p in segment.phones]
    return trans, words, phones


def write_ms98(root: Path, number: int, conversation: Conversation) -> None:
    for side, segments in conversation.segments.items():
        trans, words, phones = ms98_lines(number, side, segments, conversation.num_samples)
        for kind, lines in (("trans", trans), ("word", words), ("phone", phones)):
            path = ms98_path(root, number, side, kind)
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text("\n".join(lines) + "\n", encoding="ascii")


# ---- Hub5 pem / stm / glm -------------------------------------------------------------


def centiseconds(samples: int, round_up: bool) -> int:
    """2-decimal times that still enclose the segment: start rounded down, end up."""
    return -(-samples * 100 // RATE) if round_up else samples * 100 // RATE


def _seconds2(cs: int) -> str:
    return f"{cs // 100}.{cs % 100:02d}"


def stm_words(segment: Segment) -> list[str]:
    """The reference words: upper case, hesitations and fragments optionally deletable; a
    segment with nothing to score (a lone laugh or noise) is excluded from scoring."""
    words = [t.token.stm for t in segment.tokens if t.token.stm]
    return words if any(t.token.is_lexical for t in segment.tokens) else [IGNORE]


def with_typo(words: list[str]) -> list[str]:
    """The real reference has a few "((" typos; preparers must cope with them."""
    i = words.index(tk.HESITATION)
    return words[:i] + ["(" + tk.HESITATION] + words[i + 1 :]


def _segment_times(segment: Segment) -> tuple[str, str]:
    return _seconds2(centiseconds(segment.start, False)), _seconds2(centiseconds(segment.end, True))


def _side_segments(conversations: Iterable[Conversation]):
    for conversation in sorted(conversations, key=lambda c: c.spec.name):
        for side, speaker in zip(("A", "B"), conversation.spec.speakers):
            for segment in conversation.segments[side]:
                yield conversation.spec.name, side, speaker, segment


PEM_HEADER = """;;
;; hub5e_00.pem: the segments of the (synthetic) Hub5-2000 English evaluation set.
;; <conversation> <channel> <speaker> <begin time> <end time>
;;
"""


def pem_lines(conversations: Iterable[Conversation]) -> list[str]:
    lines = []
    for name, side, _, segment in _side_segments(conversations):
        start, end = _segment_times(segment)
        lines.append(f"{name} {side} unknown_speaker {start} {end}")
    return lines


STM_HEADER = """;;
;; hub5e00.english.000405.stm: reference transcripts of the (synthetic) Hub5-2000
;; English evaluation set, Switchboard (sw) and CallHome (en) conversations.
;;
;; CATEGORY "0" "" ""
;; LABEL "O" "Overall" "All Segments in the test set"
;; CATEGORY "1" "Hub5 test set" ""
;; LABEL "en" "CALLHOME" "CALLHOME conversations"
;; LABEL "sw" "Switchboard" "Switchboard conversations"
;; CATEGORY "2" "Sex" ""
;; LABEL "F" "Female" "Female Talkers"
;; LABEL "M" "Male" "Male Talkers"
;; CATEGORY "3" "Corpus/Sex" ""
;; LABEL "en-F" "CALLHOME Female" "Female Talkers in CALLHOME conversations"
;; LABEL "en-M" "CALLHOME Male" "Male Talkers in CALLHOME conversations"
;; LABEL "sw-F" "Switchboard Female" "Female Talkers in Switchboard conversations"
;; LABEL "sw-M" "Switchboard Male" "Male Talkers in Switchboard conversations"
;;
"""


def _stm_tag(name: str, speaker: Speaker) -> str:
    corpus = name.split("_")[0]
    return f"<O,{corpus},{speaker.gender},{corpus}-{speaker.gender}>"


def stm_lines(conversations: Iterable[Conversation]) -> list[str]:
    lines, hesitations = [], 0
    for name, side, speaker, segment in _side_segments(conversations):
        start, end = _segment_times(segment)
        words = stm_words(segment)
        if tk.HESITATION in words:
            words = with_typo(words) if hesitations % TYPO_EVERY == 0 else words
            hesitations += 1
        lines.append(f"{name} {side} {name}_{side} {start} {end} {_stm_tag(name, speaker)} {' '.join(words)}")
    return lines


GLM_HEADER = """;;
;;  File:  en20000405_hub5.glm
;;  Desc:  Transcript filtering rules for the (synthetic) Hub5-2000 English evaluation:
;;         hesitations, contractions and alternate spellings, applied to both the
;;         reference and the system output before scoring (csrfilt.sh, hubscr.pl).
;;
* name "en20000405_hub5.glm"
* desc "The Global Mapping File for the synthetic Hub5-E 2000 evaluation"
* format = 'NIST1'
* max_nrules = '{max_rules}'
* copy_no_hit = 'T'
* case_sensitive = 'F'
"""
GLM_HESITATIONS = (
    "ACH",
    "AH",
    "EEE",
    "EH",
    "ER",
    "EW",
    "HA",
    "HEE",
    "HM",
    "HMM",
    "HUH",
    "MM",
    "MMM",
    "OOF",
    "UH",
    "UHM",
    "UM",
)
GLM_SPELLINGS = (
    ("OK", "OKAY"),
    ("ALRIGHT", "{ALL RIGHT / ALRIGHT}"),
    ("UHHUH", "UH-HUH"),
    ("MM-HMM", "UM-HUM"),
    ("MHM", "UM-HUM"),
    ("GONNA", "{GONNA / GOING TO}"),
    ("KINDA", "{KINDA / KIND OF}"),
)


def glm_text() -> str:
    rules = [";; Hesitation mappings"]
    rules += [f"{h} => %HESITATION / [ ] __ [ ] ;; hesitation" for h in GLM_HESITATIONS]
    rules.append(";; Alternate spellings")
    rules += [f"{lhs} => {rhs} / [ ] __ [ ]" for lhs, rhs in GLM_SPELLINGS]
    rules.append(";; Contractions")
    for short, longs in sorted(gr.CONTRACTIONS.items()):
        alternatives = " / ".join([short.upper()] + [e.upper() for e in longs])
        rules.append(f"[{short.upper()}] => [{{{alternatives}}}] / [ ] __ [ ] ;; contraction")
    header = GLM_HEADER.replace("{max_rules}", str(max(1000, 2 * len(rules))))
    return header + "\n".join(rules) + "\n"


def write_hub5_text(root: Path, conversations: list[Conversation]) -> None:
    for path, text in (
        (pem_path(root), PEM_HEADER + "\n".join(pem_lines(conversations)) + "\n"),
        (stm_path(root), STM_HEADER + "\n".join(stm_lines(conversations)) + "\n"),
        (glm_path(root), glm_text()),
    ):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="ascii")


# ---- Fisher ---------------------------------------------------------------------------


def fisher_word(token: tk.Token, index: int) -> str:
    """A token as the Fisher transcribers wrote it: plain lower-case words, `an-` for a cut-off
    word, `[laugh]`, `[mn]` and a handful of event tags."""
    if token.is_lexical:
        return token.word
    if token.kind == tk.PARTIAL:
        return token.ms98.split("[")[0] + "-"
    if token.kind == tk.VOCAL:
        return "[mn]"
    if token.kind == tk.EVENT:
        return "[laugh]" if token.ms98 == tk.LAUGHTER else FISHER_NOISES[index % len(FISHER_NOISES)]
    return ""  # stm-only marks


def fisher_lines(conversation: Conversation) -> list[str]:
    """`7.38 8.78 A: an- so the topic is` lines of both sides in time order."""
    timed = sorted(
        (segment.start, side, segment) for side, segments in conversation.segments.items() for segment in segments
    )
    lines, events = [], 0
    for i, (_, side, segment) in enumerate(timed):
        words = []
        for t in segment.tokens:
            words.append(fisher_word(t.token, events))
            events += t.token.is_event
        text = " ".join(w for w in words if w)
        if i % UNCERTAIN_EVERY == UNCERTAIN_EVERY - 1:
            text = f"(( {text} ))"
        start, end = segment.start / RATE, segment.end / RATE
        lines.append(f"{start:.2f} {end:.2f} {side}: {text}")
    return lines


def write_fisher_transcript(root: Path, number: int, conversation: Conversation) -> None:
    path = fisher_transcript_path(root, number)
    path.parent.mkdir(parents=True, exist_ok=True)
    header = [f"# {fisher_name(number)}.sph", "# Transcribed at the LDC", ""]
    path.write_text("\n".join(header + fisher_lines(conversation)) + "\n", encoding="ascii")
