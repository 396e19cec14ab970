"""Convergence against lr and global batch for SSGD, ADPSGD and its variants, and H-ADPSGD
with simulated learners (the paper's Figure 1 and its 3x claim): `python -m asr.sweep`.

    config.py   the sweep's settings and algorithm names (a control among them)
    run.py      one run: an algorithm at a global batch and an lr with one seed, or the baseline
    sweep.py    which runs, side by side in processes, resumable, into sweep.json; mixing rates
    verdict.py  the baseline's calibration, the threshold, the critical lr, the largest
                converging batch, the ratios and their range, why a point fails
    noise_scale.py  the gradient noise scale (B_simple) at the baseline's weights
    report.py   sweep.md and sweep.png
    diagnose/   python -m asr.sweep.diagnose: runs that change one candidate cause of ADPSGD's
                lag at a time (diagnostics.py)
"""
