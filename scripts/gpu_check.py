"""The GPU check: what must hold on a GPU, in one command and one JSON (`make gpu-check`).

    python scripts/gpu_check.py [--device cuda|cpu] [--out exp/gpu_check] [--skip-tests]
                                [--bench-args "--pdfs 32000 --steps 10"]

1. pytest over tests/gpu (training, resume, decoding, precisions, i-vector and fMLLR statistics,
   learners sharing the GPU: each compared with the CPU) and the CUDA exchange tests
   (tests/distributed/test_exchange_cuda.py), every test's outcome kept. With --device cpu the
   CPU stands in for the GPU (ASR_TEST_GPU=cpu), which checks the tests themselves.
2. `python -m asr.bench model` on the device: the Switchboard preset's model, fp32 and bf16,
   21-frame samples, 128 a learner.
3. OUT/gpu_check.json: the device, torch, CUDA and NCCL versions, the tests' outcomes and the
   throughput; the pytest log and the benchmark's own JSON and PNG beside it.

Exit 0 when every test passed or skipped and the benchmark ran; 1 otherwise. When a GPU is lent,
run it there and commit OUT/gpu_check.json under docs/img/.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
GPU_TESTS = ["tests/gpu", "tests/distributed/test_exchange_cuda.py"]
JUNIT_PRINTS = ["-o", "junit_logging=system-out"]  # each test's printed figures into the XML


def versions() -> dict:
    import torch

    cuda = torch.cuda.is_available()
    return {
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "cudnn": torch.backends.cudnn.version() if cuda else None,
        "nccl": ".".join(map(str, torch.cuda.nccl.version())) if cuda else None,
        "gpus": [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())],
    }


def test_outcomes(junit: Path) -> dict:
    """pytest's JUnit XML as counts, the names of the tests that did not pass, each test's
    seconds and what it printed (the figures it compared, such as the largest weight difference)."""
    outcomes: dict = {"passed": 0, "failed": 0, "skipped": 0, "not_passed": [], "seconds": {}, "printed": {}}
    for case in ET.parse(junit).getroot().iter("testcase"):
        name = f"{case.get('classname')}::{case.get('name')}"
        outcomes["seconds"][name] = round(float(case.get("time", 0)), 2)
        printed = case.findtext("system-out", "").strip()
        if printed:
            outcomes["printed"][name] = printed.splitlines()
        if case.find("failure") is not None or case.find("error") is not None:
            outcomes["failed"] += 1
            outcomes["not_passed"].append(name)
        elif case.find("skipped") is not None:
            outcomes["skipped"] += 1
            reason = case.find("skipped").get("message", "")
            outcomes["not_passed"].append(f"{name} (skipped: {reason})")
        else:
            outcomes["passed"] += 1
    return outcomes


def run_tests(device: str, out: Path) -> dict:
    env = dict(os.environ, ASR_TEST_GPU="cpu" if device == "cpu" else "cuda")
    junit = out / "tests.xml"
    command = [sys.executable, "-m", "pytest", "-v", "-p", "no:xdist", f"--junitxml={junit}", *JUNIT_PRINTS, *GPU_TESTS]
    with open(out / "tests.log", "w") as log:
        status = subprocess.run(command, cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT).returncode
    outcomes = test_outcomes(junit) if junit.is_file() else {"failed": 1, "not_passed": ["pytest wrote no report"]}
    return {"command": shlex.join(command[1:]), "exit_status": status, **outcomes}


def run_benchmark(device: str, out: Path, extra: str) -> dict:
    command = [sys.executable, "-m", "asr.bench", "model", "--device", device, "--out", str(out), *shlex.split(extra)]
    status = subprocess.run(command, cwd=REPO).returncode
    report = out / "model.json"
    if status or not report.is_file():
        return {"command": shlex.join(command[1:]), "exit_status": status}
    return {"command": shlex.join(command[1:]), "exit_status": 0, **json.loads(report.read_text())}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="scripts/gpu_check.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    parser.add_argument("--out", type=Path, default=Path("exp/gpu_check"))
    parser.add_argument("--skip-tests", action="store_true", help="the benchmark alone")
    parser.add_argument("--bench-args", default="", help="more options for python -m asr.bench model")
    args = parser.parse_args(argv)
    out = args.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    report: dict = {"device": args.device, "versions": versions()}
    if args.device == "cuda" and not report["versions"]["gpus"]:
        print("gpu_check: torch sees no GPU; run it where one is, or --device cpu", file=sys.stderr)
        return 2
    report["tests"] = None if args.skip_tests else run_tests(args.device, out)
    report["throughput"] = run_benchmark(args.device, out / "bench", args.bench_args)
    ok = report["throughput"]["exit_status"] == 0 and (report["tests"] is None or report["tests"]["failed"] == 0)
    report["ok"] = ok
    (out / "gpu_check.json").write_text(json.dumps(report, indent=1) + "\n")
    print(f"gpu_check: {'ok' if ok else 'FAILED'}; {out / 'gpu_check.json'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
