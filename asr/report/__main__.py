"""`python -m asr.report exp/* [--eval-set eval2000] [--out report]`: compare experiments.

Writes <out>.md and <out>.json (one row per scored decode dir of the set: `decode_<set>` and
`decode_<set>_<suffix>`) and <out>.png (WER against training time, or epochs), prints the
table, and names the directories it skipped (no scored decode dir).

`python -m asr.report --best exp/*` prints, as Kaldi's `grep WER ... | utils/best_wer.sh`
would, each experiment's decode dir of the lowest total WER as `%WER ...` lines (its subsets
after the total) and writes nothing.
"""

from __future__ import annotations

import argparse
import logging
import sys

from asr.report.experiments import best_wer_lines, read_experiments
from asr.report.render import write_report
from asr.utils.log import setup_logging


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m asr.report", description=__doc__.split("\n\n")[0])
    parser.add_argument("exp_dirs", nargs="+", help="experiment directories (exp/<name>)")
    parser.add_argument("--eval-set", default="eval2000", help="the decoded set to compare (decode_<set>/wer.json)")
    parser.add_argument("--out", default="report", help="output prefix: <out>.md, <out>.json and <out>.png")
    parser.add_argument("--best", action="store_true", help="print each experiment's best %%WER lines, write nothing")
    args = parser.parse_args(argv)
    if args.best:
        lines = [line for path in args.exp_dirs for line in best_wer_lines(path, args.eval_set)]
        print("".join(f"{line}\n" for line in lines), end="")
        if not lines:
            print(
                f"no decode_{args.eval_set}*/wer.json in {' '.join(args.exp_dirs)}; run decode and score first",
                file=sys.stderr,
            )
        return 0 if lines else 2
    setup_logging("report")
    log = logging.getLogger("asr.report")
    experiments = []
    for path in args.exp_dirs:
        rows = read_experiments(path, args.eval_set)
        if not rows:
            log.info("skipped %s: no decode_%s*/wer.json", path, args.eval_set)
        experiments.extend(rows)
    if not experiments:
        log.error(
            "none of the %d directories has decode_%s/wer.json; run decode and score first",
            len(args.exp_dirs),
            args.eval_set,
        )
        return 2
    table = write_report(experiments, args.out)
    print(table, end="")
    log.info("compared %d decodes -> %s.md, %s.json, %s.png", len(experiments), args.out, args.out, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
