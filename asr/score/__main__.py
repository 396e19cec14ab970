"""`python -m asr.score [hydra overrides]`: score each decoded set (see asr.score.stage)."""

from omegaconf import DictConfig

from asr.stage import stage_main


@stage_main(
    "score",
    groups=["score"],
    uses=["data", "decode"],
    reads="exp_dir/decode_<set>/hyp.{txt,ctm}, the references (text, or stm and glm)",
    writes="exp_dir/decode_<set>/wer.json, wer.md",
)
def main(cfg: DictConfig) -> None:
    from asr.score.stage import run  # here, not above: --help answers without importing torch

    run(cfg)


if __name__ == "__main__":
    main()
