"""`python -m asr.features [hydra overrides]`: the features of the train/dev/eval data dirs
by the recipe `features.kind` picks (see asr.features.recipes)."""

from asr.stage import stage_main
from asr.utils.memory import freeze_imports


@stage_main(
    "features",
    groups=["features"],
    uses=["data"],
    reads="data.data_dir/<set>/ of the train, dev and eval sets (wav.scp, segments)",
    writes="features.feats_dir/<features.name>/<set>/: feats.scp, feat_dim, utt2num_frames, cmvn.*",
)
def main(cfg) -> None:
    from asr.features.recipes import make_features  # here, not above: --help answers without importing torch

    freeze_imports()

    make_features(cfg)


if __name__ == "__main__":
    main()
