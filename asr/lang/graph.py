"""Decoding graphs as Kaldi's utils/mkgraph.sh builds them: G from an ARPA n-gram LM
(kaldilm's arpa2fst, Kaldi's own code), then

    LG   = min(det(L_disambig o G))
    CLG  = context expansion of LG (the tree's context width and central position)
    HCLG = min(rmsymbols(det(H o CLG)))

determinized in the log semiring, with the disambiguation symbols removed after the last
determinization (they become epsilons). H is built in Python with its self-loops
(asr/lang/hmm_fst.py: kaldi_hmm_gmm's FSTs cannot be handed to kaldifst), so there is no
add-self-loops step: the self-loops carry their full log-probabilities (Kaldi scales them by
0.1 and reorders them). Kaldi's fstrmepslocal and fstpushspecial only make the graph smaller
or its weights better spread for pruning; they are not in kaldifst and are left out.
"""

from __future__ import annotations

import json
import logging
import shutil
import time
from pathlib import Path
from typing import Callable

import kaldi_hmm_gmm
import kaldifst  # after kaldi_hmm_gmm: the other import order deadlocks
import kaldilm

from asr.lang.hmm_fst import h_transducer
from asr.lang.langdir import Lang
from asr.utils.atomic import atomic_dir
from asr.utils.errors import InputError

log = logging.getLogger("asr.lang")

ModelReader = Callable[[Path], "tuple[kaldi_hmm_gmm.ContextDependency, kaldi_hmm_gmm.TransitionModel]"]


def num_arcs(fst: kaldifst.StdVectorFst) -> int:
    return sum(fst.num_arcs(state) for state in range(fst.num_states))


def grammar_fst(arpa: str | Path, lang: Lang) -> kaldifst.StdVectorFst:
    """G: the ARPA LM as an acceptor over words.txt, #0 on the backoff arcs, <s> and </s> as
    epsilons; n-grams with a word the lexicon lacks are left out (Kaldi's arpa2fst does so
    when given a symbol table). Input-label sorted."""
    if not Path(arpa).is_file():
        raise InputError(f"{arpa}: ARPA LM not found; the lm stage writes lang/lm/<N>gram.arpa (python -m asr.lm)")
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
    h, disambig_ids = h_transducer(ilabels, tree, trans_model)
    hclg = kaldifst.compose(h, clg)
    kaldifst.determinize_star(hclg, use_log=True)
    remove_input_symbols(hclg, set(disambig_ids))
    kaldifst.minimize_encoded(hclg)
    kaldifst.arcsort(hclg, sort_type="ilabel")
    return hclg


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
