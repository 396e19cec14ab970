"""`python -m asr.gmm.fmllr_feats gmm=sat gmm.dir=exp/tri4`: the SAT system's speaker-adapted
features (statics spliced, LDA+MLLT, each speaker's fMLLR) of the training, dev and eval sets as
Kaldi data dirs <gmm.dir>/fmllr_feats/<set>/, as Kaldi's steps/nnet/make_fmllr_feats.sh makes
them; features=sat40 imports them for the hybrid model (asr/gmm/adapted_features.py)."""

from asr.stage import stage_main


@stage_main(
    "gmm_fmllr_feats",
    groups=["gmm"],
    uses=["data", "features"],
    reads="gmm.dir/{final.mat,splice_opts,trans.ark}, <gmm.dir>_ali_dev/trans.ark, "
    "gmm.dir/decode_<set>/trans.ark, the sets' log-mel features",
    writes="gmm.dir/fmllr_feats/<set>/: feats.ark, feats.scp, utt2spk, utt2num_frames, trans.ark",
)
def main(cfg) -> None:
    from asr.gmm.adapted_features import write_adapted_features  # here: --help answers without the libraries

    write_adapted_features(cfg)


if __name__ == "__main__":
    main()
