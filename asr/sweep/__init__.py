"""Batch-size sweep: held-out loss against the global batch for SSGD, ADPSGD and its variants,
and H-ADPSGD with simulated learners (the paper's Figure 1): `python -m asr.sweep`.

    config.py   the sweep's settings and algorithm names
    run.py      one run: an algorithm at a global batch with one seed, or the baseline
    sweep.py    which runs, side by side in processes, resumable, into sweep.json
    verdict.py  the baseline, the threshold, the largest converging batch, the ratio
    report.py   sweep.md and sweep.png
"""
