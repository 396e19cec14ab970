"""The feature recipes on a small SPHERE data dir: log-mel with deltas, fMLLR (+ log-mel with
deltas), the Kaldi files they leave, and reading them back as Kaldi features (kind=kaldi)."""

import contextlib
import json
import shutil

import kaldiio
import numpy as np
import pytest
import torch

from asr.config import load_config
from asr.features.deltas import add_deltas
from asr.features.logmel.extract import extract_set
from asr.features.logmel.options import FbankOptions
from asr.features.featureset import FeatureReader
from asr.features.fmllr.transform import transform_frames
from asr.features.gmm import DiagGmm
from asr.data.datadir import read_data_dir
from asr.features.fmllr.model import FmllrModel, SatFrames, SpeakerFrames, train_fmllr_model
from asr.features.fmllr.recipe import adapt_set, ensure_model
from asr.kaldi.matrix import read_transforms
from asr.features.recipes import feature_dim, make_features
from asr.features.subset import streamed_subset
from asr.utils.errors import InputError
from asr.utils.threads import torch_threads
from tests.features.conftest import SETS

# Small enough for 12 utterances of ~0.9 s (about 180 frames per speaker).
SMALL_FMLLR = [
    "features.fmllr.num_components=4",
    "features.fmllr.min_count=100",
    "features.fmllr.mllt_iters=2",
    "features.fmllr.em_iters=2",
    "features.fmllr.fmllr_passes=4",
    "features.jobs=1",
]


def config(tmp_path, recipe: str, *extra: str):
    return load_config(
        [
            f"features={recipe}",
            f"data.data_dir={tmp_path / 'data'}",
            "data.train_set=train",
            "data.dev_set=dev",
            "data.eval_set=eval",
            f"features.feats_dir={tmp_path / 'feats'}",
            f"exp_dir={tmp_path / 'exp'}",
            *extra,
        ]
    )


def test_recipe_dimensions():
    dims = {
        name: feature_dim(load_config([f"features={name}"]).features)
        for name in ("logmel80", "logmel40", "logmel40_deltas", "fmllr40", "fmllr40_logmel40_deltas")
    }
    assert dims == {
        "logmel80": 80,
        "logmel40": 40,
        "logmel40_deltas": 120,
        "fmllr40": 40,
        "fmllr40_logmel40_deltas": 160,
    }


def test_logmel_with_deltas(tmp_path, corpus):
    options = FbankOptions(sample_frequency=8000, num_mel_bins=40)
    plain = extract_set(corpus / "data" / "train", tmp_path / "plain", options, jobs=1)
    with_deltas = extract_set(corpus / "data" / "train", tmp_path / "deltas", options, jobs=1, deltas=(2, 2))
    assert (tmp_path / "deltas" / "feat_dim").read_text() == "120\n"
    assert (tmp_path / "deltas" / "delta_opts").read_text() == "--delta-order=2 --delta-window=2\n"
    assert (tmp_path / "deltas" / "delta_columns").read_text() == "0 40\n"
    assert not (tmp_path / "plain" / "delta_opts").exists()
    # Stored as the plain filterbank; the reader appends the deltas, then normalises all 120 dims.
    a, b = (kaldiio.load_scp(str(tmp_path / d / "feats.scp")) for d in ("plain", "deltas"))
    utt2spk = read_data_dir(corpus / "data" / "train").utt2spk
    reader = FeatureReader(tmp_path / "deltas", utt2spk)
    for utt in a:
        np.testing.assert_array_equal(b[utt], a[utt])
        expected = add_deltas(a[utt], 2, 2)
        expected = (expected - expected.mean(axis=0)) / expected.std(axis=0)
        np.testing.assert_allclose(reader(utt).numpy(), expected, rtol=1e-3, atol=1e-3)  # E[x^2]-E[x]^2 in the stats
    assert with_deltas.frames == plain.frames
    # The delta options are part of what makes a set complete: asking for none recomputes it.
    again = extract_set(corpus / "data" / "train", tmp_path / "deltas", options, jobs=1)
    assert not again.skipped and (tmp_path / "deltas" / "feat_dim").read_text() == "40\n"
    assert extract_set(corpus / "data" / "train", tmp_path / "plain", options, jobs=1).skipped


