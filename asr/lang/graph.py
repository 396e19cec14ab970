"""Decoding graphs as Kaldi's utils/mkgraph.sh builds them: G from an ARPA n-gram LM
(kaldilm's arpa2fst, Kaldi's own code), then

    LG    = min(det(L_disambig o G))
    CLG   = context expansion of LG (the tree's context width and central position)
    HCLGa = min(rmsymbols(det(Ha o CLG)))     Ha: HMM transducer without self-loops
    HCLG  = HCLGa with self-loops (scale 0.1, reordered)

determinized in the log semiring, with the disambiguation symbols removed after the last
determinization (they become epsilons). kaldi_hmm_gmm's FSTs are kaldifst's only with
kaldifst 1.7.x (1.8 carries another OpenFst build: the two refuse each other's FSTs, and
importing kaldifst first deadlocks). Kaldi's fstrmepslocal and fstpushspecial only make the
graph smaller or its weights better spread for pruning; they are not in kaldifst and are
left out.
"""

from __future__ import annotations

import json
import logging
import shutil
import time
from pathlib import Path
from typing import Callable

import kaldi_hmm_gmm
import kaldifst  # after kaldi_hmm_gmm: with kaldifst 1.8 the other order deadlocks
import kaldilm

from asr.lang.langdir import Lang
from asr.utils.atomic import atomic_dir
from asr.utils.errors import InputError
from asr.utils.record import verify

log = logging.getLogger("asr.lang")

TRANSITION_SCALE = 1.0  # mkgraph.sh's defaults
SELF_LOOP_SCALE = 0.1

ModelReader = Callable[[Path], "tuple[kaldi_hmm_gmm.ContextDependency, kaldi_hmm_gmm.TransitionModel]"]


def num_arcs(fst: kaldifst.StdVectorFst) -> int:
    return sum(fst.num_arcs(state) for state in range(fst.num_states))


def grammar_fst(arpa: str | Path, lang: Lang) -> kaldifst.StdVectorFst:
    """G: the ARPA LM as an acceptor over words.txt, #0 on the backoff arcs, <s> and </s> as
    epsilons; n-grams with a word the lexicon lacks are left out (Kaldi's arpa2fst does so
    when given a symbol table). Input-label sorted."""
    if not Path(arpa).is_file():
        raise InputError(f"{arpa}: ARPA LM not found; the lm stage writes lang/lm/<N>gram.arpa (python -m asr.lm)")
    verify(arpa, "ARPA LM")
    text = kaldilm.arpa2fst(
        input_arpa=str(arpa), disambig_symbol="#0", read_symbol_table=str(lang.dir / "words.txt"), max_arpa_warnings=3
    )
    grammar = kaldifst.compile(s=text, acceptor=False)
    kaldifst.arcsort(grammar, sort_type="ilabel")
    return grammar


def remove_input_symbols(fst: kaldifst.StdVectorFst, symbols: set[int]) -> None:
    """Kaldi's fstrmsymbols: these input labels become epsilons (in place)."""
    for state in range(fst.num_states):
        arcs = list(kaldifst.ArcIterator(fst, state))
        if not any(arc.ilabel in symbols for arc in arcs):
            continue
        fst.delete_arcs(state, len(arcs))
        for arc in arcs:
            ilabel = 0 if arc.ilabel in symbols else arc.ilabel
            fst.add_arc(state=state, arc=kaldifst.StdArc(ilabel, arc.olabel, arc.weight.value, arc.nextstate))


def make_hclg(
    lang: Lang,
    tree: kaldi_hmm_gmm.ContextDependency,
    trans_model: kaldi_hmm_gmm.TransitionModel,
    G: kaldifst.StdVectorFst,
) -> kaldifst.StdVectorFst:
    """HCLG: transition ids in, word ids out (see the module docstring)."""
    lg = kaldifst.compose(lang.lexicon_fst(disambig=True), G)
    kaldifst.determinize_star(lg, use_log=True)
    kaldifst.minimize_encoded(lg)
    clg, ilabels = kaldifst.compose_context(
        disambig_syms=lang.disambig_phones,
        context_width=tree.context_width,
        central_position=tree.central_position,
        ifst=lg,
    )
    kaldifst.arcsort(clg, sort_type="ilabel")
    config = kaldi_hmm_gmm.HTransducerConfig(transition_scale=TRANSITION_SCALE)
    ha, disambig_tids = kaldi_hmm_gmm.get_h_transducer(
        ilabel_info=ilabels, ctx_dep=tree, trans_model=trans_model, config=config
    )
    hclga = kaldifst.compose(ha, clg)
    kaldifst.determinize_star(hclga, use_log=True)
    remove_input_symbols(hclga, set(disambig_tids))
    kaldifst.minimize_encoded(hclga)
    return kaldi_hmm_gmm.add_self_loops(
        self_loop_scale=SELF_LOOP_SCALE, disambig_syms=[], reorder=True, trans_model=trans_model, ifst=hclga
    )


def mkgraph(
    lang_dir: str | Path, model_dir: str | Path, arpa: str | Path, out_dir: str | Path, read_model: ModelReader
) -> dict:
    """Kaldi's mkgraph.sh on files: <out_dir>/HCLG.fst (and G.fst, words.txt, phones.txt, graph.json)
    from the lang dir, the model dir's `tree` and `final.mdl` (read by `read_model(model_dir)`)
    and the ARPA LM; written whole or not at all. Returns the graph's sizes and build time."""
    lang = Lang.load(lang_dir)
    tree, trans_model = read_model(Path(model_dir))
    started = time.perf_counter()
    G = grammar_fst(arpa, lang)
    hclg = make_hclg(lang, tree, trans_model, G)
    record = {
        "arpa": str(arpa),
        "G_states": G.num_states,
        "G_arcs": num_arcs(G),
        "HCLG_states": hclg.num_states,
        "HCLG_arcs": num_arcs(hclg),
        "seconds": round(time.perf_counter() - started, 3),
    }
    with atomic_dir(out_dir) as tmp:
        tmp.chmod(0o755)
        G.write(str(tmp / "G.fst"))
        hclg.write(str(tmp / "HCLG.fst"))
        for name in ("words.txt", "phones.txt"):
            shutil.copyfile(lang.dir / name, tmp / name)
        (tmp / "graph.json").write_text(json.dumps(record, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    log.info(
        "%s: HCLG %d states, %d arcs in %.1f s", out_dir, record["HCLG_states"], record["HCLG_arcs"], record["seconds"]
    )
    return record
