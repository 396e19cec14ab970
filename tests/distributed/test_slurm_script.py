"""The SLURM example launches one torchrun per node with a c10d rendezvous on the first node
(run with stand-ins for scontrol and srun that record what they are asked)."""

import os
import signal
import stat
import subprocess
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "scripts" / "slurm" / "train.sbatch"


def fake(bin_dir: Path, name: str, body: str) -> None:
    path = bin_dir / name
    path.write_text("#!/usr/bin/env bash\n" + body)
    path.chmod(path.stat().st_mode | stat.S_IEXEC)


def test_sbatch_script_starts_torchrun_on_every_node_with_the_first_as_rendezvous(tmp_path):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake(bin_dir, "scontrol", 'printf "gpu-node07\\ngpu-node08\\ngpu-node09\\n"\n')
    fake(bin_dir, "srun", f'printf "%s\\n" "$@" > {tmp_path}/srun.args\n')
    env = dict(
        os.environ,
        PATH=f"{bin_dir}:{os.environ['PATH']}",
        SLURM_JOB_NODELIST="gpu-node[07-09]",
        SLURM_JOB_NUM_NODES="3",
        SLURM_GPUS_ON_NODE="8",
        SLURM_JOB_ID="4242",
        SLURM_SUBMIT_DIR=str(REPO / "recipes" / "mini"),
        ASR_RDZV_PORT="29611",
    )
    proc = subprocess.run(
        ["bash", str(SCRIPT), "distributed=hadpsgd", "exp_name=h3x8"], env=env, capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stderr
    args = (tmp_path / "srun.args").read_text().split("\n")
    line = " ".join(args)
    assert "--ntasks-per-node=1" in args and "torchrun" in args
    assert "--nnodes 3 --nproc-per-node 8 --max-restarts 3 --rdzv-id 4242" in line
    assert "--rdzv-backend c10d --rdzv-endpoint gpu-node07:29611 -m asr.train distributed=hadpsgd exp_name=h3x8" in line
    assert "3 nodes x 8 processes, rendezvous on gpu-node07" in proc.stderr


def test_sbatch_script_refuses_a_knob_that_is_not_an_integer(tmp_path):
    env = dict(
        os.environ,
        SLURM_JOB_NODELIST="n1",
        SLURM_JOB_NUM_NODES="1",
        SLURM_JOB_ID="1",
        SLURM_SUBMIT_DIR=str(REPO / "recipes/mini"),
        ASR_NPROC_PER_NODE="8 --rdzv-endpoint elsewhere",
    )
    proc = subprocess.run(["bash", str(SCRIPT), "exp_name=x"], env=env, capture_output=True, text=True, cwd=tmp_path)
    assert proc.returncode == 2
    assert "processes per node '8 --rdzv-endpoint elsewhere': expected a non-negative integer" in proc.stderr


def test_sbatch_script_passes_a_signal_on_as_sigterm_and_requeues_the_job(tmp_path):
    """SLURM's USR1 before the time limit reaches the script; it sends SIGTERM to the training
    step (which saves and exits 75) and requeues the job."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake(bin_dir, "scontrol", f'if [[ $1 == requeue ]]; then echo "$@" > {tmp_path}/requeue; else echo n1; fi\n')
    fake(
        bin_dir,
        "srun",
        f"trap 'echo TERM > {tmp_path}/srun.signal; exit 75' TERM\ntouch {tmp_path}/srun.started\n"
        "while true; do sleep 0.05; done\n",
    )
    env = dict(
        os.environ,
        PATH=f"{bin_dir}:{os.environ['PATH']}",
        SLURM_JOB_NODELIST="n1",
        SLURM_JOB_NUM_NODES="1",
        SLURM_JOB_ID="4243",
        SLURM_SUBMIT_DIR=str(REPO / "recipes" / "mini"),
    )
    proc = subprocess.Popen(["bash", str(SCRIPT), "exp_name=x"], env=env, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 30
    while not (tmp_path / "srun.started").exists():
        assert proc.poll() is None and time.time() < deadline
        time.sleep(0.05)
    proc.send_signal(signal.SIGUSR1)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    assert (tmp_path / "srun.signal").read_text().strip() == "TERM"
    assert (tmp_path / "requeue").read_text().split() == ["requeue", "4243"]
    assert "SIGUSR1: the learners save a checkpoint and stop" in err and "stopped (exit 75); requeueing job 4243" in err
