"""The i-vector feature recipes on a small SPHERE corpus: the files they leave, the per-frame
composition with fMLLR and log-mel, Kaldi i-vector dirs used as they are, and the errors."""

import shutil

import kaldiio
import numpy as np
import pytest
import torch

from asr.features import cmvn
from asr.features import pool as pool_module
from asr.features.deltas import add_deltas
from asr.features.featureset import FeatureReader
from asr.features.fmllr.transform import transform_frames
from asr.features.fmllr.model import FmllrModel
from asr.kaldi.matrix import read_transforms
from asr.features.recipes import feature_dim, make_features
from asr.kaldi.table import read_table
from asr.utils.errors import InputError
from asr.utils.pool import spawn_pool
from tests.features.conftest import SETS
from tests.features.test_recipes import SMALL_FMLLR, config, one_torch_thread  # noqa: F401 (autouse fixture)

# 6 speakers x 2 utterances of ~90 frames per set: a tiny extractor.
SMALL_IVECTOR = [
    "features.ivector.num_components=4",
    "features.ivector.dim=5",
    "features.ivector.pca_dim=10",
    "features.ivector.min_count=1",
    "features.ivector.em_iters=3",
    "features.fmllr.fmllr_iters=3",
    "features.jobs=1",
]


def test_recipe_dimensions():
    from asr.config import load_config

    dims = {
        name: feature_dim(load_config([f"features={name}"]).features)
        for name in ("ivector100", "fmllr40_ivector100_logmel40_deltas", "sat40_ivector100_logmel40_deltas")
    }
    assert dims == {
        "ivector100": 100,
        "fmllr40_ivector100_logmel40_deltas": 260,
        "sat40_ivector100_logmel40_deltas": 260,
    }


@pytest.fixture(scope="module")
def ivector_run(tmp_path_factory, corpus):
    root = tmp_path_factory.mktemp("ivector")
    (root / "data").symlink_to(corpus / "data")
    cfg = config(root, "ivector100", *SMALL_IVECTOR)
    return root, cfg, make_features(cfg)