@pytest.fixture(scope="module", autouse=True)
def one_torch_thread():
    """These sets are tiny: a second torch thread only adds synchronisation (and spins when
    the test machine is busy)."""
    with torch_threads(1):
        yield


@pytest.fixture(scope="module")
def fmllr_run(tmp_path_factory, corpus):
    """features=fmllr40_logmel40_deltas over train/dev/eval."""
    root = tmp_path_factory.mktemp("fmllr")
    (root / "data").symlink_to(corpus / "data")
    cfg = config(root, "fmllr40_logmel40_deltas", *SMALL_FMLLR)
    return root, cfg, make_features(cfg)


def test_fmllr_logmel_composition(fmllr_run):
    root, cfg, summaries = fmllr_run
    out = root / "feats" / "fmllr40_logmel40_deltas"
    assert [s.utterances for s in summaries] == [12, 12, 12]
    model = FmllrModel.load(out / "gmm")
    assert model.matrix.shape == (40, 280) and model.gmm.num_components == 4
    sat = json.loads((out / "gmm" / "report.json").read_text())["sat"][0]
    assert sat["speakers_adapted"] == sat["speakers"] == 6  # whole speakers: each has enough frames
    base = kaldiio.load_scp(str(out / "fbank" / "eval" / "feats.scp"))
    base_cmvn = kaldiio.load_scp(str(out / "fbank" / "eval" / "cmvn.scp"))
    for set_name in SETS:
        set_dir = out / set_name
        assert (set_dir / "feat_dim").read_text() == "160\n" and (set_dir / "cmvn_type").read_text() == "speaker\n"
        transforms = read_transforms(set_dir / "trans.scp")
        assert len(transforms) == 6 and all(t.shape == (40, 41) for t in transforms.values())
        speakers = (set_dir / "fmllr_speakers").read_text().splitlines()
        assert len(speakers) == 6 and all(" adapted " in line for line in speakers)  # test-time adaptation too
    feats = kaldiio.load_scp(str(out / "eval" / "feats.scp"))
    transforms = read_transforms(out / "eval" / "trans.scp")
    for utt, mat in feats.items():
        speaker = utt.split("_")[0]
        raw = base[utt]
        # Stored [fMLLR | log-mel], compressed (at least 64 levels per column's range); the
        # reader appends the log-mel's deltas.
        assert mat.shape == (raw.shape[0], 80) and mat.dtype == np.float32
        np.testing.assert_allclose(mat[:, 40:], raw, rtol=0, atol=np.ptp(raw) / 64)
        normalised = raw - base_cmvn[speaker][0, :-1] / base_cmvn[speaker][0, -1]
        expected = transform_frames(torch.from_numpy(model.project(normalised)), transforms[speaker]).numpy()
        np.testing.assert_allclose(mat[:, :40], expected, rtol=0, atol=np.ptp(expected) / 64)
    assert (out / "eval" / "delta_columns").read_text() == "40 80\n" and (
        out / "eval" / "compress"
    ).read_text() == "true\n"
    reader = FeatureReader(out / "eval", {utt: utt.split("_")[0] for utt in feats})
    assert all(reader(utt).shape == (mat.shape[0], 160) for utt, mat in feats.items())


