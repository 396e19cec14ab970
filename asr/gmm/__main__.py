"""`python -m asr.gmm`: train a GMM-HMM system (gmm=mono, then tri, lda_mllt, sat, as Kaldi's s5c) and
align the training set, or align another set with a trained one (gmm.kind=align)."""

from asr.stage import stage_main


@stage_main(
    "gmm",
    groups=["gmm"],
    uses=["data", "features"],
    reads="gmm.lang_dir (python -m asr.lang), data.data_dir/<gmm.train_set>, the features' log-mel set, "
    "gmm.alignments (kinds tri, lda_mllt, sat, align)",
    writes="gmm.dir/: final.mdl, tree, ali.N.gz, num_jobs, summary.json (with gmm.phone_timings: boundary accuracy); "
    "lda_mllt and sat: final.mat, splice_opts; sat: trans.ark, final.alimdl",
)
def main(cfg) -> None:
    from asr.gmm.stage import run  # here, not above: --help answers without importing torch

    run(cfg)


if __name__ == "__main__":
    main()
