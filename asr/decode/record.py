"""What the stage records of decoding and tuning name (asr/utils/record.py), so that both skip
by the one rule of `why_rerun` and run again exactly when something they read changed:

    decode   <exp_dir>/decode_<set><dir_suffix>/decode.record.json, one per set
    tune     <tuning_file's dir>/<its stem>.record.json (exp_dir/lm_tuning.record.json)

Options: the keys of the decode group that the decoder kind's output depends on (not those that
only say where or how fast the work runs: worker processes, torch threads, shares), the tuning
its grid and not the values it chooses; plus features.norm_vars, which the feature reader
applies. Inputs: the checkpoint decode.checkpoint
resolves to, the feature set and the data dir tables the set is read with, and per decoder kind
the tokenizer, the LM and its vocabulary, the HCLG graph, the alignment model, the lang dir and
the priors; a decode that uses the tuned values names the tuning file too, so a tuning that
chose other values decodes again.
"""

from __future__ import annotations

from pathlib import Path

from omegaconf import OmegaConf

from asr.data.datadir import data_set_dir
from asr.decode.output import decode_dir
from asr.features.featureset import feature_set_dir, feature_set_input
from asr.kaldi.pdf_counts import PDF_COUNTS_NAME
from asr.lm.build import WORDS, binary_path
from asr.models.checkpoint import CheckpointDir
from asr.text.tokenizer import tokenizer_model_path
from asr.utils.record import record_path

DECODE_STAGE, DECODE_RERUN = "decode", "python -m asr.decode"
TUNE_STAGE, TUNE_RERUN = "tune", "python -m asr.tune"
# The decode keys each kind's output depends on (worker processes, torch threads, shares and
# which sets are decoded only say where or how fast, never what).
COMMON_KEYS = ("kind", "checkpoint", "batch_size", "frame_shift_ms")
KIND_KEYS = {
    "greedy": (),
    "beam_lm": ("lm", "lexicon_words", "beam_size", "beam_size_token", "beam_threshold", "lm_weight", "word_score"),
    "loglikes": ("pdf_counts", "prior_scale", "upsample"),
    "wfst": (
        "pdf_counts",
        "prior_scale",
        "graph",
        "hmm_model",
        "acoustic_scale",
        "wfst_beam",
        "max_active",
        "lattice_beam",
    ),
}
# A decode that uses the tuning reads its result, the tuning file, as an input.
USES_TUNING = ("beam_lm", "wfst")
# The values the tuning chooses itself, at every point of its grid; and the grid.
TUNED_KEYS = ("lm_weight", "word_score", "acoustic_scale")
GRID_KEYS = {"beam_lm": ("tune_lm_weights", "tune_word_scores"), "wfst": ("tune_acoustic_scales",)}
# The data dir tables a decoded set's words and times are read with; tuning reads the references.
DECODE_TABLES = ("utt2spk", "segments", "reco2file_and_channel")
TUNE_TABLES = ("utt2spk", "text")


def _options(cfg, keys: tuple[str, ...]) -> dict:
    decode = OmegaConf.to_container(cfg.decode, resolve=True)
    options = {key: decode.get(key) for key in keys}
    options["norm_vars"] = cfg.features.norm_vars  # the feature reader's
    return options


def decode_options(cfg) -> dict:
    kind = cfg.decode.kind
    uses_tuning = ("use_tuned",) if kind in USES_TUNING else ()
    return _options(cfg, COMMON_KEYS + KIND_KEYS.get(kind, ()) + uses_tuning)


def tune_options(cfg) -> dict:
    kind = cfg.decode.kind
    searched = tuple(k for k in KIND_KEYS.get(kind, ()) if k not in TUNED_KEYS)
    return _options(cfg, COMMON_KEYS + searched + ("tune_set",) + GRID_KEYS.get(kind, ()))


def _model_inputs(cfg) -> list[Path]:
    """The checkpoint and, by decoder kind, what the search reads beside it."""
    d = cfg.decode
    inputs = [CheckpointDir(Path(cfg.exp_dir) / "checkpoints").resolve(str(d.checkpoint))]
    if d.kind in ("greedy", "beam_lm"):
        inputs.append(tokenizer_model_path(cfg.tokenizer))
    if d.kind == "beam_lm":
        lm = str(d.lm)
        if lm != "none":
            inputs.append(binary_path(cfg.lm.dir, cfg.lm.decode_order) if lm == "auto" else Path(lm))
        words = str(d.lexicon_words)
        inputs.append(Path(cfg.lm.dir) / WORDS if words == "auto" else Path(words))
    if d.kind in ("wfst", "loglikes"):
        inputs.append(Path(d.pdf_counts or Path(cfg.exp_dir) / PDF_COUNTS_NAME))
    if d.kind == "wfst":
        graph = Path(str(d.graph))
        inputs += [_recorded(graph, "graph", "HCLG.fst"), Path(str(d.hmm_model))]
        inputs.append(_recorded(Path(cfg.lang.dir), "lang", "words.txt"))
    return inputs


def _recorded(directory: Path, stage: str, otherwise: str) -> Path:
    """A directory another stage made, as an input: its stage record (written again whenever
    it is made again), else the file that stands for it."""
    record = record_path(directory, stage)
    return record if record.is_file() else directory / otherwise


def _set_inputs(cfg, set_name: str, tables: tuple[str, ...]) -> list[Path]:
    data = data_set_dir(cfg, set_name)
    return [feature_set_input(feature_set_dir(cfg, set_name))] + [data / name for name in tables]


def _existing(paths: list[Path]) -> list[Path]:
    return [p for p in paths if p.is_file()]


def decoded_from(cfg, set_name: str) -> tuple[dict, list[Path]]:
    """What a set's decode record names: the options and the inputs."""
    inputs = _model_inputs(cfg) + _set_inputs(cfg, set_name, DECODE_TABLES)
    if cfg.decode.kind in USES_TUNING and cfg.decode.use_tuned:
        inputs.append(Path(cfg.decode.tuning_file))
    return decode_options(cfg), _existing(inputs)


def decode_outputs(cfg, set_name: str) -> dict[str, bool]:
    """The files a set's decode wrote (names in its decode dir), each with a sha1 but archives."""
    names = ("loglikes.ark", "loglikes.scp") if cfg.decode.kind == "loglikes" else ("hyp.txt", "hyp.ctm", "skipped")
    return {name: not name.endswith(".ark") for name in names if (decode_dir(cfg, set_name) / name).is_file()}


def tuned_from(cfg) -> tuple[dict, list[Path]]:
    """What the tuning record names: the options and the inputs."""
    return tune_options(cfg), _existing(_model_inputs(cfg) + _set_inputs(cfg, cfg.decode.tune_set, TUNE_TABLES))


def tuning_record_dir(cfg) -> tuple[Path, str]:
    """Where the tuning record goes, and its name: beside the tuning file, named by its stem."""
    path = Path(cfg.decode.tuning_file)
    return path.parent, path.stem
