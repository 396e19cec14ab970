"""A toy hybrid HMM system for frame-CE tests: Kaldi transition models, alignments, features.

The writers follow Kaldi's own Write functions (src/hmm/hmm-topology.cc, transition-model.cc,
util/kaldi-holder-inl.h) so the files are what `copy-transition-model`, `gmm-align` and
`ali-to-pdf` would write; the expected transition-id -> pdf-id tables in the tests are
worked out by hand from those rules, not by this code.

The HMM system: phones 1-4, each a 3-state left-to-right HMM (self-loop listed first, as
Kaldi's gen_topo.pl writes it), 10 pdfs. Phone 4 shares its first and last pdf with phone 3,
as a decision tree would tie them. Kaldi sorts the (phone, hmm_state, pdf) triples, so
transition state k (1-based) owns transition ids 2k-1 (self-loop) and 2k (forward).
"""

from __future__ import annotations

import gzip
import io
import struct
from pathlib import Path

import kaldiio
import numpy as np

from asr.data.datadir import DataDir, Segment
from tests.train.toy_corpus import write_data_and_features

# (phone, hmm_state, pdf), sorted as Kaldi keeps them.
HMM_TRIPLES = [
    (1, 0, 0), (1, 1, 1), (1, 2, 2),
    (2, 0, 3), (2, 1, 4), (2, 2, 5),
    (3, 0, 6), (3, 1, 7), (3, 2, 8),
    (4, 0, 6), (4, 1, 9), (4, 2, 8),
]  # fmt: skip
NUM_PDFS = 10
# Transition id t (1..24) -> pdf: both ids of triple k share its pdf.
HMM_PDF_OF_TID = [-1, 0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7, 8, 8, 6, 6, 9, 9, 8, 8]
FEAT_DIM = 8


def three_state_entry() -> list[tuple[int, int, list[tuple[int, float]]]]:
    """(forward pdf class, self-loop pdf class, [(destination, prob)]) per state."""
    return [
        (0, 0, [(0, 0.75), (1, 0.25)]),
        (1, 1, [(1, 0.75), (2, 0.25)]),
        (2, 2, [(2, 0.75), (3, 0.25)]),
        (-1, -1, []),
    ]


def hmm_system() -> tuple[list[tuple[list[int], list]], list[tuple[int, int, int, int]]]:
    """The toy HMM system as (topology entries, tuples)."""
    return [([1, 2, 3, 4], three_state_entry())], [(p, s, pdf, pdf) for p, s, pdf in HMM_TRIPLES]


def is_hmm(entries) -> bool:
    return all(fwd == loop for _, states in entries for fwd, loop, _ in states)


def text_transition_model(entries, tuples, trailer: str = "") -> str:
    """As TransitionModel::Write(os, binary=false); `trailer` is whatever follows in final.mdl."""
    hmm = is_hmm(entries)
    out = ["<TransitionModel> \n<Topology> \n"]
    for phones, states in entries:
        out.append("<TopologyEntry> \n<ForPhones> \n" + "".join(f"{p} " for p in phones) + "\n</ForPhones> \n")
        for j, (fwd, loop, transitions) in enumerate(states):
            line = f"<State> {j} "
            if fwd != -1:
                line += f"<PdfClass> {fwd} " if hmm else f"<ForwardPdfClass> {fwd} <SelfLoopPdfClass> {loop} "
            line += "".join(f"<Transition> {d} {p} " for d, p in transitions)
            out.append(line + "</State> \n")
        out.append("</TopologyEntry> \n")
    out.append("</Topology> \n")
    kind = "Triples" if hmm else "Tuples"
    out.append(f"<{kind}> {len(tuples)} \n")
    for phone, state, fwd, loop in tuples:
        out.append(f"{phone} {state} {fwd} " + ("" if hmm else f"{loop} ") + "\n")
    num_tids = sum(len(entries_for(entries, t[0])[t[1]][2]) for t in tuples)
    out.append(f"</{kind}> \n<LogProbs> \n [ " + " ".join(["-0.69"] * (num_tids + 1)) + " ]\n</LogProbs> \n</TransitionModel> \n")
    return "".join(out) + trailer


def entries_for(entries, phone):
    return next(states for phones, states in entries if phone in phones)


def _int(value: int) -> bytes:
    return b"\x04" + struct.pack("<i", value)


def _float(value: float) -> bytes:
    return b"\x04" + struct.pack("<f", value)


def _int_vector(values: list[int]) -> bytes:
    return b"\x04" + struct.pack("<i", len(values)) + struct.pack(f"<{len(values)}i", *values)


def binary_transition_model(entries, tuples) -> bytes:
    """As TransitionModel::Write(os, binary=true), preceded by Kaldi's binary header."""
    hmm = is_hmm(entries)
    phones = sorted(p for ps, _ in entries for p in ps)
    phone2idx = [-1] * (max(phones) + 1)
    for index, (ps, _) in enumerate(entries):
        for p in ps:
            phone2idx[p] = index
    out = [b"\0B<TransitionModel> <Topology> ", _int_vector(phones), _int_vector(phone2idx)]
    if not hmm:
        out.append(_int(-1))  # the marker of the extended (self-loop pdf class) format
    out.append(_int(len(entries)))
    for _, states in entries:
        out.append(_int(len(states)))
        for fwd, loop, transitions in states:
            out.append(_int(fwd) + (b"" if hmm else _int(loop)) + _int(len(transitions)))
            out.extend(_int(d) + _float(p) for d, p in transitions)
    kind = b"Triples" if hmm else b"Tuples"
    out.append(b"</Topology> <" + kind + b"> " + _int(len(tuples)))
    for phone, state, fwd, loop in tuples:
        out.append(_int(phone) + _int(state) + _int(fwd) + (b"" if hmm else _int(loop)))
    out.append(b"</" + kind + b"> <LogProbs> FV " + _int(2) + struct.pack("<2f", -0.5, -0.9) + b"</LogProbs> </TransitionModel> ")
    return b"".join(out)


