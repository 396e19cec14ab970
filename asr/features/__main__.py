"""`python -m asr.features [hydra overrides]`: filterbank features and CMVN statistics for the
train/dev/eval data dirs (see asr.features.extract)."""

from asr.config import stage_main
from asr.features.extract import extract_features


@stage_main("features")
def main(cfg) -> None:
    extract_features(cfg)


if __name__ == "__main__":
    main()
