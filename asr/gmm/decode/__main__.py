"""`python -m asr.gmm.decode gmm=mono|tri|lda_mllt|sat`: a GMM-HMM system's graph (once) and its decoding
of decode.sets (a SAT system's in two passes) -> <gmm.dir>/graph/HCLG.fst and
<gmm.dir>/decode_<set>/hyp.{txt,ctm} (+ trans.ark) (asr/gmm/decoding.py)."""

from asr.stage import stage_main


@stage_main(
    "gmm_decode",
    groups=["gmm"],
    uses=["data", "features", "lang", "lm", "decode"],
    reads="gmm.dir/{final.mdl,tree}, gmm.lang_dir, lm.dir/<lm.decode_order>gram.arpa, the sets' features",
    writes="gmm.dir/graph/ (HCLG.fst, graph.json), gmm.dir/decode_<set>/hyp.{txt,ctm} (SAT: and trans.ark)",
)
def main(cfg) -> None:
    from asr.gmm.decoding import decode_gmm  # here, not above: --help answers without the libraries

    decode_gmm(cfg)


if __name__ == "__main__":
    main()
