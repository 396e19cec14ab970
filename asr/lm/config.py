"""Configuration of the word language models (Hydra group `lm`)."""

from dataclasses import dataclass, field
from typing import ClassVar

from asr.utils.checks import AT_LEAST_ONE, Check, each


@dataclass
class LMConfig:
    # Where the LMs go: <dir>/<N>gram.{arpa,bin}, text.txt, words.txt, perplexity.json.
    dir: str = "${tokenizer.lang_dir}/lm"
    orders: list = field(default_factory=lambda: [3, 4])  # one LM per order
    decode_order: int = 4  # the LM the beam search uses (decode.lm=auto)
    # Extra training text besides <data_dir>/<train_set>/text (e.g. Fisher transcripts for
    # SWB-2000): Kaldi text files (`utt word ...`) or plain files (one sentence a line).
    extra_text: list = field(default_factory=list)
    extra_text_has_ids: bool = True  # whether extra_text files start each line with an id
    # lmplz options. Small corpora need discount_fallback (lmplz refuses otherwise).
    discount_fallback: bool = True
    prune: list = field(default_factory=list)  # lmplz --prune thresholds per order, e.g. [0, 0, 1]
    memory: str = "1G"  # lmplz -S: sorting memory
    # Sets whose reference text (<data_dir>/<set>/text) the perplexity is reported on.
    perplexity_sets: list = field(default_factory=lambda: ["${data.eval_set}"])
    kenlm_bin: str = ""  # dir of lmplz/build_binary/query; empty -> $KENLM_BIN, <venv>/kenlm/bin, PATH

    CHECKS: ClassVar[dict[str, Check]] = {"orders": each(AT_LEAST_ONE), "decode_order": AT_LEAST_ONE}
