"""Monophone training end to end on hand-made utterances (a hand-made lang, features drawn from
one Gaussian per HMM state): the realigned phone boundaries land where they were drawn, and the
outputs are Kaldi's: final.mdl, tree, ali.N.gz that kaldiio and the hybrid path's reader read."""

import gzip
from pathlib import Path
from types import SimpleNamespace

import kaldiio
import numpy as np
import pytest
from omegaconf import OmegaConf

from asr.gmm.boundaries import BoundaryScore, aligned_runs, boundaries
from asr.gmm.config import GmmConfig
from asr.gmm.train import run_gmm_training, training_data
from asr.kaldi.model import read_model
from asr.kaldi.alignments import AlignmentArchives
from tests.gmm.handmade import HandmadeLang, sample_utterances, write_corpus


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    root = tmp_path_factory.mktemp("gmm")
    lang = HandmadeLang()
    texts, feats, truth = sample_utterances(lang, 60)
    data_dir, feats_dir = write_corpus(root, {u: [str(w) for w in t] for u, t in texts.items()}, feats)
    cfg = OmegaConf.structured(
        GmmConfig(
            front_end="stored",
            delta_order=0,
            nj=1,
            num_iters=12,
            realign_iters=[1, 2, 3, 4, 6, 8, 10],
            max_iter_inc=8,
            total_gauss=40,
            init_utts=60,
            min_gaussian_occupancy=3,
        )
    )
    data = training_data(data_dir, feats_dir, lang)
    summary = run_gmm_training(SimpleNamespace(gmm=cfg), lang, data, data, root / "mono", ({}, []))
    return root / "mono", lang, feats, truth, summary


def kaldiio_alignments(path: Path) -> dict:
    """An ali.N.gz as Kaldi's tools see it (kaldiio: `gunzip -c ali.1.gz | copy-int-vector`)."""
    with gzip.open(path, "rb") as f:
        return {utt: np.asarray(tids) for utt, tids in kaldiio.load_ark(f)}


def test_outputs_are_kaldis(trained):
    out, lang, feats, _, summary = trained
    assert sorted(p.name for p in out.iterdir()) == [
        "ali.1.gz",
        "final.mdl",
        "gmm.record.json",
        "log",
        "num_jobs",
        "summary.json",
        "tree",
    ]
    assert len((out / "log" / "train.log").read_text().splitlines()) == 12 + 1
    tm, am = read_model(out / "final.mdl")
    assert am.num_pdfs == tm.num_pdfs == 4 * 3 + 5 and am.num_gauss == summary["num_gauss"]
    kaldi = kaldiio_alignments(out / "ali.1.gz")
    assert set(kaldi) == set(feats) and all(len(kaldi[u]) == len(feats[u]) for u in feats)
    pdfs = dict(AlignmentArchives(str(out)).read(set(feats)))  # transition ids -> pdfs by final.mdl beside them
    assert all((pdfs[u] == np.asarray(tm.id2pdf_id)[kaldi[u]]).all() for u in feats)


def handmade_scores(trained, tolerance: int = 2) -> tuple[BoundaryScore, list[int]]:
    """The trained aligner's boundaries against the drawn ones, and the signed offset of every
    boundary found within 5 frames."""
    out, lang, feats, truth, _ = trained
    tm, _ = read_model(out / "final.mdl")
    phone_of_tid = np.array([0] + [tm.transition_id_to_phone(t) for t in range(1, tm.num_transition_ids + 1)])
    score, offsets = BoundaryScore(), []
    for utt, tids in kaldiio_alignments(out / "ali.1.gz").items():
        phones, starts = truth[utt]
        reference = np.repeat([lang.phones[p] for p in phones], np.diff([*starts, len(feats[utt])]))
        hypothesis = phone_of_tid[tids]
        score.add(reference, hypothesis, tolerance)
        hyp = {
            (a, b): [f for f, x, y in boundaries(hypothesis) if (x, y) == (a, b)] for _, a, b in boundaries(reference)
        }
        for frame, a, b in boundaries(reference):
            near = [f - frame for f in hyp[(a, b)] if abs(f - frame) <= 5]
            offsets += [min(near, key=abs)] if near else []
    return score, offsets


