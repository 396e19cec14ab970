"""Word n-gram language models for decoding: training with KenLM's `lmplz` (modified
Kneser-Ney), KenLM binaries with `build_binary`, perplexity with KenLM's `query`.

Modules: `tools` (finding and running the KenLM programs), `corpus` (the LM training text
and its vocabulary), `perplexity` (query's summary), `build` (the `python -m asr.lm` stage).
"""
