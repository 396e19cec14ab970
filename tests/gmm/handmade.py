"""A hand-made lang (the Lang interface of asr/lang: phones, topology, L.fst, word ids) and
utterances synthesised from it: each phone state a Gaussian, known phone boundaries."""

from __future__ import annotations

from dataclasses import dataclass, field

import kaldi_hmm_gmm as khg
import kaldifst
import numpy as np

PHONES = ["<eps>", "sil", "a", "b", "c", "d", "#0", "#1"]
LEXICON = {"ab": ["a", "b"], "cd": ["c", "d"], "bad": ["b", "a", "d"], "ca": ["c", "a"]}


def state_line(state: int, targets: list[int], probs: list[float]) -> str:
    return (
        f"<State> {state} <PdfClass> {state} "
        + " ".join(f"<Transition> {t} {p}" for t, p in zip(targets, probs))
        + " </State>"
    )


def topology_text(silence: list[int], nonsilence: list[int]) -> str:
    """Kaldi's prepare_lang topology: 3 left-to-right states, silence 5 states with a loop in 1-3."""
    phone3 = [state_line(s, [s, s + 1], [0.75, 0.25]) for s in range(3)] + ["<State> 3 </State>"]
    sil = [state_line(0, [0, 1, 2, 3], [0.25] * 4)]
    sil += [state_line(s, [1, 2, 3, 4], [0.25] * 4) for s in (1, 2, 3)]
    sil += [state_line(4, [4, 5], [0.75, 0.25]), "<State> 5 </State>"]

    def entry(phones, states):
        return "\n".join(
            ["<TopologyEntry>", "<ForPhones>", " ".join(map(str, phones)), "</ForPhones>", *states, "</TopologyEntry>"]
        )

    return "\n".join(["<Topology>", entry(nonsilence, phone3), entry(silence, sil), "</Topology>", ""])


@dataclass
class HandmadeLang:
    phones: dict[str, int] = field(default_factory=lambda: {p: i for i, p in enumerate(PHONES)})
    words: dict[str, int] = field(default_factory=dict)

    def __post_init__(self):
        self.words = {"<eps>": 0, **{w: i for i, w in enumerate(sorted(LEXICON), 1)}, "<unk>": len(LEXICON) + 1}
        self.silence_phones = [self.phones["sil"]]
        self.nonsilence_phones = [self.phones[p] for p in "abcd"]
        self.disambig_phones = [self.phones["#0"], self.phones["#1"]]
        self.optional_silence = self.phones["sil"]
        self.oov = self.words["<unk>"]

    def topology(self) -> khg.HmmTopology:
        topo = khg.HmmTopology()
        topo.read(topology_text(self.silence_phones, self.nonsilence_phones))
        return topo

    def lexicon_fst(self, disambig: bool = False) -> kaldifst.StdVectorFst:
        """Words between optional silences (each 0.5), as Kaldi's L.fst with sil_prob 0.5."""
        lines, state = [], 2  # 0: start/after a word, 1: after silence
        half = float(-np.log(0.5))
        lines += [f"0 1 {self.phones['sil']} 0 {half}"]
        for word, pron in sorted(LEXICON.items()):
            for source in (0, 1):
                previous = source
                for i, phone in enumerate(pron):
                    last = i == len(pron) - 1
                    target = 0 if last else state
                    out = self.words[word] if i == 0 else 0
                    lines.append(f"{previous} {target} {self.phones[phone]} {out} {half if last else 0}")
                    if not last:
                        previous, state = state, state + 1
        lines += ["0 0", "1 0"]
        fst = kaldifst.compile("\n".join(lines))
        kaldifst.arcsort(fst, sort_type="olabel")
        return fst

    def word_ids(self, words: list[str]) -> list[int]:
        return [self.words.get(w, self.oov) for w in words]


def sample_utterances(lang: HandmadeLang, count: int, dim: int = 6, seed: int = 0):
    """(utt -> words, utt -> features, utt -> phone boundary frames, per-state means): each
    phone's 3 states (silence: one mean for all 5) are unit Gaussians around their own means."""
    rng = np.random.default_rng(seed)
    means = {(p, s): rng.normal(scale=3.0, size=dim) for p in "abcd" for s in range(3)}
    means.update({("sil", s): np.full(dim, -4.0) for s in range(5)})
    texts, feats, bounds = {}, {}, {}
    for n in range(count):
        words = list(rng.choice(sorted(LEXICON), size=rng.integers(1, 4)))
        phones = ["sil"] + [p for w in words for p in LEXICON[w]] + ["sil"]
        frames, starts = [], []
        for phone in phones:
            starts.append(len(frames))
            states = 5 if phone == "sil" else 3
            for s in range(states):
                frames += [means[(phone, s)] + rng.normal(size=dim) for _ in range(rng.integers(2, 6))]
        utt = f"utt{n:03d}"
        texts[utt], feats[utt], bounds[utt] = words, np.asarray(frames, np.float32), (phones, starts)
    return texts, feats, bounds


def write_corpus(root, texts: dict, feats: dict):
    """A data dir (utt2spk, text) and a feature set (feats.scp, feat_dim, utt2num_frames, no CMVN)."""
    from pathlib import Path

    from asr.features.featureset import FeatureWriter

    root = Path(root)
    data, feats_dir = root / "data", root / "feats"
    data.mkdir(parents=True)
    feats_dir.mkdir(parents=True)
    (data / "utt2spk").write_text("".join(f"{u} {u}\n" for u in sorted(texts)))
    (data / "text").write_text("".join(f"{u} {' '.join(texts[u])}\n" for u in sorted(texts)))
    with FeatureWriter(feats_dir / "feats.ark", feats_dir / "feats.scp", compress=False) as writer:
        for u in sorted(feats):
            writer(u, feats[u])
    (feats_dir / "feat_dim").write_text(f"{next(iter(feats.values())).shape[1]}\n")
    (feats_dir / "utt2num_frames").write_text("".join(f"{u} {len(feats[u])}\n" for u in sorted(feats)))
    return data, feats_dir