def test_the_likelihood_rises_and_boundaries_land_where_drawn(trained):
    summary = trained[-1]
    likes = [p["log_like_per_frame"] for p in summary["passes"]]
    assert likes[-1] > likes[0] + 1.0
    score, offsets = handmade_scores(trained)
    assert score.utterances == 60 and score.accuracy > 0.9, score.as_dict()  # 94% measured
    assert score.matched_accuracy >= score.accuracy  # one phone sequence: every pair has its counterpart
    # no systematic offset: most boundaries land on the drawn frame (74% measured), the median
    # exactly (a frame-shift or labelling error of one frame moves both)
    assert np.median(offsets) == 0 and np.mean(np.asarray(offsets) == 0) > 0.6, offsets


def test_a_boundary_offset_fails_the_score(trained):
    """The score catches alignments that are right but late: the drawn phones themselves, 3
    frames (30 ms) late, find nothing within 20 ms; 1 frame late, nothing exactly."""
    _, lang, feats, truth, _ = trained

    def scores(shift: int, tolerance: int) -> BoundaryScore:
        score = BoundaryScore()
        for utt, (phones, starts) in truth.items():
            reference = np.repeat([lang.phones[p] for p in phones], np.diff([*starts, len(feats[utt])]))
            late = np.r_[np.full(shift, reference[0]), reference[: len(reference) - shift]]
            score.add(reference, late, tolerance)
        return score

    assert scores(0, 0).accuracy == scores(0, 0).matched_accuracy == 1.0
    assert scores(3, 2).accuracy == scores(3, 2).matched_accuracy == 0.0
    assert scores(1, 0).accuracy == scores(1, 0).matched_accuracy == 0.0
    assert scores(1, 1).accuracy == 1.0


def test_boundary_score_counts_pairs_within_the_tolerance():
    score = BoundaryScore()
    reference = np.array([1, 1, 2, 2, 2, 3, 3, 1])  # boundaries (2: 1->2), (5: 2->3), (7: 3->1)
    score.add(
        reference, np.array([1, 1, 1, 2, 2, 2, 2, 1]), tolerance=1
    )  # 1->2 at 3 (found), 2->3 missing, 2->1 not 3->1
    score.add(reference, None, tolerance=1)  # not aligned: all missed
    assert (score.reference, score.found, score.missing_utterances) == (6, 1, 1)
    assert score.matched == 1  # 1->2 at 3; the runs of 3 and its boundaries have no counterpart


def test_the_matched_score_times_substituted_phones_and_misses_left_out_ones():
    """Run sequences are aligned: a phone named differently (4 for 2) keeps its boundaries'
    timing; a phone the alignment left out (3) has no counterpart for its boundaries."""
    assert aligned_runs(np.array([1, 2, 3, 1]), np.array([1, 4, 3, 1])) == [(0, 0), (1, 1), (2, 2), (3, 3)]
    assert aligned_runs(np.array([1, 2, 3, 1]), np.array([1, 2, 1])) == [(0, 0), (1, 1), (3, 2)]
    reference = np.array([1, 1, 2, 2, 2, 3, 3, 1, 1])  # boundaries at 2, 5, 7
    score = BoundaryScore()
    score.add(reference, np.array([1, 1, 1, 4, 4, 3, 3, 3, 1]), tolerance=1)  # 4 for 2: 3, 5, 8
    assert (score.found, score.matched) == (1, 3)  # only 3->1 agrees by name; all three within a frame
    score.add(reference, np.array([1, 1, 2, 2, 2, 2, 2, 1, 1]), tolerance=1)  # 3 left out
    assert (score.found, score.matched) == (2, 4)  # 1->2 only


