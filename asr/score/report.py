"""Report files of a scored decode dir, shared by every scorer.

- `wer.json`: {subset: {"wer", "sub", "del", "ins", "words", "sentences"}}, WER in percent;
  the shape later scorers keep, so tools that collect results read any of them.
- `wer.md`: the same as a Markdown table (printed by the stage too).
- `wer.txt`: the same as Kaldi's `%WER 14.44 [ 690 / 4776, 33 ins, 64 del, 593 sub ]` lines,
  one per subset with the decode dir and subset after it, for `grep WER` and best_wer.sh.
- `align.txt`: per-utterance alignment in the manner of sclite's `pra` output: errors in
  upper case, `***` for the missing side of an insertion or deletion.
- `wer_by_speaker.md`: the table per speaker (optional), like sclite's `sys` report.

Every file is written atomically.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from asr.score.result import CORRECT, AlignedWord, ErrorCounts, ScoreResult, UttAlignment
from asr.utils.atomic import write_text

WER_JSON = "wer.json"
WER_MD = "wer.md"
WER_TXT = "wer.txt"
ALIGN_TXT = "align.txt"
WER_BY_SPEAKER_MD = "wer_by_speaker.md"

TABLE_COLUMNS = ("WER", "Sub", "Del", "Ins", "Words", "Sentences")
GAP = "***"


def wer_json(result: ScoreResult) -> dict:
    return {name: counts.as_report() for name, counts in result.subsets.items()}


def kaldi_wer_line(report: dict, where: str) -> str:
    """One subset of wer.json as Kaldi's compute-wer prints it, then `where` (dir and subset)."""
    errors = report["sub"] + report["del"] + report["ins"]
    return (
        f"%WER {report['wer']:.2f} [ {errors} / {report['words']}, {report['ins']} ins, "
        f"{report['del']} del, {report['sub']} sub ] {where}"
    )


def kaldi_wer_text(result: ScoreResult, out_dir: Path) -> str:
    return "".join(kaldi_wer_line(report, f"{out_dir} {name}") + "\n" for name, report in wer_json(result).items())


def _table_row(name: str, counts: ErrorCounts) -> str:
    wer = f"{counts.wer:.2f}" if counts.words else "n/a"  # a speaker may have only insertions
    cells = [name, wer, counts.substitutions, counts.deletions, counts.insertions, counts.words, counts.sentences]
    return "| " + " | ".join(str(cell) for cell in cells) + " |"


def markdown_table(rows: dict[str, ErrorCounts], first_column: str = "Subset") -> str:
    """A Markdown table, one row per entry of `rows`; WER in percent, the rest counts."""
    header = "| " + " | ".join((first_column,) + TABLE_COLUMNS) + " |"
    rule = "|---" + "|---:" * len(TABLE_COLUMNS) + "|"
    return "\n".join([header, rule] + [_table_row(name, counts) for name, counts in rows.items()]) + "\n"


def _column(word: AlignedWord) -> tuple[str, str, str]:
    """(ref, hyp, eval) cells of one alignment column; sclite's pra upper-cases errors."""
    if word.op == CORRECT:
        return word.ref or "", word.hyp or "", ""
    ref = word.ref.upper() if word.ref is not None else GAP
    hyp = word.hyp.upper() if word.hyp is not None else GAP
    return ref, hyp, word.op


def utterance_alignment(utt: UttAlignment) -> str:
    columns = [_column(word) for word in utt.words]
    widths = [max(len(cell) for cell in column) for column in columns]
    ref, hyp, ops = (" ".join(col[i].ljust(w) for col, w in zip(columns, widths)).rstrip() for i in range(3))
    c = utt.counts
    lines = [
        f"id: ({utt.utt})",
        f"speaker: {utt.speaker}",
        f"Scores: (#C #S #D #I) {c.correct} {c.substitutions} {c.deletions} {c.insertions}",
    ]
    if utt.hyp_missing:
        lines.append("Note: no hypothesis for this utterance; scored as all deletions")
    lines += [f"REF:  {ref}".rstrip(), f"HYP:  {hyp}".rstrip(), f"Eval: {ops}".rstrip()]
    return "\n".join(lines) + "\n"


def alignment_text(result: ScoreResult) -> str:
    header = (
        "# Per-utterance alignment of normalised words (noise tags, <unk>, fillers and partial\n"
        "# words removed). Errors in upper case; *** marks the missing side; C S D I = correct,\n"
        "# substitution, deletion, insertion.\n\n"
    )
    return header + "\n".join(utterance_alignment(utt) for utt in result.utterances)


def write_reports(result: ScoreResult, out_dir: str | os.PathLike, per_speaker: bool = True) -> list[Path]:
    """Write wer.json, wer.md, wer.txt, align.txt (and wer_by_speaker.md) into `out_dir`."""
    out_dir = Path(out_dir)
    written = {
        WER_JSON: json.dumps(wer_json(result), indent=2) + "\n",
        WER_MD: markdown_table(result.subsets),
        WER_TXT: kaldi_wer_text(result, out_dir),
        ALIGN_TXT: alignment_text(result),
    }
    if per_speaker:
        written[WER_BY_SPEAKER_MD] = markdown_table(result.speakers, first_column="Speaker")
    for name, text in written.items():
        write_text(out_dir / name, text)
    return [out_dir / name for name in written]
