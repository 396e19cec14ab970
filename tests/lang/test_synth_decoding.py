"""HCLG decodes synthesised utterances to their transcripts: the tiny synthetic corpus' own
dictionary and a unigram LM of its training text, a monophone tree, and acoustic scores that
favour, frame by frame, the HMM states of the phone the synthesiser's timings put there (a
constructed score, not a trained model: this checks the dictionary against the audio's phones
and the graph, not acoustic modelling). Measured: 2.85% WER on the 85 segments, 6.8 s."""

from __future__ import annotations

import math
from collections import Counter
from pathlib import Path

import jiwer
import kaldi_hmm_gmm
import numpy as np

from asr.config import load_config
from asr.data.synth.corpus import synthesize_corpus
from asr.data.synth.dictionary import dictionary_path
from asr.data.synth.layouts import MS98_DIR
from asr.data.text_norm import normalize_ms98_text
from asr.lang.graph import grammar_fst, make_hclg
from asr.lang.langdir import Lang
from asr.lang.prepare import build_lang_dir
from asr.lang.search import decode_wfst, pdf_to_transition_loglikes


FRAME = 0.01
SOUNDS = {"[noise]": "nsn", "[laughter]": "lau"}


def segments(corpus: Path):
    """(reference words, [(start, end, phone)] relative to the segment, frames) per speech segment."""
    for trans in sorted(corpus.glob(f"{MS98_DIR}/*/*/*-trans.text")):
        rows = [line.split() for line in Path(str(trans).replace("-trans", "-phone")).read_text().splitlines()]
        for line in trans.read_text().splitlines():
            sid, start, end, *words = line.split()
            reference = normalize_ms98_text(" ".join(words)).split()
            if reference:
                spans = [(float(r[1]) - float(start), float(r[2]) - float(start), r[3]) for r in rows if r[0] == sid]
                yield reference, spans, int((float(end) - float(start)) / FRAME)


def unigram_arpa(texts: list[list[str]], path: Path) -> None:
    counts = Counter(w for words in texts for w in words + ["</s>"])
    total = sum(counts.values())
    lines = ["\\data\\", f"ngram 1={len(counts) + 1}", "", "\\1-grams:", "-99\t<s>"]
    lines += [f"{math.log10(c / total):.6f}\t{w}" for w, c in sorted(counts.items())]
    path.write_text("\n".join(lines + ["", "\\end\\", ""]))


def oracle_scores(spans, frames: int, lang: Lang, tree, trans_model) -> np.ndarray:
    topo = lang.topology()

    def pdfs(name: str) -> list[int]:
        phone = lang.phones[SOUNDS.get(name, name)]
        return [tree.compute([phone], c)[1] for c in range(topo.num_pdf_classes(phone))]

    loglikes = np.full((frames, trans_model.num_pdfs), -10.0, np.float32)
    loglikes[:, pdfs("sil")] = 0.0
    for start, end, phone in spans:
        covered = slice(max(0, round(start / FRAME)), min(frames, round(end / FRAME)))
        loglikes[covered] = -10.0
        loglikes[covered, pdfs(phone)] = 0.0
    return pdf_to_transition_loglikes(loglikes, trans_model)


def test_oracle_phone_scores_decode_to_the_transcripts(tmp_path):
    corpus = tmp_path / "corpus"
    synthesize_corpus(load_config(["synth=tiny", f"synth.out_dir={corpus}"]).synth)
    build_lang_dir(dictionary_path(corpus), tmp_path / "lang")
    lang = Lang.load(tmp_path / "lang")
    data = list(segments(corpus))
    unigram_arpa([reference for reference, _, _ in data], tmp_path / "lm.arpa")
    topo = lang.topology()
    phones = sorted(lang.silence_phones + lang.nonsilence_phones)
    tree = kaldi_hmm_gmm.monophone_context_dependency(phones, topo.get_phone_to_num_pdf_classes())
    trans_model = kaldi_hmm_gmm.TransitionModel(tree, topo)
    hclg = make_hclg(lang, tree, trans_model, grammar_fst(tmp_path / "lm.arpa", lang))
    references, hypotheses = [], []
    for reference, spans, frames in data:
        words, _ = decode_wfst(hclg, oracle_scores(spans, frames, lang, tree, trans_model), trans_model)
        references.append(" ".join(reference))
        hypotheses.append(" ".join(lang.word_names[w] for w in words))
    wer = jiwer.wer(references, hypotheses)
    print(f"oracle-score WER {100 * wer:.2f}% on {len(references)} segments")
    assert len(references) > 50 and wer < 0.1, wer
