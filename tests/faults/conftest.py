"""Small inputs to break, and a small file system to fill, for the fault tests."""

from __future__ import annotations

import errno
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from asr.config import load_config
from asr.data.datadir import DataDir, write_data_dir

REPO = Path(__file__).resolve().parents[2]
RATE = 8000


def tone(seconds: float, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    n = int(seconds * RATE)
    return (0.2 * np.sin(2 * np.pi * 300 * np.arange(n) / RATE) + 0.01 * rng.standard_normal(n)).astype(np.float32)


def write_wav_data_dir(root: Path, recordings: dict[str, np.ndarray], name: str = "train") -> Path:
    """<root>/data/<name>: one utterance per recording (id = speaker = recording), 32-bit float
    WAV files (which keep NaN and inf samples) under <root>/audio."""
    data = DataDir()
    for i, (recording, samples) in enumerate(sorted(recordings.items())):
        path = root / "audio" / f"{recording}.wav"
        path.parent.mkdir(parents=True, exist_ok=True)
        sf.write(path, samples, RATE, subtype="FLOAT")
        data.wav_scp[recording] = str(path)
        data.utt2spk[recording] = recording
        data.text[recording] = ["hello there", "yes", "okay then"][i % 3]
    return write_data_dir(data, root / "data" / name)


def features_overrides(root: Path, *extra: str) -> list[str]:
    """A features stage over <root>/data/{train,dev,eval} into <root>/feats, logs in <root>/exp."""
    return [
        f"data.data_dir={root / 'data'}",
        "data.train_set=train",
        "data.dev_set=dev",
        "data.eval_set=eval",
        f"features.feats_dir={root / 'feats'}",
        "features.jobs=1",
        f"exp_dir={root / 'exp'}",
        *extra,
    ]


def run_stage(
    module: str, overrides: list[str], cwd: Path, timeout: float = 300, **popen
) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", module, *overrides],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
        env=dict(os.environ, OMP_NUM_THREADS="1"),
        **popen,
    )


def fbank_options():
    from asr.features.logmel.options import FbankOptions

    return FbankOptions.from_config(load_config(["features=logmel40"]).features)


# --- a small tmpfs ------------------------------------------------------------------------------


def _mount_command(mount_point: Path, size: str, command: str) -> list[str]:
    """A private mount namespace (root: unshare -m; others: a user namespace too) with a tmpfs
    of `size` at `mount_point`, then `command`; the mount ends with the process."""
    private = ["unshare", "-m"] if os.geteuid() == 0 else ["unshare", "-r", "-m"]
    return [*private, "sh", "-c", f'mount -t tmpfs -o size={size} tmpfs "$0" && exec {command}', str(mount_point)]


def on_small_tmpfs(mount_point: Path, size: str, script: str, timeout: float = 300) -> subprocess.CompletedProcess:
    """Run `python -c script` with a fresh tmpfs of `size` mounted at `mount_point`.

    Skipped (with the reason) where this machine does not let us mount one: no `unshare`, or
    mounting refused (EPERM: no CAP_SYS_ADMIN, user namespaces disabled). Any other failure of
    the mount fails the test, so a CI machine that can mount never skips it.
    """
    if shutil.which("unshare") is None:
        pytest.skip("disk-full test: `unshare` (util-linux) is not installed, so no private tmpfs can be mounted")
    mount_point.mkdir(parents=True, exist_ok=True)
    probe = subprocess.run(_mount_command(mount_point, size, "true"), capture_output=True, text=True, timeout=60)
    if probe.returncode != 0:
        refused = any(word in probe.stderr for word in ("Operation not permitted", "Permission denied"))
        if refused:
            pytest.skip(
                f"disk-full test: mounting a tmpfs is not allowed here ({probe.stderr.strip()}); "
                f"it needs root or unprivileged user namespaces ({os.strerror(errno.EPERM)})"
            )
        raise AssertionError(f"could not mount a tmpfs for the disk-full test: {probe.stderr.strip()}")
    command = " ".join(f"'{part}'" for part in (sys.executable, "-c", script.replace("'", "'\\''")))
    return subprocess.run(
        _mount_command(mount_point, size, command),
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=REPO,
        env=dict(os.environ, OMP_NUM_THREADS="1"),
    )
