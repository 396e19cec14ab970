"""python -m asr.data.synth [hydra overrides]: write the synthetic corpus to synth.out_dir.

A corpus already made from the same synth config is kept (the corpus records its config),
so re-running a recipe or starting a new experiment on it costs nothing;
`synth.force=true` rebuilds it. A kept corpus made before the pronunciation dictionary was
part of the corpus gets it added (`swb_ms98_transcriptions/sw-ms98-dict.text`, a second).
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
    from asr.data.synth.corpus import (
        ensure_dictionary,
        format_summary,
        is_synthesized,
        synthesize_corpus,
    )  # here, not above: --help answers without importing torch

    if not cfg.synth.force and is_synthesized(cfg.synth):
        log.info("%s: corpus already made with this config; keeping it (synth.force=true rebuilds)", cfg.synth.out_dir)
        added = ensure_dictionary(cfg.synth)
        if added is not None:
            log.info("%s: added the pronunciation dictionary this older corpus lacked", added)
        return
    summary = synthesize_corpus(cfg.synth)
    print(format_summary(summary))
    print(f"synthesis took {summary['seconds']:.1f} s")


if __name__ == "__main__":
    main()
