"""The feature set's storage: Kaldi's compressed matrices through kaldiio, and deltas appended
on reading."""

import io

import kaldiio
import numpy as np
import pytest
import torch

from asr.features.deltas import add_deltas
from asr.features.featureset import FeatureLayout, FeatureReader, FeatureWriter, LoadDeltas
from asr.utils.errors import InputError


def speech_like(rng, frames: int, dim: int) -> np.ndarray:
    """Log-mel-like values: a per-bin level, slow drift and noise."""
    level = rng.uniform(5, 15, dim)
    drift = np.cumsum(rng.standard_normal((frames, 1)), axis=0) * 0.3
    return (level + drift + rng.standard_normal((frames, dim))).astype(np.float32)


@pytest.mark.parametrize("compress", [False, True])
def test_writer_is_kaldiio_readable_and_returns_what_is_read(tmp_path, compress):
    rng = np.random.default_rng(0)
    mats = {f"utt{i}": speech_like(rng, 50 + 30 * i, 40) for i in range(4)}
    mats["tiny"] = speech_like(rng, 3, 40)  # <= 8 frames: Kaldi's automatic method keeps 2 bytes
    returned = {}
    with FeatureWriter(tmp_path / "feats.ark", tmp_path / "feats.scp", compress) as writer:
        for key, mat in mats.items():
            returned[key] = writer(key, mat)
    read = kaldiio.load_scp(str(tmp_path / "feats.scp"))
    assert list(read) == list(mats)
    for key, mat in mats.items():
        np.testing.assert_array_equal(read[key], returned[key])
        if compress:  # at least 64 levels per column's range, plus the 16-bit column headers
            assert np.abs(read[key] - mat).max() <= np.ptp(mat) / 64
        else:
            np.testing.assert_array_equal(read[key], mat)
    # The same bytes as kaldiio's own writer with Kaldi's automatic compression.
    with kaldiio.WriteHelper(
        f"ark,scp:{tmp_path / 'ref.ark'},{tmp_path / 'ref.scp'}", compression_method=1 if compress else None
    ) as ref:
        for key, mat in mats.items():
            ref(key, mat)
    assert (tmp_path / "ref.ark").read_bytes() == (tmp_path / "feats.ark").read_bytes()
    assert (tmp_path / "ref.scp").read_text().replace("ref.ark", "feats.ark") == (tmp_path / "feats.scp").read_text()


def test_compression_stores_about_a_quarter():
    rng = np.random.default_rng(1)
    sizes = {}
    for compress in (False, True):
        buf = io.BytesIO()
        kaldiio.save_ark(buf, {"u": speech_like(rng, 500, 80)}, compression_method=1 if compress else None)
        sizes[compress] = len(buf.getvalue())
    assert sizes[True] < 0.27 * sizes[False]  # 1 byte per value + 8 per column, against 4 per value


def test_load_deltas_append_the_named_columns_deltas(tmp_path):
    rng = np.random.default_rng(2)
    stored = speech_like(rng, 60, 13)
    deltas = LoadDeltas(order=2, window=2, first=5, last=13)
    out = deltas(stored)
    assert out.shape == (60, 13 + 16) and deltas.added_dim == 16
    np.testing.assert_array_equal(out[:, :13], stored)
    np.testing.assert_allclose(out[:, 13:], add_deltas(stored[:, 5:13], 2, 2)[:, 8:], rtol=1e-6, atol=1e-6)
    deltas.write(tmp_path)
    (tmp_path / "feat_dim").write_text("29\n")
    layout = FeatureLayout.read(tmp_path)
    assert layout == FeatureLayout(29, deltas) and layout.stored_dim == 13


def test_reader_refuses_a_stored_width_that_does_not_fit(tmp_path):
    rng = np.random.default_rng(3)
    with FeatureWriter(tmp_path / "feats.ark", tmp_path / "feats.scp", compress=True) as writer:
        writer("u1", speech_like(rng, 40, 10))
    LoadDeltas(2, 2, 0, 10).write(tmp_path)
    (tmp_path / "feat_dim").write_text("30\n")
    assert FeatureReader(tmp_path, {"u1": "s1"})("u1").shape == (40, 30)
    (tmp_path / "feat_dim").write_text("40\n")
    with pytest.raises(
        InputError,
        match=r"'u1' has shape \(40, 10\), expected \(T, 20\) from feat_dim less the deltas of delta_columns",
    ):
        FeatureReader(tmp_path, {"u1": "s1"})("u1")
    (tmp_path / "delta_opts").unlink()
    with pytest.raises(InputError, match="delta_opts: missing beside"):
        FeatureLayout.read(tmp_path)
    (tmp_path / "delta_opts").write_text("--delta-order=two\n")
    with pytest.raises(InputError, match="delta_columns: expected 'first last'"):
        FeatureLayout.read(tmp_path)


