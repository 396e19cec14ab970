"""`python -m asr.decode`: CTC greedy decoding of decode.sets -> exp_dir/decode_<set>/hyp.{txt,ctm}."""

from asr.config import stage_main
from asr.decode.stage import decode


@stage_main("decode")
def main(cfg) -> None:
    decode(cfg)


if __name__ == "__main__":
    main()
