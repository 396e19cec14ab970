"""`python -m asr.decode [decode=greedy|beam_lm|loglikes]`: decode decode.sets -> exp_dir/decode_<set>/hyp.{txt,ctm}
(greedy CTC, or CTC beam search with the word LM; loglikes: Kaldi log-likelihoods)."""

from asr.stage import stage_main
from asr.decode.stage import decode


@stage_main("decode")
def main(cfg) -> None:
    decode(cfg)


if __name__ == "__main__":
    main()