def test_missing_transcripts_are_input_errors(tmp_path):
    from asr.utils.errors import InputError

    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "utt2spk").write_text("u1 s1\n")
    with pytest.raises(InputError, match="text"):
        training_data(tmp_path / "data", Path(tmp_path / "feats"), HandmadeLang())


def test_a_damaged_model_tree_or_alignment_is_refused_in_one_line(trained, tmp_path):
    """Issue 31, item 3: final.mdl, tree and ali.N.gz are verified against the GMM stage's
    record before use (a copy of the module's run)."""
    import shutil

    from asr.kaldi.tree import load_context_dependency
    from asr.utils.errors import InputError

    out = shutil.copytree(trained[0], tmp_path / "mono")
    rerun = r"; re-run the gmm stage \(python -m asr.gmm\)$"
    ali = out / "ali.1.gz"
    ali.write_bytes(ali.read_bytes()[:-12])
    with pytest.raises(
        InputError, match=rf"^{ali}: damaged, truncated or replaced alignment archive \(\d+ bytes.*{rerun}"
    ):
        list(AlignmentArchives(str(out)).read(set(trained[2])))
    tree = out / "tree"
    data = bytearray(tree.read_bytes())
    data[-5] ^= 0x01
    tree.write_bytes(bytes(data))
    with pytest.raises(InputError, match=rf"^{tree}: damaged, .* decision tree \(sha1.*{rerun}"):
        load_context_dependency(tree)
    shutil.copyfile(tree, out / "final.mdl")  # a swapped file
    with pytest.raises(InputError, match=rf"^{out / 'final.mdl'}: damaged, .* GMM model \(\d+ bytes.*{rerun}"):
        read_model(out / "final.mdl")


def test_the_stage_skips_a_system_whose_record_says_it_is_done(tmp_path, caplog):
    """python -m asr.gmm by the stage record: unchanged options and inputs (transcripts, speakers,
    feature set) skip the system; an edited transcript, another option or no record (a stage
    killed before writing it) trains it again."""
    from asr.gmm.stage import run

    lang = HandmadeLang()
    texts, feats, _ = sample_utterances(lang, 30)
    data_dir, feats_dir = write_corpus(tmp_path / "made", {u: [str(w) for w in t] for u, t in texts.items()}, feats)
    (tmp_path / "data").mkdir()
    (tmp_path / "feats" / "x").mkdir(parents=True)
    (tmp_path / "data" / "train").symlink_to(data_dir)  # the layout of data.data_dir and features.feats_dir
    (tmp_path / "feats" / "x" / "train").symlink_to(feats_dir)
    gmm = GmmConfig(
        dir=str(tmp_path / "mono"),
        lang_dir=str(tmp_path / "lang"),
        train_set="train",
        align_set="train",
        front_end="stored",
        delta_order=0,
        nj=1,
        num_iters=4,
        realign_iters=[1, 2],
        max_iter_inc=3,
        total_gauss=20,
        init_utts=30,
        min_gaussian_occupancy=3,
    )
    cfg = OmegaConf.create(
        {
            "gmm": OmegaConf.structured(gmm),
            "data": {"data_dir": str(tmp_path / "data")},
            "features": {"feats_dir": str(tmp_path / "feats"), "name": "x"},
        }
    )

    def trained() -> bool:
        caplog.clear()
        with caplog.at_level("INFO", logger="asr.gmm"):
            run(cfg, lang)
        return "done already" not in caplog.text

    assert trained() and not trained()
    text = tmp_path / "data" / "train" / "text"
    text.write_text("".join(text.read_text().splitlines(keepends=True)[1:]))  # one transcript fewer
    assert trained() and f"{text} changed since the gmm stage read it" in caplog.text
    assert not trained()
    cfg.gmm.beam = 12.0
    assert trained() and not trained()
    (tmp_path / "mono" / "gmm.record.json").unlink()
    assert trained() and not trained()
