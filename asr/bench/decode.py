"""Benchmark of decoding: real-time factor of greedy and beam+LM search on an evaluation set.

    python -m asr.bench decode [--recipe-dir recipes/mini] [--set eval2000] [--jobs 1 2]
                               [--out bench_decode.json] [hydra overrides of that experiment ...]

The experiment (exp_name=..., its tokenizer and LM overrides) is loaded as the decode stage
loads it, from inside the recipe dir. Timed separately, on one process unless said:
  acoustic_model   the network over every utterance (batched as the decode stage does)
  greedy           best-path search over the log-probabilities
  beam_lm[jobs=N]  the LM beam search (decode.* options, tuned LM weight if there is one)
                   over N worker processes
RTF = seconds of compute / seconds of audio (segment durations). `greedy_total` and
`beam_lm_total` add the acoustic model's time: a whole decode stage.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import platform
import sys
import time
from pathlib import Path

import torch

from asr.config import load_config
from asr.data.datadir import data_set_dir, read_data_dir
from asr.decode.greedy import ctc_greedy
from asr.decode.search import ParallelBeamSearch, beam_options, beam_spec
from asr.text.tokenizer import BLANK_ID
from asr.utils.atomic import write_text
from asr.utils.log import log_to_stderr

log = logging.getLogger("asr.bench.decode")


def audio_seconds(cfg, set_name: str, utts: list[str]) -> float:
    data = read_data_dir(data_set_dir(cfg, set_name))
    return sum(data.segments[u].end - data.segments[u].start for u in utts if u in data.segments)


def timed(fn):
    start = time.perf_counter()
    result = fn()
    return result, time.perf_counter() - start


def run(cfg, set_name: str, jobs: list[int]) -> dict:
    from asr.decode.stage import load_decoding_model
    from asr.tune.grid import set_log_probs

    torch.set_num_threads(int(cfg.decode.threads))
    model, tokenizer = load_decoding_model(cfg, torch.device("cpu"))
    model.eval()
    (refs, arrays), am_seconds = timed(lambda: set_log_probs(cfg, set_name, model, torch.device("cpu")))
    utts = list(arrays)
    audio = audio_seconds(cfg, set_name, utts)
    tensors = [(torch.from_numpy(a)[None], torch.tensor([a.shape[0]])) for a in arrays.values()]
    _, greedy_seconds = timed(lambda: [ctc_greedy(lp, n, blank=BLANK_ID) for lp, n in tensors])
    results = {"acoustic_model": am_seconds, "greedy": greedy_seconds}
    spec, options = beam_spec(cfg, tokenizer), beam_options(cfg)
    for n in jobs:
        with ParallelBeamSearch(spec, n) as pool:
            _, seconds = timed(lambda: pool([arrays[u] for u in utts], options))
        results[f"beam_lm[jobs={n}]"] = seconds
    rtf = {name: seconds / audio for name, seconds in results.items()}
    rtf["greedy_total"] = (am_seconds + greedy_seconds) / audio
    rtf["beam_lm_total"] = (am_seconds + min(v for k, v in results.items() if k.startswith("beam_lm"))) / audio
    return {
        "set": set_name,
        "utterances": len(utts),
        "audio_seconds": round(audio, 2),
        "seconds": {k: round(v, 3) for k, v in results.items()},
        "rtf": {k: round(v, 5) for k, v in rtf.items()},
        "beam": {
            "beam_size": options.beam_size,
            "beam_size_token": options.beam_size_token,
            "lm_weight": options.lm_weight,
            "word_score": options.word_score,
        },
        "threads": int(cfg.decode.threads),
        "cpu": platform.processor() or platform.machine(),
    }


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m asr.bench decode", description=__doc__.split("\n\n")[0])
    parser.add_argument("--recipe-dir", default="recipes/mini")
    parser.add_argument("--set", default="eval2000")
    parser.add_argument("--jobs", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--out", default="bench_decode.json")
    parser.add_argument("overrides", nargs="*", help="Hydra overrides naming the experiment, e.g. exp_name=base")
    args = parser.parse_args(argv)
    log_to_stderr()
    out = Path(args.out).resolve()
    os.chdir(args.recipe_dir)  # the experiment's relative paths (data/, lang/, exp/) start there
    cfg = load_config(["decode=beam_lm", *args.overrides])
    report = run(cfg, args.set, args.jobs)
    write_text(out, json.dumps(report, indent=2) + "\n")
    print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
