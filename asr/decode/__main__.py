"""`python -m asr.decode [decode=greedy|beam_lm|loglikes]`: decode decode.sets -> exp_dir/decode_<set>/hyp.{txt,ctm}
(greedy CTC, or CTC beam search with the word LM; loglikes: Kaldi log-likelihoods)."""

from asr.stage import stage_main
from asr.utils.memory import freeze_imports


@stage_main(
    "decode",
    groups=["decode"],
    uses=["data", "features", "tokenizer", "lm"],
    reads="the checkpoint decode.checkpoint, the features of decode.sets, the tokenizer (and the LM)",
    writes="exp_dir/decode_<set>/hyp.txt, hyp.ctm (loglikes: Kaldi log-likelihoods)",
)
def main(cfg) -> None:
    from asr.decode.stage import decode  # here, not above: --help answers without importing torch

    freeze_imports()

    decode(cfg)


if __name__ == "__main__":
    main()
