"""`score.kind=hub5`: the set's hypothesis CTM against its stm with the GLM, by NIST SCTK
when installed (score.backend=auto|sctk) or by the native Python scorer (auto without
SCTK, with a warning; or score.backend=native).

Inputs: `<exp_dir>/decode_<set>/hyp.ctm`, and `stm`/`glm` of the data dir (the prepare
stage copies and fixes them; score.stm / score.glm point elsewhere). Outputs, besides the
shared reports: `decode_<set>/hub5/` with the filtered CTM (`hyp_filtered.ctm`), the stm and
GLM used, SCTK's reports (sys, raw, pra, dtl, ...) and `scorer.txt` naming the scorer.
Hub5 scoring never changes metric behind the user's back: a set without a readable stm or
GLM is an error (score sets such as train_dev, which have no stm, with score=jiwer). An empty
CTM is an error, unless hyp.txt shows the decoder ran and found no word (then all deletions,
with a warning).
"""

from __future__ import annotations

import logging
from pathlib import Path

from asr.data.ctm import read_ctm, write_ctm
from asr.data.stm import fix_stm, parse_stm
from asr.decode.output import decode_dir
from asr.score.hub5.ctm import filter_ctm
from asr.score.hub5.glm import read_glm
from asr.score.hub5.native import score_native, scoring_order
from asr.score.hub5.sctk import find_sctk, score_sctk
from asr.score.result import ScoreResult
from asr.utils.atomic import write_text
from asr.utils.errors import InputError
from asr.utils.textfile import read_text

log = logging.getLogger(__name__)

BACKENDS = ("auto", "sctk", "native")
FILTERED_CTM = "hyp_filtered.ctm"  # not hyp.ctm.filt: hubscr.pl writes that name itself


def reference_file(cfg, set_name: str, key: str) -> Path:
    choice = str(cfg.score.get(key, "auto"))
    return Path(cfg.data.data_dir) / set_name / key if choice == "auto" else Path(choice)


def glm_text(cfg, set_name: str) -> str:
    if str(cfg.score.get("glm", "auto")) == "none":
        raise InputError(
            "score.glm=none: Hub5 scores are defined with the GLM (without it contractions and spellings "
            "count as errors, a different metric); point score.glm at the GLM, or score with score=jiwer"
        )
    path = reference_file(cfg, set_name, "glm")
    read_glm(path)  # a missing or unreadable GLM is an InputError here, for both backends
    return read_text(path)


def stm_text(cfg, set_name: str) -> tuple[Path, str]:
    path = reference_file(cfg, set_name, "stm")
    if not path.is_file():
        where = "score.stm" if str(cfg.score.get("stm", "auto")) != "auto" else f"the data dir of {set_name}"
        raise InputError(
            f"{path}: no stm ({where}); score=hub5 scores against a Hub5 stm, so {set_name} "
            "cannot be scored that way; point score.stm at its stm, or score it with score=jiwer"
        )
    return path, read_text(path)


def decoded_utterances(decode_dir: Path) -> int:
    """Utterances in the decode stage's hyp.txt (0 without one): evidence the decoder ran."""
    hyp_txt = decode_dir / "hyp.txt"
    return (
        sum(1 for line in hyp_txt.read_text(encoding="utf-8").splitlines() if line.strip()) if hyp_txt.is_file() else 0
    )


def choose_backend(cfg):
    backend = str(cfg.score.get("backend", "auto"))
    if backend not in BACKENDS:
        raise InputError(f"score.backend={backend!r}: choose one of {', '.join(BACKENDS)}")
    sctk_dir = find_sctk(str(cfg.score.get("sctk_bin", "")))
    if backend == "sctk" and sctk_dir is None:
        raise InputError(
            "score.backend=sctk but NIST SCTK (hubscr.pl, sclite) was not found; "
            "`make install` installs the Debian package sctk, or set score.sctk_bin"
        )
    if backend == "auto" and sctk_dir is None:
        log.warning(
            "NIST SCTK not found (Debian package sctk; `make install`): scoring with the native Python scorer instead"
        )
        return "native", None
    return ("native", None) if backend == "native" else ("sctk", sctk_dir)


def scorer_name(cfg) -> str:
    """The scorer score_hub5 uses ("native", or SCTK and its directory), without its warnings:
    the two may count a few words differently, so it is one of a score's options."""
    backend = str(cfg.score.get("backend", "auto"))
    sctk_dir = None if backend == "native" else find_sctk(str(cfg.score.get("sctk_bin", "")))
    return f"sctk {sctk_dir}" if sctk_dir is not None else "native"


def score_hub5(cfg, set_name: str) -> ScoreResult:
    stm_path, stm = stm_text(cfg, set_name)
    glm = glm_text(cfg, set_name)
    out_dir = decode_dir(cfg, set_name)
    words = read_ctm(out_dir / "hyp.ctm", allow_empty=decoded_utterances(out_dir) > 0)
    if not words:
        log.warning(
            "%s: the decoder hypothesised no word for any of its %d utterances; scored as all deletions",
            out_dir,
            decoded_utterances(out_dir),
        )
    kept = filter_ctm(words)
    log.info(
        "%s: %d of %d hypothesis words kept after removing noise tags, <unk>, hesitations and partial words",
        set_name,
        len(kept),
        len(words),
    )
    work_dir = out_dir / "hub5"
    write_ctm(work_dir / FILTERED_CTM, kept)
    backend, sctk_dir = choose_backend(cfg)
    if backend == "sctk":
        result = score_sctk(sctk_dir, work_dir, fix_stm(stm), [str(w) for w in kept], glm)
    else:
        glm_path = work_dir / "glm"
        write_text(glm_path, glm)
        result = score_native(scoring_order(parse_stm(fix_stm(stm), str(stm_path))), kept, read_glm(glm_path))
    write_text(work_dir / "scorer.txt", f"{backend}\n")
    log.info(
        "%s: scored with %s",
        set_name,
        "NIST SCTK hubscr.pl/sclite" if backend == "sctk" else "the native Python Hub5 scorer",
    )
    return result
