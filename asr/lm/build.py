"""The LM stage: training text -> one modified Kneser-Ney LM per order (ARPA and KenLM
binary), and perplexity on the reference text of the evaluation sets.

Files in `lm.dir`: `text.txt` (training sentences), `words.txt` (vocabulary with counts),
`<N>gram.arpa`, `<N>gram.bin`, `perplexity.json` ({"<N>gram": {set: {...}}}), and one stage
record per order, `<N>gram.record.json` (asr/utils/record.py), written after its LM: an order
whose record matches its options and training texts is skipped, so a re-run after an
interruption continues where it stopped and an edited transcript re-trains. Readers verify the
ARPA, the binary and `words.txt` against it before use.
"""

from __future__ import annotations

import json
import logging
import tempfile
from pathlib import Path

from asr.kaldi.table import read_table
from asr.lm.corpus import write_corpus
from asr.lm.perplexity import Perplexity, perplexity
from asr.lm.tools import kenlm_tool, run_tool
from asr.utils.atomic import atomic_path, write_text
from asr.utils.errors import InputError
from asr.utils.record import why_rerun, write_record

log = logging.getLogger(__name__)

RERUN = "python -m asr.lm"
TEXT = "text.txt"
WORDS = "words.txt"
PERPLEXITY_JSON = "perplexity.json"


def arpa_path(lm_dir: str | Path, order: int) -> Path:
    return Path(lm_dir) / f"{order}gram.arpa"


def binary_path(lm_dir: str | Path, order: int) -> Path:
    return Path(lm_dir) / f"{order}gram.bin"


def lmplz_command(lm_cfg, order: int, text: Path, arpa: Path, tmp_dir: str) -> list:
    command = [
        kenlm_tool("lmplz", lm_cfg.kenlm_bin),
        "-o",
        order,
        "--text",
        text,
        "--arpa",
        arpa,
        "-S",
        lm_cfg.memory,
        "-T",
        tmp_dir,
    ]
    if lm_cfg.discount_fallback:
        command.append("--discount_fallback")
    if lm_cfg.prune:
        if len(lm_cfg.prune) > order:
            raise InputError(f"lm.prune={list(lm_cfg.prune)} has more thresholds than the order {order}")
        command += ["--prune", *lm_cfg.prune]
    return command


def train_lm(lm_cfg, order: int, text: Path) -> Path:
    """lmplz -> ARPA, build_binary -> KenLM probing binary; returns the binary's path."""
    lm_dir = Path(lm_cfg.dir)
    arpa, binary = arpa_path(lm_dir, order), binary_path(lm_dir, order)
    with tempfile.TemporaryDirectory(dir=lm_dir) as tmp_dir, atomic_path(arpa) as tmp_arpa:
        run_tool(lmplz_command(lm_cfg, order, text, tmp_arpa, tmp_dir), f"lmplz (order {order})")
    with atomic_path(binary) as tmp_binary:
        run_tool([kenlm_tool("build_binary", lm_cfg.kenlm_bin), arpa, tmp_binary], f"build_binary {arpa}")
    log.info("%d-gram LM: %s (%.1f MB), %s", order, arpa, arpa.stat().st_size / 1e6, binary)
    return binary


def reference_sentences(data_dir: str | Path, set_name: str) -> list[str]:
    text = Path(data_dir) / set_name / "text"
    if not text.is_file():
        raise InputError(
            f"{text}: reference text for the perplexity not found; run the prepare stage or fix lm.perplexity_sets"
        )
    return [t for t in read_table(text, allow_empty_value=True).values() if t.strip()]


def report_perplexities(cfg, binaries: dict[int, Path]) -> dict:
    report: dict = {}
    for order, binary in binaries.items():
        for set_name in cfg.lm.perplexity_sets:
            ppl: Perplexity = perplexity(binary, reference_sentences(cfg.data.data_dir, set_name), cfg.lm.kenlm_bin)
            report.setdefault(f"{order}gram", {})[set_name] = ppl.as_dict()
            log.info(
                "%d-gram perplexity on %s: %.1f (%.1f without the %d OOVs of %d tokens)",
                order,
                set_name,
                ppl.perplexity,
                ppl.perplexity_without_oovs,
                ppl.oovs,
                ppl.tokens,
            )
    write_text(Path(cfg.lm.dir) / PERPLEXITY_JSON, json.dumps(report, indent=2) + "\n")
    return report


def order_options(lm_cfg, order: int) -> dict:
    """What changes an order's LM (lmplz's memory and the tools' location do not)."""
    prune = list(lm_cfg.prune)
    return {
        "order": order,
        "discount_fallback": bool(lm_cfg.discount_fallback),
        "prune": prune,
        "extra_text_has_ids": bool(lm_cfg.extra_text_has_ids),
    }


def training_sources(cfg) -> list[tuple[Path, bool]]:
    sources = [(Path(cfg.data.data_dir) / cfg.data.train_set / "text", True)]
    sources += [(Path(p), bool(cfg.lm.extra_text_has_ids)) for p in cfg.lm.extra_text]
    return sources


def build_lms(cfg) -> dict[int, Path]:
    """The LM stage; returns {order: binary path}."""
    if not cfg.lm.orders:
        raise InputError("lm.orders is empty; give at least one n-gram order, e.g. lm.orders=[3,4]")
    lm_dir = Path(cfg.lm.dir)
    lm_dir.mkdir(parents=True, exist_ok=True)
    sources = training_sources(cfg)
    inputs = [path for path, _ in sources]
    orders = sorted(int(o) for o in cfg.lm.orders)
    reasons = {o: why_rerun(lm_dir, "lm", order_options(cfg.lm, o), inputs, name=f"{o}gram") for o in orders}
    text = lm_dir / TEXT
    if any(reasons.values()):
        sentences, words = write_corpus(sources, text, lm_dir / WORDS)
        log.info("LM training text: %d sentences, %d words -> %s", sentences, words, text)
    binaries = {}
    for order in orders:
        if reasons[order] is None:
            log.info("%d-gram LM %s is up to date; skipping", order, binary_path(lm_dir, order))
        else:
            log.info("%d-gram LM: training (%s)", order, reasons[order])
            train_lm(cfg.lm, order, text)
            outputs = {arpa_path(lm_dir, order).name: True, binary_path(lm_dir, order).name: True, WORDS: True}
            write_record(lm_dir, "lm", RERUN, order_options(cfg.lm, order), inputs, outputs, name=f"{order}gram")
        binaries[order] = binary_path(lm_dir, order)
    report_perplexities(cfg, binaries)
    return binaries