def test_ivector_recipe_writes_kaldi_ivectors_and_per_frame_features(ivector_run):
    root, _, summaries = ivector_run
    out = root / "feats" / "ivector100"
    assert [s.utterances for s in summaries] == [12, 12, 12]
    for name in (
        "final.mat",
        "splice_opts",
        "final.dubm",
        "final.ubm",
        "final.ie",
        "ivector_extractor.conf",
        "report.json",
    ):
        assert (out / "extractor" / name).is_file()
    for set_name in SETS:
        set_dir = out / set_name
        assert (set_dir / "feat_dim").read_text() == "5\n" and (set_dir / "cmvn_type").read_text() == "none\n"
        assert (set_dir / "ivector_period").read_text() == "10\n"
        rows = kaldiio.load_scp(str(set_dir / "ivector_online.scp"))
        feats = kaldiio.load_scp(str(set_dir / "feats.scp"))
        frames = {u: int(n) for u, n in read_table(set_dir / "utt2num_frames").items()}
        for utt, mat in feats.items():
            assert mat.shape == (frames[utt], 5) and rows[utt].shape == (-(-frames[utt] // 10), 5)
            expected = rows[utt][np.arange(frames[utt]) // 10]
            # stored compressed (features.compress): at least 64 levels per column's range
            np.testing.assert_allclose(mat, expected, rtol=0, atol=np.ptp(expected) / 64)
    # Training set: one i-vector per speaker, the same for every frame of its utterances.
    train = out / "train"
    per_speaker = kaldiio.load_scp(str(train / "ivectors_spk.scp"))
    assert len(per_speaker) == 6 and all(v.shape == (5,) for v in per_speaker.values())
    for utt, mat in kaldiio.load_scp(str(train / "feats.scp")).items():
        expected = np.tile(per_speaker[utt.split("_")[0]], (mat.shape[0], 1))
        np.testing.assert_allclose(mat, expected, rtol=0, atol=np.ptp(expected) / 64)
    # Dev and eval: online, so the rows of an utterance differ, and no per-speaker file.
    assert not (out / "eval" / "ivectors_spk.scp").exists()
    online = next(iter(kaldiio.load_scp(str(out / "eval" / "ivector_online.scp")).values()))
    assert not np.allclose(online[0], online[-1])


def test_ivector_rerun_skips_everything(ivector_run, caplog):
    root, _, _ = ivector_run
    with caplog.at_level("INFO", logger="asr.features"):
        assert all(s.skipped for s in make_features(config(root, "ivector100", *SMALL_IVECTOR)))
    assert "i-vector extractor: complete already" in caplog.text


def test_kaldi_ivector_dirs_are_used_as_they_are(ivector_run, tmp_path):
    """Kaldi's layout: exp/nnet3/ivectors_<set>/ivector_online.scp + ivector_period (referenced,
    not copied), or steps/nnet/ivector's ivectors_spk.scp (repeated per utterance)."""
    root, _, _ = ivector_run
    ours = root / "feats" / "ivector100"
    kaldi = tmp_path / "kaldi"
    for set_name in SETS:
        (kaldi / f"ivectors_{set_name}").mkdir(parents=True)
        for name in ("ivector_online.scp", "ivector_period"):
            shutil.copy(ours / set_name / name, kaldi / f"ivectors_{set_name}" / name)
    make_features(
        config(root, "ivector100", *SMALL_IVECTOR, f"features.ivector.kaldi_dir={kaldi}", "features.name=from_kaldi")
    )
    imported = root / "feats" / "from_kaldi"
    for set_name in SETS:
        assert (imported / set_name / "ivector_online.scp").read_text() == (
            ours / set_name / "ivector_online.scp"
        ).read_text()
        a, b = (kaldiio.load_scp(str(d / set_name / "feats.scp")) for d in (ours, imported))
        assert sorted(a) == sorted(b) and all(np.array_equal(a[u], b[u]) for u in a)
    assert not (imported / "extractor").exists()
    # Per-speaker vectors only (the hybrid recipes' extract_ivectors.sh output).
    for set_name in SETS:
        shutil.rmtree(kaldi / f"ivectors_{set_name}")
        (kaldi / set_name).mkdir()
        shutil.copy(ours / "train" / "ivectors_spk.scp", kaldi / set_name / "ivectors_spk.scp")
    make_features(
        config(root, "ivector100", *SMALL_IVECTOR, f"features.ivector.kaldi_dir={kaldi}", "features.name=spk_kaldi")
    )
    for utt, mat in kaldiio.load_scp(str(root / "feats" / "spk_kaldi" / "train" / "feats.scp")).items():
        np.testing.assert_array_equal(mat, kaldiio.load_scp(str(ours / "train" / "feats.scp"))[utt])
    with pytest.raises(InputError, match="features.ivector.dim=7"):
        make_features(
            config(
                root,
                "ivector100",
                *SMALL_IVECTOR,
                f"features.ivector.kaldi_dir={kaldi}",
                "features.name=wrong_dim",
                "features.ivector.dim=7",
            )
        )


@pytest.fixture(scope="module")
def full_input_run(tmp_path_factory, corpus):
    root = tmp_path_factory.mktemp("full_input")
    (root / "data").symlink_to(corpus / "data")
    cfg = config(root, "fmllr40_ivector100_logmel40_deltas", *SMALL_FMLLR, *SMALL_IVECTOR, "features.compress=false")
    return root, cfg, make_features(cfg)


def test_full_input_is_normalised_fmllr_ivector_and_logmel_deltas(full_input_run):
    """Per frame, as the reader returns it: [fMLLR | i-vector | log-mel + deltas], fMLLR and
    log-mel normalised per speaker (mean and variance), the i-vector as it is. The set stores
    [fMLLR | i-vector | log-mel]; the reader appends the deltas."""
    root, cfg, summaries = full_input_run
    out = root / "feats" / "fmllr40_ivector100_logmel40_deltas"
    assert [s.utterances for s in summaries] == [12, 12, 12]
    model = FmllrModel.load(out / "gmm")
    for set_name in ("train", "eval"):
        set_dir = out / set_name
        assert (set_dir / "feat_dim").read_text() == "165\n" and (set_dir / "cmvn_type").read_text() == "speaker\n"
        assert (set_dir / "delta_columns").read_text() == "45 85\n"
        stored = kaldiio.load_scp(str(set_dir / "feats.scp"))
        reader = FeatureReader(set_dir, {utt: utt.split("_")[0] for utt in stored})
        feats = {utt: reader(utt).numpy() for utt in stored}
        base = kaldiio.load_scp(str(out / "fbank" / set_name / "feats.scp"))
        base_cmvn = kaldiio.load_scp(str(out / "fbank" / set_name / "cmvn.scp"))
        transforms = read_transforms(set_dir / "trans.scp")
        ivectors = kaldiio.load_scp(str(out / "ivector" / set_name / "ivector_online.scp"))
        by_speaker = {}
        for utt in feats:
            by_speaker.setdefault(utt.split("_")[0], []).append(utt)
        for speaker, utts in by_speaker.items():
            acoustic = {}
            for utt in utts:
                raw = base[utt]
                normalised = raw - base_cmvn[speaker][0, :-1] / base_cmvn[speaker][0, -1]
                fmllr = transform_frames(torch.from_numpy(model.project(normalised)), transforms[speaker]).numpy()
                acoustic[utt] = np.concatenate([fmllr, add_deltas(raw, 2, 2)], axis=1).astype(np.float32)
            stats = cmvn.accumulate(acoustic.values())
            for utt in utts:
                expected = cmvn.apply(acoustic[utt], stats, norm_vars=True)
                mat = feats[utt]
                assert mat.shape == (expected.shape[0], 165) and mat.dtype == np.float32
                np.testing.assert_allclose(mat[:, :40], expected[:, :40], rtol=1e-3, atol=1e-3)
                np.testing.assert_allclose(mat[:, 45:], expected[:, 40:], rtol=1e-4, atol=1e-4)
                np.testing.assert_array_equal(mat[:, 40:45], ivectors[utt][np.arange(mat.shape[0]) // 10])
    # Every speaker of the training set is normalised: mean 0 and variance 1 in the acoustic dims.
    train = kaldiio.load_scp(str(out / "train" / "feats.scp"))
    reader = FeatureReader(out / "train", {utt: utt.split("_")[0] for utt in train})
    frames = np.concatenate([reader(u).numpy() for u in train if u.startswith("sw02001-A")])
    np.testing.assert_allclose(np.delete(frames, range(40, 45), axis=1).mean(axis=0), 0.0, atol=1e-4)
    np.testing.assert_allclose(np.delete(frames, range(40, 45), axis=1).std(axis=0), 1.0, atol=1e-3)


def fake_sat_system(system, fbank_root, dims=40, short_utt=None):
    """A SAT system's adapted sets as asr.gmm.fmllr_feats writes them (feats, trans.ark), with as
    many frames per utterance as the log-mel of `fbank_root` (one fewer for `short_utt`)."""
    rng = np.random.default_rng(0)
    feats = {}
    for set_name in SETS:
        frames = read_table(fbank_root / set_name / "utt2num_frames")
        set_dir = system / "fmllr_feats" / set_name
        set_dir.mkdir(parents=True, exist_ok=True)
        feats[set_name] = {
            utt: (3.0 + rng.standard_normal((int(n) - (utt == short_utt), dims))).astype(np.float32)
            for utt, n in frames.items()
        }
        kaldiio.save_ark(str(set_dir / "feats.ark"), feats[set_name], scp=str(set_dir / "feats.scp"))
        speakers = sorted({utt.split("_")[0] for utt in frames})
        kaldiio.save_ark(str(set_dir / "trans.ark"), {s: np.eye(dims, dims + 1, dtype=np.float32) for s in speakers})
    return feats


def test_the_sat_systems_features_go_into_the_full_input(full_input_run, tmp_path):
    """features.fmllr.system: the fMLLR columns are a GMM system's speaker-adapted features (as
    python -m asr.gmm.fmllr_feats writes them) pasted with the i-vector and the log-mel; no UBM
    is trained, the reader normalises them per speaker, and a frame count that differs from the
    log-mel's is refused naming the table."""
    root, _, _ = full_input_run
    (tmp_path / "data").symlink_to(root / "data")
    ubm_input = root / "feats" / "fmllr40_ivector100_logmel40_deltas"
    system = tmp_path / "exp" / "tri4"
    sat = fake_sat_system(system, ubm_input / "fbank")
    options = (*SMALL_IVECTOR, "features.compress=false", f"features.fmllr.system={system}")
    summaries = make_features(config(tmp_path, "sat40_ivector100_logmel40_deltas", *options))
    assert [s.utterances for s in summaries] == [12, 12, 12]
    out = tmp_path / "feats" / "sat40_ivector100_logmel40_deltas"
    assert not (out / "gmm").exists()  # no UBM front end
    for set_name in SETS:
        set_dir = out / set_name
        assert (set_dir / "feat_dim").read_text() == "165\n" and (set_dir / "delta_columns").read_text() == "45 85\n"
        stored = kaldiio.load_scp(str(set_dir / "feats.scp"))
        ubm_stored = kaldiio.load_scp(str(ubm_input / set_name / "feats.scp"))
        for utt, mat in stored.items():
            np.testing.assert_array_equal(mat[:, :40], sat[set_name][utt])
            np.testing.assert_array_equal(mat[:, 45:], ubm_stored[utt][:, 45:])  # the same log-mel
        speakers = (set_dir / "fmllr_speakers").read_text().splitlines()
        assert len(speakers) == 6 and all(line.endswith(" system") for line in speakers)
    reader = FeatureReader(out / "eval", {utt: utt.split("_")[0] for utt in stored})
    frames = np.concatenate([reader(u).numpy() for u in stored if u.startswith(next(iter(stored)).split("_")[0])])
    np.testing.assert_allclose(frames[:, :40].mean(axis=0), 0.0, atol=1e-4)  # per speaker, as the UBM's
    np.testing.assert_allclose(frames[:, :40].std(axis=0), 1.0, atol=1e-3)
    assert all(s.skipped for s in make_features(config(tmp_path, "sat40_ivector100_logmel40_deltas", *options)))

    short = next(iter(sat["train"]))
    fake_sat_system(system, ubm_input / "fbank", short_utt=short)
    with pytest.raises(InputError, match=rf"{system / 'fmllr_feats' / 'train' / 'feats.scp'}: {short} has \d+ frames"):
        make_features(config(tmp_path, "sat40_ivector100_logmel40_deltas", *options))
    with pytest.raises(
        InputError, match=r"nowhere/fmllr_feats/train: no speaker-adapted features .*asr.gmm.fmllr_feats"
    ):
        make_features(
            config(tmp_path, "sat40_ivector100_logmel40_deltas", *SMALL_IVECTOR, "features.fmllr.system=nowhere")
        )
    fake_sat_system(tmp_path / "wide", ubm_input / "fbank", dims=30)
    with pytest.raises(InputError, match="30-dim features, features.fmllr.dim=40; set features.fmllr.dim=30"):
        make_features(config(tmp_path, "sat40_ivector100_logmel40_deltas", *SMALL_IVECTOR,
                             f"features.fmllr.system={tmp_path / 'wide'}"))  # fmt: skip


def test_option_errors_name_the_option(corpus, tmp_path):
    (tmp_path / "data").symlink_to(corpus / "data")
    with pytest.raises(InputError, match=r"features.ivector.test='offline'"):
        make_features(config(tmp_path, "ivector100", *SMALL_IVECTOR, "features.ivector.test=offline"))
    with pytest.raises(InputError, match="features.ivector.pca_dim=500"):
        make_features(config(tmp_path, "ivector100", *SMALL_IVECTOR, "features.ivector.pca_dim=500"))


@pytest.mark.slow
def test_parallel_jobs_give_the_same_extractor_and_ivectors(ivector_run, tmp_path, monkeypatch):
    """Statistics and extraction split over two worker processes: the same model and i-vectors.
    Every split step (the base features' sets, the statistics, each set's i-vectors) runs on
    one pool: its workers import torch once."""
    root, _, _ = ivector_run
    (tmp_path / "data").symlink_to(root / "data")
    pools = []

    def counted_pool(workers, **kwargs):
        pools.append(workers)
        return spawn_pool(workers, **kwargs)

    monkeypatch.setattr(pool_module, "spawn_pool", counted_pool)
    make_features(config(tmp_path, "ivector100", *SMALL_IVECTOR, "features.jobs=2"))
    assert pools == [2]
    one, two = root / "feats" / "ivector100", tmp_path / "feats" / "ivector100"
    assert (two / "extractor" / "final.ie").read_bytes() == (one / "extractor" / "final.ie").read_bytes()
    for set_name in SETS:
        a, b = (kaldiio.load_scp(str(d / set_name / "ivector_online.scp")) for d in (one, two))
        assert list(a) == list(b) and all(np.allclose(a[u], b[u], rtol=1e-6, atol=1e-6) for u in a)


def test_a_damaged_extractor_or_ivector_archive_is_refused_in_one_line(ivector_run, tmp_path):
    """Issue 31, item 3: the extractor's files and a set's i-vectors are verified against the
    features stage's record before use (the module's run, copied)."""
    from asr.features.ivector.model import IvectorModel
    from asr.features.ivector.recipe import IvectorReader
    from tests.features.test_recipes import assert_refused, damaged, flip_a_byte

    root, _, _ = ivector_run
    out = root / "feats" / "ivector100"
    extractor = shutil.copytree(out / "extractor", tmp_path / "extractor")
    IvectorModel.load(extractor)
    flip_a_byte(extractor / "final.ie")
    assert_refused(extractor / "final.ie", "i-vector extractor file", lambda: IvectorModel.load(extractor), r"\(sha1")
    with damaged(out / "eval" / "ivector_online.ark", lambda data: data[:-40]) as ark:
        assert_refused(ark, "i-vectors", lambda: IvectorReader(out / "eval"))
    IvectorReader(out / "eval")
