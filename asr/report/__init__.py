"""Comparing experiments: `python -m asr.report exp/*` reads each experiment directory's
training log, saved configs and WER reports, and writes one Markdown table (config, epochs,
training time, WER SWB/CallHome/total) and a PNG of WER against training time or epochs.

Modules: `experiments` (what is read from an experiment dir), `render` (table and plot).
"""
