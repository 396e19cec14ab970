"""Where a GMM pass's jobs run (asr/gmm/jobs.py): local processes or a SLURM array a pass, here
against the stand-in SLURM of the recipe tests (tests/recipes/fake_slurm.py) that runs each task
as a process of its own. Training on the array gives the local run's tree and its model to the
run-to-run spread of two local runs (GMM training is not bit-reproducible: two local runs differ
in the last bits, which realignment carries on); a task that fails ends the pass naming its log."""

import json
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
from omegaconf import OmegaConf

from asr.gmm.config import GmmConfig
from asr.gmm.jobs import Jobs, SlurmJobs, make_jobs
from asr.gmm.train import run_gmm_training, training_data
from asr.utils.errors import InputError
from tests.gmm.handmade import HandmadeLang, sample_utterances, write_corpus
from tests.recipes import fake_slurm


def square_plus(task: int, offset: int) -> int:
    return task * task + offset


def sleep_or_fail(seconds: float, _: None) -> float:
    if seconds < 0:
        raise ValueError("a job failed")
    time.sleep(seconds)
    return seconds


@pytest.fixture
def slurm(tmp_path, monkeypatch):
    """The stand-in's sbatch, squeue and sacct first on PATH; returns its state dir."""
    state = tmp_path / "slurm_state"
    for name, value in fake_slurm.install(tmp_path / "bin", state).items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}:{Path('/usr/bin')}:{Path('/bin')}")
    monkeypatch.setenv("ASR_SLURM_POLL_S", "0.05")
    return state


def test_an_array_returns_the_local_results_in_task_order(slurm, tmp_path):
    with Jobs(1) as local, SlurmJobs(tmp_path / "jobs", "gmm.t", ["--mem=1G"]) as array:
        assert array.map(square_plus, [3, 1, 2], 10) == local.map(square_plus, [3, 1, 2], 10) == [19, 11, 14]
    [call] = fake_slurm.calls(slurm, "sbatch")
    assert fake_slurm.option(call["argv"], "array") == "0-2" and "--mem=1G" in call["argv"]
    assert not (tmp_path / "jobs").exists()  # the tasks' files are not left among a system's outputs


def test_a_failed_task_ends_the_pass_naming_its_log(slurm, tmp_path, monkeypatch):
    monkeypatch.setenv("FAKE_SLURM_FAIL", "gmm.t:1")
    with SlurmJobs(tmp_path / "jobs", "gmm.t", []) as array:
        with pytest.raises(InputError, match=r"slurm job \d+_1 FAILED \(exit 1:0\); its log: .*/run000/1.log"):
            array.map(square_plus, [3, 1, 2], 10)


def test_a_local_job_that_fails_ends_the_pass_at_once():
    """Not after the slow job submitted before it: its worker is ended with the pass."""
    with pytest.raises(ValueError, match="a job failed"):
        with Jobs(2) as jobs:
            assert jobs.map(sleep_or_fail, [0.0, 0.1], None) == [0.0, 0.1]
            begin = time.monotonic()
            jobs.map(sleep_or_fail, [60.0, -1.0], None)
    assert time.monotonic() - begin < 30  # not the 60 s of the first job


def gmm_config(**changes) -> GmmConfig:
    return GmmConfig(front_end="stored", delta_order=0, nj=2, num_iters=4, realign_iters=[1, 2], max_iter_inc=3,
                     total_gauss=20, init_utts=30, min_gaussian_occupancy=3, **changes)  # fmt: skip


def test_training_on_a_slurm_array_gives_the_local_model_and_alignments(slurm, tmp_path):
    lang = HandmadeLang()
    texts, feats, _ = sample_utterances(lang, 30)
    data_dir, feats_dir = write_corpus(tmp_path / "made", {u: [str(w) for w in t] for u, t in texts.items()}, feats)
    data = training_data(data_dir, feats_dir, lang)
    for name, submit in (("local", "local"), ("array", "slurm")):
        cfg = OmegaConf.structured(gmm_config(submit=submit, dir=str(tmp_path / name)))
        assert type(make_jobs(cfg, tmp_path)) is (SlurmJobs if submit == "slurm" else Jobs)
        run_gmm_training(SimpleNamespace(gmm=cfg), lang, data, data, tmp_path / name, ({}, []))
    assert (tmp_path / "array" / "tree").read_bytes() == (tmp_path / "local" / "tree").read_bytes()
    local, array = (json.loads((tmp_path / name / "summary.json").read_text()) for name in ("local", "array"))
    assert (array["num_pdfs"], array["num_gauss"]) == (local["num_pdfs"], local["num_gauss"])
    assert [p["frames"] for p in array["passes"]] == [p["frames"] for p in local["passes"]]
    for mine, theirs in zip(array["passes"], local["passes"]):  # two local runs: 1e-5 apart
        assert abs(mine["log_like_per_frame"] - theirs["log_like_per_frame"]) < 1e-3, (mine, theirs)
    assert (tmp_path / "array" / "ali.2.gz").is_file() and not list((tmp_path / "array").rglob("*.pkl"))
    arrays = fake_slurm.calls(slurm, "sbatch")
    assert len(arrays) > 4 and all(fake_slurm.option(c["argv"], "array") == "0-1" for c in arrays)  # nj tasks a pass


def test_decoding_jobs_take_runs_of_consecutive_utterances_and_keep_their_order(monkeypatch):
    from asr.gmm import decoding

    shares = []

    def decode_share(tasks, spec):
        shares.append([utt for utt, _, _ in tasks])
        return [(utt, [], model) for utt, _, model in tasks]

    monkeypatch.setattr(decoding, "decode_share", decode_share)
    feats = {f"u{i}": None for i in range(7)}
    with Jobs(1) as jobs:
        decoded = list(decoding.decode_all(decoding.job_decoding(jobs, "spec", 3), feats, "si"))
    assert shares == [["u0", "u1", "u2"], ["u3", "u4", "u5"], ["u6"]]
    assert decoded == [(f"u{i}", ([], "si")) for i in range(7)]
