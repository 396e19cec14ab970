"""A small Kaldi topology (3-state phones and the 5-state silence) and a monophone model on it."""

import kaldi_hmm_gmm as khg
import numpy as np
import pytest

TOPO = """<Topology>
<TopologyEntry>
<ForPhones>
2 3 4
</ForPhones>
<State> 0 <PdfClass> 0 <Transition> 0 0.75 <Transition> 1 0.25 </State>
<State> 1 <PdfClass> 1 <Transition> 1 0.75 <Transition> 2 0.25 </State>
<State> 2 <PdfClass> 2 <Transition> 2 0.75 <Transition> 3 0.25 </State>
<State> 3 </State>
</TopologyEntry>
<TopologyEntry>
<ForPhones>
1
</ForPhones>
<State> 0 <PdfClass> 0 <Transition> 0 0.25 <Transition> 1 0.25 <Transition> 2 0.25 <Transition> 3 0.25 </State>
<State> 1 <PdfClass> 1 <Transition> 1 0.25 <Transition> 2 0.25 <Transition> 3 0.25 <Transition> 4 0.25 </State>
<State> 2 <PdfClass> 2 <Transition> 1 0.25 <Transition> 2 0.25 <Transition> 3 0.25 <Transition> 4 0.25 </State>
<State> 3 <PdfClass> 3 <Transition> 1 0.25 <Transition> 2 0.25 <Transition> 3 0.25 <Transition> 4 0.25 </State>
<State> 4 <PdfClass> 4 <Transition> 4 0.75 <Transition> 5 0.25 </State>
<State> 5 </State>
</TopologyEntry>
</Topology>
"""


@pytest.fixture
def topology() -> khg.HmmTopology:
    topo = khg.HmmTopology()
    topo.read(TOPO)
    return topo


@pytest.fixture
def mono_model(topology):
    """(transition model, acoustic model) of a monophone system with 1-3 random Gaussians a pdf."""
    tree = khg.monophone_context_dependency(
        phones=topology.phones, phone2num_pdf_classes=topology.get_phone_to_num_pdf_classes()
    )
    tm = khg.TransitionModel(ctx_dep=tree, hmm_topo=topology)
    rng = np.random.default_rng(0)
    am = khg.AmDiagGmm()
    for pdf in range(tree.num_pdfs):
        nmix = 1 + pdf % 3
        gmm = khg.DiagGmm(nmix=nmix, dim=4)
        gmm.set_weights(rng.dirichlet(np.ones(nmix)).astype(np.float32))
        gmm.set_invvars_and_means(
            rng.uniform(0.5, 2.0, (nmix, 4)).astype(np.float32), rng.normal(size=(nmix, 4)).astype(np.float32)
        )
        gmm.compute_gconsts()
        am.add_pdf(gmm)
    stats = tm.init_stats()
    for tid in range(1, tm.num_transition_ids + 1):  # transition probabilities away from the topology's
        stats = tm.accumulate(prob=float(1 + tid % 5), trans_id=tid, stats=stats)
    tm.mle_update(stats, khg.MleTransitionUpdateConfig())
    return tm, am
