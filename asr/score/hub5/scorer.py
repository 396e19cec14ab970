"""`score.kind=hub5`: the set's hypothesis CTM against its stm with the GLM, by NIST SCTK
when installed (score.backend=auto|sctk) or by the native Python scorer (auto without
SCTK, with a warning; or score.backend=native).

Inputs: `<exp_dir>/decode_<set>/hyp.ctm`, and `stm`/`glm` of the data dir (the prepare
stage copies and fixes them; score.stm / score.glm point elsewhere). Outputs, besides the
shared reports: `decode_<set>/hub5/` with the filtered CTM (`hyp_filtered.ctm`), the stm and
GLM used, SCTK's reports (sys, raw, pra, dtl, ...) and `scorer.txt` naming the scorer.
A set without an stm is not a Hub5 set (train_dev): it is scored with jiwer, and the log
says so. An empty CTM is an error, unless hyp.txt shows the decoder ran and found no word
(then all deletions, with a warning). A missing GLM is an error unless score.glm=none (then scored without one, logged).
"""

from __future__ import annotations

import logging
from pathlib import Path

from asr.decode.output import decode_dir
from asr.score.hub5.ctm import filter_ctm, read_ctm, write_ctm_words
from asr.score.hub5.glm import read_glm
from asr.score.hub5.native import score_native
from asr.score.hub5.sctk import find_sctk, score_sctk
from asr.score.hub5.stm import parse_stm
from asr.score.result import ScoreResult
from asr.utils.atomic import write_text
from asr.utils.errors import InputError

log = logging.getLogger(__name__)

EMPTY_GLM = "* name \"none\"\n* format = 'NIST1'\n* max_nrules = '1'\n* copy_no_hit = 'T'\n* case_sensitive = 'F'\n"
BACKENDS = ("auto", "sctk", "native")
FILTERED_CTM = "hyp_filtered.ctm"  # not hyp.ctm.filt: hubscr.pl writes that name itself


def reference_file(cfg, set_name: str, key: str) -> Path:
    choice = str(cfg.score.get(key, "auto"))
    return Path(cfg.data.data_dir) / set_name / key if choice == "auto" else Path(choice)


def glm_text(cfg, set_name: str) -> str:
    if str(cfg.score.get("glm", "auto")) == "none":
        log.warning("score.glm=none: scoring without a GLM (contractions, spellings and hesitations are not mapped)")
        return EMPTY_GLM
    path = reference_file(cfg, set_name, "glm")
    read_glm(path)  # a missing or unreadable GLM is an InputError here, for both backends
    return path.read_text(encoding="utf-8", errors="replace")


def decoded_utterances(decode_dir: Path) -> int:
    """Utterances in the decode stage's hyp.txt (0 without one): evidence the decoder ran."""
    hyp_txt = decode_dir / "hyp.txt"
    return sum(1 for line in hyp_txt.read_text(encoding="utf-8").splitlines() if line.strip()) if hyp_txt.is_file() else 0


def choose_backend(cfg):
    backend = str(cfg.score.get("backend", "auto"))
    if backend not in BACKENDS:
        raise InputError(f"score.backend={backend!r}: choose one of {', '.join(BACKENDS)}")
    sctk_dir = find_sctk(str(cfg.score.get("sctk_bin", "")))
    if backend == "sctk" and sctk_dir is None:
        raise InputError("score.backend=sctk but NIST SCTK (hubscr.pl, sclite) was not found; `make install` installs the Debian package sctk, or set score.sctk_bin")
    if backend == "auto" and sctk_dir is None:
        log.warning("NIST SCTK not found (Debian package sctk; `make install`): scoring with the native Python scorer instead")
        return "native", None
    return ("native", None) if backend == "native" else ("sctk", sctk_dir)


def score_hub5(cfg, set_name: str) -> ScoreResult:
    from asr.score.stage import score_with_jiwer  # the stage module registers this scorer

    stm_path = reference_file(cfg, set_name, "stm")
    if not stm_path.is_file():
        log.warning("%s: no stm, so %s is not a Hub5 set; scored with jiwer against its text", stm_path, set_name)
        return score_with_jiwer(cfg, set_name)
    stm_text = stm_path.read_text(encoding="utf-8", errors="replace")
    glm = glm_text(cfg, set_name)
    out_dir = decode_dir(cfg, set_name)
    words = read_ctm(out_dir / "hyp.ctm", allow_empty=decoded_utterances(out_dir) > 0)
    if not words:
        log.warning("%s: the decoder hypothesised no word for any of its %d utterances; scored as all deletions", out_dir, decoded_utterances(out_dir))
    kept = filter_ctm(words)
    log.info("%s: %d of %d hypothesis words kept after removing noise tags, <unk>, hesitations and partial words", set_name, len(kept), len(words))
    work_dir = out_dir / "hub5"
    write_ctm_words(work_dir / FILTERED_CTM, kept)
    backend, sctk_dir = choose_backend(cfg)
    if backend == "sctk":
        from asr.data.hub5 import fix_stm

        result = score_sctk(sctk_dir, work_dir, fix_stm(stm_text), [str(w) for w in kept], glm)
    else:
        glm_path = work_dir / "glm"
        write_text(glm_path, glm)
        result = score_native(parse_stm(stm_text, str(stm_path)), kept, read_glm(glm_path))
    write_text(work_dir / "scorer.txt", f"{backend}\n")
    log.info("%s: scored with %s", set_name, "NIST SCTK hubscr.pl/sclite" if backend == "sctk" else "the native Python Hub5 scorer")
    return result
