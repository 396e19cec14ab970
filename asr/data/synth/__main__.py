"""python -m asr.data.synth [hydra overrides]: write the synthetic corpus to synth.out_dir.

A corpus already made from the same synth config is kept (the corpus records its config),
so re-running a recipe or starting a new experiment on it costs nothing;
`synth.force=true` rebuilds it.
"""

import logging

from omegaconf import DictConfig

from asr.stage import stage_main
from asr.data.synth.corpus import format_summary, is_synthesized, synthesize_corpus

log = logging.getLogger("asr.data.synth")


@stage_main("synth")
def main(cfg: DictConfig) -> None:
    if not cfg.synth.force and is_synthesized(cfg.synth):
        log.info("%s: corpus already made with this config; keeping it (synth.force=true rebuilds)", cfg.synth.out_dir)
        return
    summary = synthesize_corpus(cfg.synth)
    print(format_summary(summary))
    print(f"synthesis took {summary['seconds']:.1f} s")


if __name__ == "__main__":
    main()