@pytest.mark.parametrize("compression", [None, 1, 2, 3, 4, 5, 6, 7, "text"])
def test_rows_read_alone_equal_the_whole_matrix_rows_deltas_included(tmp_path, compression):
    """Rows read alone (a training sample of asr/train/chunks.py), from every Kaldi matrix kind, with the
    deltas' reach around them, equal the whole matrix's rows bit for bit."""
    rng = np.random.default_rng(0)
    mats = {f"u{i}": rng.normal(size=(int(rng.integers(20, 60)), 6)).astype(np.float32) for i in range(3)}
    kind = (
        {"text": True} if compression == "text" else {"compression_method": compression}
    )  # text: read whole, then cut
    kaldiio.save_ark(str(tmp_path / "feats.ark"), mats, scp=str(tmp_path / "feats.scp"), **kind)
    (tmp_path / "utt2num_frames").write_text("".join(f"{u} {len(m)}\n" for u, m in mats.items()))
    LoadDeltas(order=2, window=2, first=2, last=6).write(tmp_path)
    (tmp_path / "feat_dim").write_text("14\n")
    reader = FeatureReader(tmp_path, {u: u for u in mats})
    for utt, mat in mats.items():
        whole = reader(utt)
        for start in (0, 1, 3, len(mat) // 2, len(mat) - 8):
            assert torch.equal(reader.rows(utt, start, start + 8), whole[start : start + 8]), (utt, start)


def test_a_batch_of_samples_equals_their_rows_read_alone(tmp_path):
    """FeatureReader.samples decodes compressed matrices together, others one by one: either
    way each sample is its utterance's rows, at the ends too (the deltas' edge padding)."""
    rng = np.random.default_rng(1)
    mats = {f"u{i}": speech_like(rng, int(rng.integers(20, 60)), 6) for i in range(4)}
    compressed = {u: m for u, m in mats.items() if u != "u2"}
    kaldiio.save_ark(str(tmp_path / "a.ark"), compressed, scp=str(tmp_path / "a.scp"), compression_method=1)
    kaldiio.save_ark(str(tmp_path / "b.ark"), {"u2": mats["u2"]}, scp=str(tmp_path / "b.scp"))  # float: read alone
    (tmp_path / "feats.scp").write_text(
        "".join(
            sorted(
                (tmp_path / "a.scp").read_text().splitlines(True) + (tmp_path / "b.scp").read_text().splitlines(True)
            )
        )
    )
    (tmp_path / "utt2num_frames").write_text("".join(f"{u} {len(m)}\n" for u, m in mats.items()))
    LoadDeltas(order=2, window=2, first=2, last=6).write(tmp_path)
    (tmp_path / "feat_dim").write_text("14\n")
    reader = FeatureReader(tmp_path, {u: "spk" for u in mats})
    picks = [(u, start) for u, m in mats.items() for start in (0, 2, len(m) // 2, len(m) - 8)]
    batch = reader.samples([u for u, _ in picks], [s for _, s in picks], 8)
    assert batch.shape == (len(picks), 8, 14)
    for (utt, start), sample in zip(picks, batch):
        assert torch.equal(sample, reader(utt)[start : start + 8]), (utt, start)


def test_a_pickled_reader_maps_its_arks_anew(tmp_path):
    """DataLoader workers started by pickling get the reader without the parent's ark maps
    (pickled, a map would copy the whole ark), and read the same rows."""
    import pickle

    mats = {"u0": speech_like(np.random.default_rng(2), 40, 6)}
    kaldiio.save_ark(str(tmp_path / "feats.ark"), mats, scp=str(tmp_path / "feats.scp"), compression_method=1)
    (tmp_path / "utt2num_frames").write_text("u0 40\n")
    (tmp_path / "feat_dim").write_text("6\n")
    reader = FeatureReader(tmp_path, {"u0": "u0"})
    rows = reader.samples(["u0"], [5], 8)
    copy = pickle.loads(pickle.dumps(reader))
    assert reader._rows_reader.maps and copy._rows_reader.maps == {}
    assert torch.equal(copy.samples(["u0"], [5], 8), rows)


def test_samples_of_a_missing_ark_name_the_utterance(tmp_path):
    mats = {"u0": speech_like(np.random.default_rng(3), 30, 6)}
    kaldiio.save_ark(str(tmp_path / "feats.ark"), mats, scp=str(tmp_path / "feats.scp"), compression_method=1)
    (tmp_path / "utt2num_frames").write_text("u0 30\n")
    (tmp_path / "feat_dim").write_text("6\n")
    reader = FeatureReader(tmp_path, {"u0": "u0"})
    (tmp_path / "feats.ark").unlink()
    with pytest.raises(InputError, match="cannot read features of 'u0'"):
        reader.samples(["u0"], [3], 8)
