"""Scoring: normalise reference and hypothesis words, align them, count errors per subset
(Hub5: SWB and CallHome) and write the reports (wer.json, wer.md, align.txt).

Modules: `normalize` (the scoring convention), `subsets` (which utterance belongs where),
`result` (the counts every scorer returns), `wer` (the jiwer scorer), `report` (the files),
`stage` (the `python -m asr.score` loop over decode sets), and `hub5/` (score.kind=hub5:
stm/CTM/GLM scoring with NIST SCTK, or its native Python equivalent).
"""
