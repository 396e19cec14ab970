"""Commands in data files (wav.scp `cmd |`, feats.scp/cmvn.scp pipes): validate and fix never run
them unless given --run-commands, and say so; the stages that read audio or features run them
as Kaldi does (and log it), or refuse them with data.run_commands=false; our own writers never
write one."""

from __future__ import annotations

import logging
import shlex

import kaldiio
import numpy as np
import pytest

from asr.data.audio import shell_command
from asr.data.datadir import read_data_dir
from asr.data.fix import main as fix_main
from asr.data.perturb import perturb_data_dir
from asr.data.prepare import prepare_data
from asr.data.validate import main as validate_main
from asr.features.logmel.extract import extract_set
from asr.features.featureset import FeatureReader
from asr.kaldi import commands
from tests.data.conftest import build_ldc_tree
from tests.faults.conftest import fbank_options, features_overrides, run_stage, tone, write_wav_data_dir


@pytest.fixture
def piped(tmp_path):
    """A data dir whose second recording is `touch <marker>; cat <wav> |`."""
    data = write_wav_data_dir(tmp_path, {f"sw0200{i}-A": tone(1.0, i) for i in range(1, 4)})
    marker = tmp_path / "COMMAND RAN"
    wav_scp = data / "wav.scp"
    lines = wav_scp.read_text().splitlines()
    key, path = lines[1].split(maxsplit=1)
    lines[1] = f"{key} touch {shlex.quote(str(marker))}; cat {shlex.quote(path)} |"
    wav_scp.write_text("\n".join(lines) + "\n")
    return data, marker


def test_validate_does_not_run_a_command_unless_asked(piped, capsys):
    data, marker = piped
    assert validate_main([str(data)]) == 0
    out = capsys.readouterr()
    assert not marker.exists()
    assert f"{data}: valid (1 notes above" in out.out
    assert f"note: {data / 'wav.scp'}:2: a command, not run, so its audio is unchecked: touch" in out.err
    assert validate_main(["--run-commands", str(data)]) == 0
    assert marker.exists() and "note:" not in capsys.readouterr().err


def test_fix_does_not_run_a_command_unless_asked_and_keeps_its_utterances(piped, capsys):
    data, marker = piped
    assert fix_main([str(data)]) == 0
    out = capsys.readouterr().out
    assert not marker.exists(), out
    assert "kept 3 of 3 utterances" in out
    assert "wav.scp: 1 entries are commands, not run, so their utterances are kept unchecked" in out
    assert fix_main(["--run-commands", str(data)]) == 0 and marker.exists()


def test_features_stage_runs_commands_as_kaldi_does_or_refuses_them(piped, tmp_path, caplog):
    data, marker = piped
    for name in ("dev", "eval"):
        write_wav_data_dir(tmp_path, {f"{name}-A": tone(0.5)}, name)
    proc = run_stage("asr.features", features_overrides(tmp_path, "data.run_commands=false"), cwd=tmp_path)
    assert proc.returncode == 2 and not marker.exists()
    assert (
        f'{data / "wav.scp"}:2: entry sw02002-A is a command ("touch' in proc.stderr
        and "not run (1 such entries): a data dir is trusted code" in proc.stderr
    )
    with caplog.at_level(logging.WARNING):  # the default, in-process: run, as Kaldi does
        summary = extract_set(data, tmp_path / "feats" / "train", fbank_options())
    assert marker.exists() and summary.utterances == 3
    assert f"{data / 'wav.scp'}: 1 entries are commands, run by /bin/sh as Kaldi does" in caplog.text


def test_feature_pipes_read_through_kaldiio_follow_the_same_policy(tmp_path, caplog):
    feats = tmp_path / "feats"
    feats.mkdir()
    kaldiio.save_mat(str(feats / "u1.mat"), np.ones((5, 3), dtype=np.float32))
    marker = tmp_path / "PIPE RAN"
    (feats / "feats.scp").write_text(
        f"u1 touch {shlex.quote(str(marker))}; cat {shlex.quote(str(feats / 'u1.mat'))} |\n"
    )
    (feats / "feat_dim").write_text("3\n")
    (feats / "utt2num_frames").write_text("u1 5\n")
    (feats / "cmvn_type").write_text("none\n")
    with commands.policy(run=False), pytest.raises(commands.CommandNotRun, match=r"feats.scp:1: entry u1 is a command"):
        FeatureReader(feats, {"u1": "u1"})
    assert not marker.exists()
    with commands.policy(run=True), caplog.at_level(logging.WARNING):
        reader = FeatureReader(feats, {"u1": "u1"})
        assert reader("u1").shape == (5, 3)
    assert marker.exists() and "feats.scp: 1 entries are commands, run by /bin/sh as Kaldi does" in caplog.text


def test_our_writers_never_write_a_command(tmp_path):
    tree = build_ldc_tree(tmp_path / "ldc")
    from omegaconf import OmegaConf

    from asr.data.config import DataConfig

    cfg = OmegaConf.structured(
        DataConfig(
            name="t",
            swbd_dir=str(tree.swbd_dir),
            ms98_dir=str(tree.ms98_dir),
            eval2000_dir=str(tree.eval2000_dir),
            eval2000_text_dir=str(tree.eval2000_text_dir),
            fisher_dirs=[],
            data_dir=str(tmp_path / "data"),
            dev_utts=2,
            expected_sph_files=3,
        )
    )
    written = prepare_data(cfg)
    for path in written.values():
        d = read_data_dir(path)
        assert d.wav_scp and all(shell_command(value) is None for value in d.wav_scp.values()), path
        perturbed, _ = perturb_data_dir(d, 0.9)
        assert all(shell_command(value) is None for value in perturbed.wav_scp.values())
