"""`python -m asr.lang`: the Kaldi lang dir (phones, words, topology, L.fst) from the MS98-format
pronunciation dictionary (see asr.lang.prepare)."""

from asr.stage import stage_main


@stage_main(
    "lang",
    groups=["lang"],
    uses=["data"],
    reads="lang.dictionary (sw-ms98-dict.text: the synthetic corpus writes it, Switchboard ships it)",
    writes="lang.dir/: phones.txt, words.txt, topo, L.fst, L_disambig.fst, phones/, oov.{txt,int}, lang.json",
)
def main(cfg) -> None:
    from asr.lang.prepare import build_lang_dir  # here, not above: --help answers without importing torch

    build_lang_dir(cfg.lang.dictionary, cfg.lang.dir, float(cfg.lang.sil_prob), bool(cfg.lang.force))


if __name__ == "__main__":
    main()
