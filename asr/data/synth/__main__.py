"""python -m asr.data.synth [hydra overrides]: write the synthetic corpus to synth.out_dir.

A corpus already made from the same synth config is kept (its stage record,
`synth.record.json`, names the config and every file), so re-running a recipe or starting a new
experiment on it costs nothing; `synth.force=true` rebuilds it.
"""

import logging

from omegaconf import DictConfig

from asr.stage import stage_main

log = logging.getLogger("asr.data.synth")


@stage_main(
    "synth",
    groups=["synth"],
    reads="nothing (espeak-ng speaks the sentences)",
    writes="synth.out_dir: an LDC-format corpus (Switchboard-1, Hub5-2000 SPHERE audio and transcripts)",
)
def main(cfg: DictConfig) -> None:
    # here, not above: --help answers without importing torch
    from asr.data.synth.corpus import synthesize_corpus, why_synthesize

    reason = "synth.force=true" if cfg.synth.force else why_synthesize(cfg.synth)
    if reason is None:
        log.info("%s: corpus already made with this config; keeping it (synth.force=true rebuilds)", cfg.synth.out_dir)
        return
    log.info("%s: synthesising (%s)", cfg.synth.out_dir, reason)
    synthesize_corpus(cfg.synth)  # logs the corpus' summary and the time it took


if __name__ == "__main__":
    main()
