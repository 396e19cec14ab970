"""Deltas, splicing and CMVN against hand-computed values (Kaldi's formulas)."""

import kaldiio
import numpy as np
import pytest

from asr.features import cmvn
from asr.features.deltas import add_deltas, delta_scales
from asr.features.splice import SplicedBlocks, splice


def test_delta_filters_are_kaldis():
    first, second = delta_scales(2, 2)[1:]
    np.testing.assert_allclose(first, [-0.2, -0.1, 0.0, 0.1, 0.2])
    # Kaldi's order-2 filter: the order-1 filter applied to itself, / 100.
    np.testing.assert_allclose(second, np.array([4, 4, 1, -4, -10, -4, 1, 4, 4]) / 100)


def test_deltas_by_hand_with_edge_frames_repeated():
    x = np.array([[1.0], [2.0], [4.0], [8.0], [16.0]], dtype=np.float32)
    out = add_deltas(x, order=2, window=2)
    assert out.shape == (5, 3) and out.dtype == np.float32
    np.testing.assert_array_equal(out[:, 0], x[:, 0])
    # d_t = (-2 x[t-2] - x[t-1] + x[t+1] + 2 x[t+2]) / 10, frames clamped to [0, 4]
    np.testing.assert_allclose(out[:, 1], [0.7, 1.7, 3.6, 4.0, 3.2], rtol=1e-6)
    # t=2 reaches frames -2..6 -> 1 1 1 2 4 8 16 16 16 with the taps above
    assert out[2, 2] == pytest.approx((4 + 4 + 1 - 8 - 40 - 32 + 16 + 64 + 64) / 100, rel=1e-6)


def test_deltas_of_a_parabola_are_its_derivatives():
    t = np.arange(20, dtype=np.float64)[:, None]
    out = add_deltas(np.hstack([t * t, 3 * t + 1]), order=2, window=2)
    inner = slice(4, 16)  # away from the repeated edge frames
    np.testing.assert_allclose(out[inner, 2], 2 * t[inner, 0], rtol=1e-12)  # d/dt t^2
    np.testing.assert_allclose(out[inner, 3], 3.0)
    np.testing.assert_allclose(out[inner, 4], 2.0, atol=1e-12)  # d2/dt2 t^2
    np.testing.assert_allclose(out[inner, 5], 0.0, atol=1e-12)


def test_deltas_of_empty_and_order_zero():
    assert add_deltas(np.zeros((0, 3), np.float32), 2).shape == (0, 9)
    x = np.ones((4, 3), np.float32)
    np.testing.assert_array_equal(add_deltas(x, 0), x)
    np.testing.assert_allclose(add_deltas(x, 2)[:, 3:], 0.0, atol=1e-7)  # constant input: zero deltas


@pytest.mark.parametrize("block", [1, 7, 40, 41, 1000])
def test_spliced_blocks_are_the_spliced_utterances_cut_in_blocks(block):
    """Against splicing each utterance and concatenating them all: the same rows, in blocks of
    `block` (the last one shorter), the same again on a second pass."""
    rng = np.random.default_rng(3)
    utterances = [rng.normal(size=(n, 4)).astype(np.float32) for n in (5, 1, 17, 0, 9, 3)]
    whole = np.concatenate([splice(u, 2, 1) for u in utterances])
    blocks = SplicedBlocks(utterances, 2, 1, block)
    for _ in range(2):
        pieces = list(blocks)
        assert all(len(b) == block for b in pieces[:-1]) and 0 < len(pieces[-1]) <= block
        np.testing.assert_array_equal(np.concatenate(pieces), whole)


def test_splice_repeats_edge_frames():
    x = np.arange(8, dtype=np.float32).reshape(4, 2)  # frames [0 1] [2 3] [4 5] [6 7]
    out = splice(x, 1, 2)
    assert out.shape == (4, 8)
    np.testing.assert_array_equal(out[0], [0, 1, 0, 1, 2, 3, 4, 5])
    np.testing.assert_array_equal(out[3], [4, 5, 6, 7, 6, 7, 6, 7])
    np.testing.assert_array_equal(splice(x, 0, 0), x)
    assert splice(np.zeros((0, 2)), 3, 3).shape == (0, 14)


def test_cmvn_stats_and_normalisation_by_hand(tmp_path):
    a = np.array([[1.0, 2.0], [3.0, 6.0]], dtype=np.float32)
    b = np.array([[5.0, 0.0]], dtype=np.float32)
    stats = cmvn.accumulate([a])
    np.testing.assert_array_equal(stats, [[4, 8, 2], [10, 40, 0]])
    # mean (2, 4); variance (10/2 - 4, 40/2 - 16) = (1, 4)
    np.testing.assert_allclose(cmvn.apply(a, stats), [[-1, -1], [1, 1]])
    np.testing.assert_allclose(cmvn.apply(a, stats, norm_vars=False), [[-1, -2], [1, 2]])

    utt2spk = {"s1-u1": "s1", "s1-u2": "s1", "s2-u1": "s2"}
    per_speaker = cmvn.compute_stats("speaker", {"s1-u1": a, "s1-u2": b, "s2-u1": b}, utt2spk)
    np.testing.assert_array_equal(per_speaker["s1"], [[9, 8, 3], [35, 40, 0]])
    np.testing.assert_array_equal(per_speaker["s2"], [[5, 0, 1], [25, 0, 0]])
    glob = cmvn.compute_stats("global", {"s1-u1": a, "s2-u1": b}, utt2spk)
    assert list(glob) == ["global"] and glob["global"][0, -1] == 3

    cmvn.write_stats(per_speaker, tmp_path, "speaker")
    assert (tmp_path / "cmvn_type").read_text() == "speaker\n"
    applier = cmvn.CmvnApplier(tmp_path, utt2spk, norm_vars=True)
    mean, var = np.array([3.0, 8 / 3]), np.array([35 / 3 - 9, 40 / 3 - 64 / 9])
    np.testing.assert_allclose(applier("s1-u2", b), (b - mean) / np.sqrt(var), rtol=1e-6)


def test_cmvn_scp_is_kaldi_double_matrix(tmp_path):
    """What Kaldi's compute-cmvn-stats writes: a 2 x (D+1) double matrix per key in a binary ark."""
    stats = {"spk": np.array([[4.0, 8.0, 2.0], [10.0, 40.0, 0.0]])}
    cmvn.write_stats(stats, tmp_path, "speaker")
    raw = (tmp_path / "cmvn.ark").read_bytes()
    header = b"spk \0BDM \x04" + (2).to_bytes(4, "little") + b"\x04" + (3).to_bytes(4, "little")
    assert raw.startswith(header)
    np.testing.assert_array_equal(np.frombuffer(raw[len(header) :], "<f8").reshape(2, 3), stats["spk"])
    np.testing.assert_array_equal(kaldiio.load_scp(str(tmp_path / "cmvn.scp"))["spk"], stats["spk"])
