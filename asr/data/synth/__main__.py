"""python -m asr.data.synth [hydra overrides]: write the synthetic corpus to synth.out_dir."""

from omegaconf import DictConfig

from asr.config import stage_main
from asr.data.synth.corpus import format_summary, synthesize_corpus


@stage_main("synth")
def main(cfg: DictConfig) -> None:
    summary = synthesize_corpus(cfg.synth)
    print(format_summary(summary))
    print(f"synthesis took {summary['seconds']:.1f} s")


if __name__ == "__main__":
    main()