def test_fmllr_rerun_skips_and_reuses_the_model(fmllr_run, caplog):
    root, _, _ = fmllr_run
    out = root / "feats" / "fmllr40_logmel40_deltas"
    made = (out / "gmm" / "final.dubm").stat().st_mtime_ns
    with caplog.at_level("INFO", logger="asr.features"):
        assert all(s.skipped for s in make_features(config(root, "fmllr40_logmel40_deltas", *SMALL_FMLLR)))
    assert "fMLLR model: complete already" in caplog.text
    # A different composition of the same model: the sets are redone, the model is not.
    fmllr_only = config(
        root, "fmllr40_logmel40_deltas", *SMALL_FMLLR, "features.kind=fmllr", "features.name=fmllr40_logmel40_deltas"
    )
    summaries = make_features(fmllr_only)
    assert not any(s.skipped for s in summaries) and (out / "gmm" / "final.dubm").stat().st_mtime_ns == made
    assert (out / "eval" / "feat_dim").read_text() == "40\n"
    assert next(iter(kaldiio.load_scp(str(out / "eval" / "feats.scp")).values())).shape[1] == 40


def test_an_adapted_set_is_made_again_when_its_record_options_or_model_change(fmllr_run, tmp_path):
    """A set's stage record names its options and, as inputs, the log-mel set's records and the
    model's record: a set with no record (interrupted), other options or a model trained again
    is made again; otherwise it is skipped."""
    root, cfg, _ = fmllr_run
    out, data, model, made = (
        root / "feats" / "fmllr40_logmel40_deltas",
        root / "data",
        tmp_path / "gmm",
        tmp_path / "eval",
    )

    def skipped(fcfg=cfg.features) -> bool:
        return adapt_set(model, out / "fbank" / "eval", data / "eval", made, fcfg).skipped

    ensure_model(model, out / "fbank" / "train", data / "train", cfg.features)
    assert not skipped() and skipped()
    (made / "features.record.json").unlink()  # killed after its files, before its record
    assert not skipped() and skipped()
    other = cfg.features.copy()
    other.compress = not other.compress
    assert not skipped(other) and skipped(other)
    ensure_model(model, out / "fbank" / "dev", data / "dev", cfg.features)  # the model's inputs changed
    assert not skipped(other) and skipped(other)


def test_fmllr_without_lda_adapts_the_log_mel_frames(corpus, tmp_path):
    """features.fmllr.lda=false: the GMM and fMLLR work on the per-speaker CMN'd log-mel."""
    (tmp_path / "data").symlink_to(corpus / "data")
    cfg = config(
        tmp_path,
        "fmllr40",
        *SMALL_FMLLR,
        "features.fmllr.lda=false",
        "features.num_mel_bins=23",
        "features.fmllr.sat_iters=0",
        "features.fmllr.fmllr_iters=2",
    )
    make_features(cfg)
    out = tmp_path / "feats" / "fmllr40"
    assert not (out / "gmm" / "final.mat").exists() and FmllrModel.load(out / "gmm").dim == 23
    assert (out / "eval" / "feat_dim").read_text() == "23\n"
    transforms = read_transforms(out / "eval" / "trans.scp")
    assert all(t.shape == (23, 24) for t in transforms.values())
    assert any(not np.allclose(t, np.hstack([np.eye(23), np.zeros((23, 1))])) for t in transforms.values())


