"""HCLG decodes synthesised utterances to their transcripts: the tiny synthetic corpus' own
dictionary and a unigram LM of its training text, a monophone tree, and acoustic scores that
favour, frame by frame, the HMM states of the phone the synthesiser's timings put there (a
constructed score, not a trained model: this checks the dictionary against the audio's phones
and the graph, not acoustic modelling). Measured: 2.85% WER on the 85 segments, 6.8 s. The
words' times from the best path's phones (GraphDecoder) are checked against the synthesiser's
word timings (`-word.text`)."""

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
from asr.lang.search import GraphDecoder, SearchOptions


FRAME = 0.01
SOUNDS = {"[noise]": "nsn", "[laughter]": "lau"}


def timings(trans: Path, kind: str) -> dict[str, list[tuple[float, float, str]]]:
    """segment id -> (start, end, label) of the phone or word timings, in recording time."""
    rows = [line.split() for line in Path(str(trans).replace("-trans", f"-{kind}")).read_text().splitlines()]
    by_segment: dict[str, list] = {}
    for sid, begin, end, label in rows:
        by_segment.setdefault(sid, []).append((float(begin), float(end), label))
    return by_segment


def segments(corpus: Path):
    """(reference words, phone spans, word spans, frames) per speech segment; spans are
    (start, end, label) in seconds from the segment's start."""
    for trans in sorted(corpus.glob(f"{MS98_DIR}/*/*/*-trans.text")):
        phones, words_at = timings(trans, "phone"), timings(trans, "word")
        for line in trans.read_text().splitlines():
            sid, start, end, *words = line.split()
            reference = normalize_ms98_text(" ".join(words)).split()
            if reference:
                offset = float(start)
                relative = [
                    [(b - offset, e - offset, label) for b, e, label in spans.get(sid, [])]
                    for spans in (phones, words_at)
                ]
                yield reference, relative[0], relative[1], int((float(end) - offset) / FRAME)


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
    return loglikes


def boundaries_within(decoded, word_spans, tolerance: float) -> tuple[int, int]:
    """(boundaries within `tolerance` seconds of the synthesiser's, boundaries) of a segment
    decoded to its transcript: every word's start and end."""
    spoken = [(b, e) for b, e, label in word_spans if not label.startswith("[")]
    close = sum(
        (abs(w.start * FRAME - b) <= tolerance) + (abs(w.end * FRAME - e) <= tolerance)
        for w, (b, e) in zip(decoded, spoken)
    )
    return close, 2 * len(decoded)


def test_oracle_phone_scores_decode_to_the_transcripts(tmp_path):
    corpus = tmp_path / "corpus"
    synthesize_corpus(load_config(["synth=tiny", f"synth.out_dir={corpus}"]).synth)
    build_lang_dir(dictionary_path(corpus), tmp_path / "lang")
    lang = Lang.load(tmp_path / "lang")
    data = list(segments(corpus))
    unigram_arpa([reference for reference, *_ in data], tmp_path / "lm.arpa")
    topo = lang.topology()
    phones = sorted(lang.silence_phones + lang.nonsilence_phones)
    tree = kaldi_hmm_gmm.monophone_context_dependency(phones, topo.get_phone_to_num_pdf_classes())
    trans_model = kaldi_hmm_gmm.TransitionModel(tree, topo)
    graph = tmp_path / "graph"
    graph.mkdir()
    make_hclg(lang, tree, trans_model, grammar_fst(tmp_path / "lm.arpa", lang)).write(str(graph / "HCLG.fst"))
    decoder = GraphDecoder(graph, trans_model, lang, SearchOptions(acoustic_scale=1.0))
    references, hypotheses, close, boundaries = [], [], 0, 0
    for reference, phone_spans, word_spans, frames in data:
        decoded = decoder(oracle_scores(phone_spans, frames, lang, tree, trans_model))
        references.append(" ".join(reference))
        hypotheses.append(" ".join(w.word for w in decoded))
        if hypotheses[-1] == references[-1] and not any(w.startswith("[") for w in reference):
            within, total = boundaries_within(decoded, word_spans, tolerance=0.02)
            close, boundaries = close + within, boundaries + total
    wer = jiwer.wer(references, hypotheses)
    print(f"oracle-score WER {100 * wer:.2f}% on {len(references)} segments; word boundaries {close}/{boundaries}")
    assert len(references) > 50 and wer < 0.1, wer
    assert boundaries > 100 and close >= 0.8 * boundaries, (close, boundaries)