def binary_ali_archive(alignments: dict[str, np.ndarray]) -> bytes:
    """Int32-vector archive as Kaldi's Int32VectorWriter writes it (via kaldiio)."""
    buffer = io.BytesIO()
    for utt in sorted(alignments):
        kaldiio.save_ark(buffer, {utt: np.asarray(alignments[utt], dtype=np.int32)})
    return buffer.getvalue()


def text_ali_archive(alignments: dict[str, np.ndarray]) -> bytes:
    """`ark,t:` form: `utt id id ... \\n` (BasicVectorHolder, text mode)."""
    return "".join(f"{utt} " + "".join(f"{v} " for v in alignments[utt]) + "\n" for utt in sorted(alignments)).encode()


def write_ali_gz(path: Path, alignments: dict[str, np.ndarray], binary: bool = True) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(gzip.compress(binary_ali_archive(alignments) if binary else text_ali_archive(alignments)))


# --- a learnable hybrid corpus -----------------------------------------------------------------


def random_alignment(rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """(transition ids, pdf ids) of a random phone sequence, each state held 2-6 frames.

    A frame carries the transition taken out of it: the self-loop, except on a state's last
    frame, which carries the forward transition (as in Kaldi's alignments).
    """
    tids, pdfs = [], []
    for phone in rng.integers(1, 5, size=rng.integers(2, 6)):
        for state in range(3):
            k = HMM_TRIPLES.index(next(t for t in HMM_TRIPLES if t[:2] == (phone, state)))
            frames = int(rng.integers(2, 7))
            tids += [2 * k + 1] * (frames - 1) + [2 * k + 2]
            pdfs += [HMM_TRIPLES[k][2]] * frames
    return np.array(tids, dtype=np.int32), np.array(pdfs, dtype=np.int64)


def pdf_means(seed: int = 7) -> np.ndarray:
    return np.random.default_rng(seed).normal(0, 2, (NUM_PDFS, FEAT_DIM))


def features_for(pdfs: np.ndarray, rng: np.random.Generator, means: np.ndarray) -> np.ndarray:
    """Each frame is its pdf's mean plus noise."""
    return (means[pdfs] + rng.normal(0, 0.5, (len(pdfs), FEAT_DIM))).astype(np.float32)


def write_hybrid_set(root: Path, set_name: str, num_utts: int, seed: int, feats_name: str = "hybrid", extra_feature_frames: int = 0):
    """Data dir, features and (returned) alignments of one set.

    Returns {utt: transition ids}, {utt: pdf ids}. `extra_feature_frames` makes the features
    longer than the alignments, as a different front end's framing would.
    """
    rng = np.random.default_rng(seed)
    means = pdf_means()
    data = DataDir()
    feats_dir = root / "feats" / feats_name / set_name
    feats_dir.mkdir(parents=True, exist_ok=True)
    mats, tids, pdfs = {}, {}, {}
    for i in range(num_utts):
        speaker = f"sw0{5000 + i % 3}-{'AB'[i % 2]}"
        utt_tids, utt_pdfs = random_alignment(rng)
        padded = np.concatenate([utt_pdfs, np.repeat(utt_pdfs[-1:], extra_feature_frames)])
        start = 20.0 * i + 1.0
        utt = f"{speaker}_{round(start * 100):06d}-{round((start + len(padded) / 100) * 100):06d}"
        mats[utt], tids[utt], pdfs[utt] = features_for(padded, rng, means), utt_tids, utt_pdfs
        data.text[utt] = "unused"
        data.utt2spk[utt] = speaker
        data.segments[utt] = Segment(speaker, start, start + len(padded) / 100)
        data.wav_scp[speaker] = f"/dev/null/{speaker}.wav"
        data.reco2file_and_channel[speaker] = (speaker.split("-")[0], speaker.split("-")[1])
    write_data_and_features(root / "data" / set_name, data, feats_dir, mats)
    return tids, pdfs


def hybrid_overrides(root: Path, extra: list[str] | None = None) -> list[str]:
    """A tiny frame_ce experiment on the hybrid corpus under `root`."""
    return [
        f"data.data_dir={root / 'data'}",
        "data.train_set=train",
        "data.dev_set=dev",
        "data.eval_set=eval",
        f"features.feats_dir={root / 'feats'}",
        "features.name=hybrid",
        f"exp_dir={root / 'exp'}",
        "experiment=hybrid_ce",
        f"train.alignments={root / 'ali'}",
        "model.num_layers=1",
        "model.hidden_size=32",
        "model.stack_frames=2",
        "model.subsample=2",
        "model.dropout=0.0",
        "train.epochs=4",
        "train.max_frames=1200",
        "train.max_utts=16",
        "train.lr=0.02",
        "train.warmup_steps=2",
        "train.lr_decay=1.0",
        "train.final_lr=0.0",
        "train.checkpoint_every_steps=100",
        "train.log_every_steps=5",
        "train.threads=1",
        "device=cpu",
    ] + (extra or [])