def test_kaldi_files_reproduce_the_fmllr_features(fmllr_run, tmp_path):
    """Our fbank feats.scp + cmvn.scp, final.mat, splice_opts, cmvn_opts and trans.scp read as
    a Kaldi system's files (features.kind=kaldi) give the same fMLLR features."""
    root, _, _ = fmllr_run
    out = root / "feats" / "fmllr40_logmel40_deltas"
    kaldi = tmp_path / "kaldi"
    for name in ("final.mat", "splice_opts", "cmvn_opts"):
        (kaldi / name).parent.mkdir(exist_ok=True)
        shutil.copy(out / "gmm" / name, kaldi / name)
    for set_name in SETS:
        (kaldi / set_name).mkdir()
        for name in ("feats.scp", "cmvn.scp"):
            shutil.copy(out / "fbank" / set_name / name, kaldi / set_name / name)
        shutil.copy(out / set_name / "trans.scp", kaldi / set_name / "trans.scp")
    cfg = config(root, "logmel40", "features.kind=kaldi", f"features.kaldi_dir={kaldi}", "features.name=from_kaldi")
    make_features(cfg)
    imported = kaldiio.load_scp(str(root / "feats" / "from_kaldi" / "eval" / "feats.scp"))
    ours = kaldiio.load_scp(str(out / "eval" / "feats.scp"))
    assert (
        sorted(imported) == sorted(ours) and (root / "feats" / "from_kaldi" / "eval" / "feat_dim").read_text() == "40\n"
    )
    for utt in ours:
        ours_fmllr = ours[utt][:, :40]  # ours stored compressed: at least 64 levels per column's range
        np.testing.assert_allclose(imported[utt], ours_fmllr, rtol=0, atol=np.ptp(ours_fmllr) / 64)


def test_kaldi_feats_and_cmvn_used_as_they_are(corpus, tmp_path):
    """A Kaldi data dir's feats.scp and per-speaker cmvn.scp are referenced, not copied."""
    logmel = extract_set(
        corpus / "data" / "train",
        tmp_path / "made_by_kaldi" / "train",
        FbankOptions(sample_frequency=8000, num_mel_bins=23),
        cmvn_unit="speaker",
        jobs=1,
    )
    for set_name in ("dev", "eval"):
        shutil.copytree(tmp_path / "made_by_kaldi" / "train", tmp_path / "made_by_kaldi" / set_name)
    (tmp_path / "data").symlink_to(corpus / "data")
    cfg = config(
        tmp_path,
        "logmel40",
        "features.kind=kaldi",
        f"features.kaldi_dir={tmp_path / 'made_by_kaldi'}",
        "features.name=kaldi23",
    )
    make_features(cfg)
    out = tmp_path / "feats" / "kaldi23" / "train"
    assert (out / "feats.scp").read_text() == (tmp_path / "made_by_kaldi" / "train" / "feats.scp").read_text()
    assert (out / "cmvn_type").read_text() == "speaker\n" and (out / "feat_dim").read_text() == "23\n"
    frames = dict(line.split() for line in (out / "utt2num_frames").read_text().splitlines())
    assert sum(int(n) for n in frames.values()) == logmel.frames


@pytest.mark.slow
def test_parallel_adaptation_gives_the_same_features(fmllr_run, tmp_path):
    """Speakers split over two worker processes: the same features and transforms as one."""
    root, cfg, _ = fmllr_run
    out = root / "feats" / "fmllr40_logmel40_deltas"
    for jobs in (1, 2):
        fcfg = cfg.features.copy()
        fcfg.jobs = jobs
        summary = adapt_set(out / "gmm", out / "fbank" / "eval", root / "data" / "eval", tmp_path / f"jobs{jobs}", fcfg)
        assert summary.utterances == 12
    one = kaldiio.load_scp(str(tmp_path / "jobs1" / "feats.scp"))
    two = kaldiio.load_scp(str(tmp_path / "jobs2" / "feats.scp"))
    assert list(one) == list(two)  # one sorted scp over the joined ark
    for utt in one:
        assert two[utt].shape == (one[utt].shape[0], 80)  # stored: [fMLLR | log-mel]
        np.testing.assert_allclose(two[utt], one[utt], rtol=1e-5, atol=1e-5)
    a, b = (read_transforms(tmp_path / d / "trans.scp") for d in ("jobs1", "jobs2"))
    assert sorted(a) == sorted(b) and all(np.allclose(a[s], b[s], atol=1e-5) for s in a)
    assert (tmp_path / "jobs2" / "cmvn.ark").read_bytes() == (tmp_path / "jobs1" / "cmvn.ark").read_bytes()


