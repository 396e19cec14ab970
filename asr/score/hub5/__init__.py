"""Hub5-2000 scoring as the field does it: the hypothesis CTM filtered the Kaldi/ESPnet way,
the stm fixed for its known typos, then NIST SCTK's `hubscr.pl`/`sclite` with the GLM
(`sctk`), or the same procedure in Python when SCTK is not installed (`native`).

Modules: `ctm` (reading and filtering the CTM), `stm` (reference segments), `glm` (the
NIST1 mapping rules and csrfilt.sh's text processing), `network` (sclite's transcript
syntax: optional words, alternations), `align` (sclite's weighted alignment), `native`
(the Python scorer), `sctk` (running SCTK and reading its reports), `scorer` (the
`score.kind=hub5` entry, choosing between the two).
"""
