"""ASR toolkit: Kaldi-style recipes and distributed LSTM acoustic-model training.

Each sub-package is one stage of the pipeline (docs/architecture.md has the map and the
import rule): data -> features -> text (tokenizer) -> models/train (+distributed) -> decode
-> score.
"""

__version__ = "0.1.0"