@pytest.mark.slow
def test_sat_split_over_two_jobs_trains_the_same_model(fmllr_run, tmp_path):
    """The SAT speakers' fMLLR estimates in two worker processes: the same GMM as in one."""
    root, cfg, _ = fmllr_run
    base = root / "feats" / "fmllr40_logmel40_deltas" / "fbank" / "train"
    fmllr = cfg.features.fmllr
    subset = streamed_subset(
        root / "data" / "train" / "utt2spk", base / "utt2num_frames", fmllr.max_train_frames, fmllr.min_count
    )
    models = [
        train_fmllr_model(SpeakerFrames(base, subset.speaker_of, False), subset, fmllr, jobs=jobs)[0] for jobs in (1, 2)
    ]
    for name in ("weights", "means", "variances"):
        np.testing.assert_allclose(
            getattr(models[1].gmm, name).numpy(), getattr(models[0].gmm, name).numpy(), rtol=1e-9, atol=1e-9
        )


def test_sat_frames_are_each_speakers_projected_frames_end_to_end(tmp_path):
    """What SAT's workers map: each speaker's utterances projected, in order, at its rows."""
    rng = np.random.default_rng(5)
    gmm = DiagGmm(torch.ones(2) / 2, torch.zeros(2, 3, dtype=torch.float64), torch.ones(2, 3, dtype=torch.float64))
    model = FmllrModel(1, 1, rng.normal(size=(3, 12)), gmm)
    normalised = {
        utt: rng.normal(size=(n, 4)).astype(np.float32) for utt, n in (("a1", 5), ("a2", 0), ("a3", 7), ("b1", 4))
    }
    by_speaker = {"a": ["a1", "a2", "a3"], "b": ["b1"]}
    frames = SatFrames.write(tmp_path / "projected.npy", model, by_speaker, normalised)
    assert frames.rows == {"a": (0, 12), "b": (12, 16)} and frames.total == 16 and frames.sizes() == {"a": 12, "b": 4}
    for spk, utts in by_speaker.items():
        np.testing.assert_array_equal(frames.of(spk), np.concatenate([model.project(normalised[u]) for u in utts]))
    only_b = frames.subset(["b"])
    assert only_b.rows == {"b": (12, 16)}
    np.testing.assert_array_equal(only_b.of("b"), frames.of("b"))


def flip_a_byte(path) -> None:
    """Damage `path` without changing its size (a swapped or bit-rotten file)."""
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))


def assert_refused(path, what: str, read, detail: str = r"\(\d+ bytes") -> None:
    """`read()` raises the record's one line for `path` (the features stage to re-run)."""
    rerun = r"; re-run the features stage \(python -m asr.features\)$"
    with pytest.raises(InputError, match=rf"^{path}: damaged, truncated or replaced {what} {detail}.*{rerun}"):
        read()


def test_a_damaged_fmllr_model_or_transform_is_refused_in_one_line(fmllr_run, tmp_path):
    """Issue 31, item 3: the model's LDA+MLLT matrix and a set's per-speaker transforms are
    verified against the features stage's record before use (the module's run, copied)."""
    root, _, _ = fmllr_run
    out = root / "feats" / "fmllr40_logmel40_deltas"
    model = shutil.copytree(out / "gmm", tmp_path / "gmm")
    FmllrModel.load(model)
    flip_a_byte(model / "final.mat")
    assert_refused(model / "final.mat", "fMLLR model file", lambda: FmllrModel.load(model), r"\(sha1")
    with damaged(out / "eval" / "trans.ark", lambda data: data[:-40]) as ark:
        assert_refused(ark, "fMLLR transforms", lambda: read_transforms(out / "eval" / "trans.scp"))
    assert read_transforms(out / "eval" / "trans.scp")


@contextlib.contextmanager
def damaged(path, change):
    """`path` changed in place for the with-block, then restored (a module fixture's file)."""
    data = path.read_bytes()
    path.write_bytes(change(data))
    try:
        yield path
    finally:
        path.write_bytes(data)
