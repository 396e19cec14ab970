"""Decoding and tuning split into shares of a set's utterances, as Kaldi's decode.sh splits a data
dir into `nj` parts: `decode.split.count=N decode.split.index=I` decodes share I alone (a cluster
array task each), `decode.split.count=N` alone (index -1) merges the N shares into what one
local run writes.

    decode:  <exp_dir>/decode_<set>.shares/I-of-N/{hyp.txt,hyp.ctm,skipped,share.json}
             -> decode_<set>/{hyp.txt,hyp.ctm,skipped}, the shares' dir removed
    tune:    <tuning_file stem>.shares/I-of-N.json (refs and every grid point's hypotheses)
             -> decode.tuning_file, scored over the whole set as one local run scores it

A share is a run of consecutive utterances (in the feature set's sorted order) with about
equal frames, the same for every process given the same N; which utterances share I holds
depends only on the feature set, never on the other shares.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from pathlib import Path

from asr.data.ctm import CtmWord, read_ctm, write_ctm
from asr.decode.output import decode_dir, evaluation_sets, report_skipped, write_hyp_text
from asr.kaldi.table import read_table
from asr.utils.atomic import write_text
from asr.utils.errors import InputError


@dataclass(frozen=True)
class Split:
    count: int  # 0: not split
    index: int  # the share this process decodes; -1: merge the shares

    @classmethod
    def of(cls, cfg) -> "Split":
        split = cfg.decode.get("split") or {}
        count, index = int(split.get("count", 0)), int(split.get("index", -1))
        if count and not -1 <= index < count:
            raise InputError(f"decode.split.index={index}: choose 0 .. {count - 1}, or -1 to merge the shares")
        return cls(count, index)

    @property
    def is_share(self) -> bool:
        return self.count > 0 and self.index >= 0

    @property
    def is_merge(self) -> bool:
        return self.count > 0 and self.index < 0

    @property
    def name(self) -> str:
        return f"{self.index}-of-{self.count}"


def share_utterances(utts: list[str], frames: dict[str, int], split: Split) -> list[str]:
    """Share `split.index` of `utts`: the consecutive run whose utterances' middle frames, counted
    over all of them, fall in the share's equal slice of the total."""
    total = max(1, sum(frames[u] for u in utts))
    chosen, done = [], 0
    for utt in utts:
        if min(split.count - 1, (2 * done + frames[utt]) * split.count // (2 * total)) == split.index:
            chosen.append(utt)
        done += frames[utt]
    return chosen


def shares_dir(cfg, set_name: str) -> Path:
    out = decode_dir(cfg, set_name)
    return out.with_name(out.name + ".shares")


def output_dir(cfg, set_name: str) -> Path:
    """Where a decode writes a set's hypotheses: its decode dir, or its share's dir."""
    split = Split.of(cfg)
    return shares_dir(cfg, set_name) / split.name if split.is_share else decode_dir(cfg, set_name)


def write_share_record(out_dir: Path, split: Split, utterances: int) -> None:
    """Written last: a share dir without it is incomplete."""
    write_text(out_dir / "share.json", json.dumps({"share": split.name, "utterances": utterances}) + "\n")


def write_decoded(cfg, set_name: str, hyps: dict[str, str], ctm: list[CtmWord], skipped: dict[str, str]) -> Path:
    """hyp.txt, hyp.ctm and skipped into the set's decode dir (a split run: its share's dir)."""
    out_dir = output_dir(cfg, set_name)
    write_hyp_text(out_dir / "hyp.txt", hyps)
    write_ctm(out_dir / "hyp.ctm", ctm)
    report_skipped(out_dir, set_name, skipped)
    if Split.of(cfg).is_share:
        write_share_record(out_dir, Split.of(cfg), len(hyps))
    return out_dir


def complete_shares(base: Path, count: int, what: str, marker: str) -> list[Path]:
    """The N shares under `base` (share I complete when `base/I-of-N<marker>` exists), or an
    InputError naming the first missing one and the command that makes it."""
    shares = [base / Split(count, i).name for i in range(count)]
    for i, path in enumerate(shares):
        if not Path(f"{path}{marker}").is_file():
            raise InputError(
                f"{path}{marker}: share {i} missing or incomplete; run {what} decode.split.count={count} "
                f"decode.split.index={i} first"
            )
    return shares


def merge_decoded(cfg, sets: list[str] | None = None) -> list[Path]:
    """decode.split.index=-1: every set's (of `sets`, else decode.sets) shares joined into its
    decode dir (sorted as one run writes them), then the shares removed."""
    count = Split.of(cfg).count
    out_dirs = []
    for set_name in sets or evaluation_sets(cfg):
        dirs = complete_shares(shares_dir(cfg, set_name), count, "python -m asr.decode", "/share.json")
        hyps: dict[str, str] = {}
        ctm: list[CtmWord] = []
        skipped = ""
        for path in dirs:
            hyps.update(read_table(path / "hyp.txt", allow_empty_value=True))
            ctm.extend(read_ctm(path / "hyp.ctm", allow_empty=True))
            skipped += (path / "skipped").read_text() if (path / "skipped").is_file() else ""
        out = decode_dir(cfg, set_name)
        write_hyp_text(out / "hyp.txt", hyps)
        write_ctm(out / "hyp.ctm", ctm)
        if skipped:
            write_text(out / "skipped", "".join(sorted(skipped.splitlines(keepends=True))))
        else:
            (out / "skipped").unlink(missing_ok=True)
        shutil.rmtree(shares_dir(cfg, set_name))
        out_dirs.append(out)
    return out_dirs


def tune_shares_dir(cfg) -> Path:
    path = Path(cfg.decode.tuning_file)
    return path.with_name(path.stem + ".shares")


def write_tune_share(cfg, refs: dict[str, str], points: list[tuple[dict, dict[str, str]]]) -> Path:
    """One tuning share: its references and, per grid point, its hypotheses."""
    path = tune_shares_dir(cfg) / f"{Split.of(cfg).name}.json"
    grid = [{"point": point, "hyps": hyps} for point, hyps in points]
    write_text(path, json.dumps({"refs": refs, "grid": grid}) + "\n")
    return path


def read_tune_shares(cfg) -> tuple[dict[str, str], list[tuple[dict, dict[str, str]]]]:
    """The shares of a split tuning joined: all references, and per grid point all hypotheses."""
    count = Split.of(cfg).count
    base = tune_shares_dir(cfg)
    refs: dict[str, str] = {}
    points: list[tuple[dict, dict[str, str]]] = []
    for path in complete_shares(base, count, "python -m asr.tune", ".json"):
        share = json.loads(Path(f"{path}.json").read_text())
        refs.update(share["refs"])
        if not points:
            points = [(g["point"], {}) for g in share["grid"]]
        if [g["point"] for g in share["grid"]] != [p for p, _ in points]:
            raise InputError(f"{base}: the shares were tuned over different grids; run the tune shares again")
        for (_, hyps), g in zip(points, share["grid"]):
            hyps.update(g["hyps"])
    return refs, points
