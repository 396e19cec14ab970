"""Configuration of corpus locations and data-dir names (Hydra group `data`)."""

from dataclasses import dataclass, field
from typing import ClassVar

from omegaconf import MISSING

from asr.utils.checks import AT_LEAST_ONE, FRACTION, NON_NEGATIVE, POSITIVE, Check, one_of, subset_of


@dataclass
class DataConfig:
    name: str = MISSING
    # LDC corpus locations; options, never paths in code.
    swbd_dir: str = MISSING  # LDC97S62: swb1_d{1..4}/data/sw0NNNN.sph
    ms98_dir: str = MISSING  # swb_ms98_transcriptions/NN/NNNN/swNNNNA-ms98-a-trans.text
    eval2000_dir: str = MISSING  # LDC2002S09/hub5e_00: english/*.sph, english/hub5e_00.pem
    eval2000_text_dir: str = MISSING  # LDC2002T43: reference/*.stm, *.glm
    # SWB-2000 adds Fisher English: the release dirs (LDC2004T19 LDC2005T19 LDC2004S13
    # LDC2005S13) or their folders (fe_03_p1_tran, fe_03_p1_sph1, ...); [] = SWB-300 only.
    fisher_dirs: list[str] = MISSING
    expected_fisher_files: int = 11699  # release count of each of transcripts and audio
    # A conversation side with audio but no transcript: skip (counted and named) | error.
    missing_transcript: str = "skip"
    # Cap repeated training transcripts as Kaldi's train_nodup does (remove_dup_utts.sh 300);
    # 0 keeps every utterance.
    max_duplicates: int = 0
    # Also write the training transcripts, one sentence a line, here (the LM's text); "" = no.
    lm_text: str = ""
    data_dir: str = "data"  # Kaldi data dirs are written to <data_dir>/<set>
    train_set: str = "train"
    dev_set: str = "train_dev"
    eval_set: str = "eval2000"
    dev_utts: int = 4000  # first N utterances held out of training (Kaldi's train_dev)
    expected_sph_files: int = 2435  # release count; fewer found -> warning naming the gap
    # Data dirs the prepare stage writes: train/dev (Switchboard-1), eval (Hub5-2000).
    prepare_sets: list[str] = field(default_factory=lambda: ["train", "dev", "eval"])
    # The prepare stage fails when more than this share of a corpus' recordings is unreadable
    # (their utterances are dropped and named in the log below it).
    max_unreadable: float = 0.05
    # Commands in data files (wav.scp `cmd |`, feats.scp/cmvn.scp pipes) are run by the stages
    # that read the audio or features, through /bin/sh as Kaldi does: a data dir is trusted
    # code. false: such an entry is an error naming its file and line. (validate and fix never
    # run them unless given --run-commands.)
    run_commands: bool = True

    CHECKS: ClassVar[dict[str, Check]] = {
        "expected_fisher_files": NON_NEGATIVE,
        "missing_transcript": one_of("skip", "error"),
        "max_duplicates": NON_NEGATIVE,
        "dev_utts": NON_NEGATIVE,
        "expected_sph_files": NON_NEGATIVE,
        "prepare_sets": subset_of("train", "dev", "eval"),
        "max_unreadable": FRACTION,
    }


@dataclass
class SynthConfig:
    """The synthetic LDC-format corpus (python -m asr.data.synth; Hydra group `synth`)."""

    out_dir: str = "corpus"  # relative to the cwd (the recipe dir)
    seed: int = 1  # the same config gives byte-identical files
    jobs: int = 2  # worker processes, each with its own eSpeak NG
    train_conversations: int = 40  # Switchboard-1 style, sw0NNNN.sph + MS98 transcripts
    train_speakers: int = 60  # pool the training conversations draw their two sides from
    conversation_minutes: float = 3.5  # target length of a training conversation
    eval_swb_conversations: int = 4  # Hub5-2000 sw_4NNN (Switchboard-like)
    eval_callhome_conversations: int = 4  # Hub5-2000 en_4NNN (CallHome-like, harder)
    eval_conversation_minutes: float = 3.0
    # Fisher English style conversations (fe_03_NNNNN, parts 1 and 2) for SWB-2000 recipes.
    fisher_conversations: int = 0
    # Defects of the real releases to reproduce, any of asr.data.synth.quirks.QUIRKS:
    # asides, missing_side, past_end, shorten, stm_typos, unsorted. None by default.
    quirks: list[str] = field(default_factory=list)
    force: bool = False  # rebuild even if out_dir holds a corpus made with this config

    CHECKS: ClassVar[dict[str, Check]] = {
        "jobs": AT_LEAST_ONE,
        "train_conversations": AT_LEAST_ONE,
        "train_speakers": AT_LEAST_ONE,
        "conversation_minutes": POSITIVE,
        "eval_swb_conversations": NON_NEGATIVE,
        "eval_callhome_conversations": NON_NEGATIVE,
        "eval_conversation_minutes": POSITIVE,
        "fisher_conversations": NON_NEGATIVE,
        "quirks": subset_of("asides", "missing_side", "past_end", "shorten", "stm_typos", "unsorted"),
    }
