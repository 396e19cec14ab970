"""`python -m asr.features [hydra overrides]`: the features of the train/dev/eval data dirs
by the recipe `features.kind` picks (see asr.features.recipes)."""

from asr.stage import stage_main
from asr.features.recipes import make_features


@stage_main("features")
def main(cfg) -> None:
    make_features(cfg)


if __name__ == "__main__":
    main()
