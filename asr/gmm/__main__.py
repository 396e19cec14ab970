"""`python -m asr.gmm`: train a GMM-HMM system (gmm=mono, then gmm=tri) and align the training set."""

from asr.stage import stage_main


@stage_main(
    "gmm",
    groups=["gmm"],
    uses=["data", "features"],
    reads="gmm.lang_dir (python -m asr.lang), data.data_dir/<gmm.train_set>, the features' log-mel set, "
    "gmm.alignments (kind=tri)",
    writes="gmm.dir/: final.mdl, tree, ali.N.gz, num_jobs, summary.json (with gmm.phone_timings: boundary accuracy)",
)
def main(cfg) -> None:
    from asr.gmm.stage import run  # here, not above: --help answers without importing torch

    run(cfg)


if __name__ == "__main__":
    main()
