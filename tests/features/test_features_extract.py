"""The features stage on a tiny data dir of 2-channel 8 kHz mu-law SPHERE recordings."""

import subprocess
import sys
import tracemalloc
from pathlib import Path

import kaldiio
import numpy as np
import pytest
import soundfile as sf

from asr.data.datadir import DataDir, read_data_dir, swbd_utt_id, write_data_dir
from asr.features.logmel.extract import compute_features, extract_set, plan_recordings, split_into_parts
from asr.features.logmel.fbank import fbank
from asr.features.logmel.options import FbankOptions
from asr.kaldi.segments import Segment
from asr.utils.errors import InputError

RATE = 8000
OPTIONS = FbankOptions(sample_frequency=RATE, num_mel_bins=40)
REPO = Path(__file__).resolve().parents[2]


def write_sphere(path: Path, seconds: float, seed: int) -> np.ndarray:
    """A 2-channel mu-law SPHERE file like Switchboard's; returns what soundfile reads back."""
    rng = np.random.default_rng(seed)
    t = np.arange(int(seconds * RATE)) / RATE
    left = 0.3 * np.sin(2 * np.pi * 300 * t) + 0.05 * rng.standard_normal(len(t))
    right = 0.2 * np.sin(2 * np.pi * 900 * t) + 0.05 * rng.standard_normal(len(t))
    sf.write(path, np.stack([left, right], axis=1), RATE, format="NIST", subtype="ULAW")
    return sf.read(path, dtype="float32")[0]


def make_data_dir(
    root: Path, set_name: str = "train", bad_recording: bool = False
) -> tuple[Path, dict[str, np.ndarray]]:
    """3 conversations x 2 sides x 2 segments, in Kaldi's Switchboard naming.

    Returns the data dir and each recording's samples (for checking values).
    """
    d, audio = DataDir(), {}
    names = ["sw02001", "sw02002", "sw02003"]
    for i, name in enumerate(names):
        path = root / f"{name}.sph"
        if bad_recording and i == 2:
            path.write_bytes(b"NIST_1A\n   1024\nnot really a sphere header\n")
        else:
            samples = write_sphere(path, 2.0 + 0.5 * i, seed=i)
        for channel, side in enumerate("AB"):
            reco = f"{name}-{side}"
            d.wav_scp[reco] = f"sph2pipe -f wav -p -c {channel + 1} {path} |"
            d.reco2file_and_channel[reco] = (name, side)
            if not (bad_recording and i == 2):
                audio[reco] = samples[:, channel]
            for start, end in [(0.11, 0.93), (1.02, 1.97)]:
                utt = f"{reco}_{round(start * 100):06d}-{round(end * 100):06d}"
                d.segments[utt] = Segment(reco, start, end)
                d.utt2spk[utt] = reco
                d.text[utt] = "hello world"
    return write_data_dir(d, root / "data" / set_name), audio


def expected_frames(start: float, end: float) -> int:
    n = round(end * RATE) - round(start * RATE)
    return 1 + (n - 200) // 80


def test_extracts_features_frames_dim_and_cmvn(tmp_path):
    data_dir, audio = make_data_dir(tmp_path)
    out = tmp_path / "feats" / "logmel40" / "train"
    summary = extract_set(data_dir, out, OPTIONS, cmvn_unit="speaker", jobs=1)

    feats = kaldiio.load_scp(str(out / "feats.scp"))
    assert len(feats) == 12 == summary.utterances and summary.skipped_utterances == 0
    num_frames = dict(line.split() for line in (out / "utt2num_frames").read_text().splitlines())
    total = 0
    for utt in feats:
        start, end = int(utt[-13:-7]) / 100, int(utt[-6:]) / 100
        assert feats[utt].shape == (expected_frames(start, end), 40)
        assert feats[utt].dtype == np.float32
        assert int(num_frames[utt]) == feats[utt].shape[0]
        total += feats[utt].shape[0]
    assert summary.frames == total == 6 * (expected_frames(0.11, 0.93) + expected_frames(1.02, 1.97))
    assert summary.seconds == pytest.approx(6 * (0.82 + 0.95))
    assert (out / "feat_dim").read_text() == "40\n"
    assert (out / "cmvn_type").read_text() == "speaker\n"
    assert "--num-mel-bins=40" in (out / "fbank.conf").read_text()

    # Side B is channel 2: its features are the filterbank of channel 2's samples.
    utt = "sw02002-B_000102-000197"
    segment = audio["sw02002-B"][round(1.02 * RATE) : round(1.97 * RATE)]
    assert np.abs(feats[utt] - fbank(segment, OPTIONS).numpy()).max() < 1e-5

    stats = kaldiio.load_scp(str(out / "cmvn.scp"))
    assert sorted(stats) == [f"sw0200{i}-{s}" for i in (1, 2, 3) for s in "AB"]
    assert sum(s[0, -1] for s in stats.values()) == total
    speaker_feats = np.concatenate([feats[u] for u in feats if u.startswith("sw02001-A")])
    assert stats["sw02001-A"][0, -1] == speaker_feats.shape[0]
    np.testing.assert_allclose(stats["sw02001-A"][0, :-1], speaker_feats.sum(axis=0), rtol=1e-6)
    np.testing.assert_allclose(
        stats["sw02001-A"][1, :-1], (speaker_feats.astype(np.float64) ** 2).sum(axis=0), rtol=1e-6
    )
    assert not list(out.parent.glob(".train.tmp.*"))  # nothing temporary left behind


def test_rerun_skips_complete_set_and_redoes_changed_one(tmp_path):
    data_dir, _ = make_data_dir(tmp_path)
    out = tmp_path / "feats" / "train"
    extract_set(data_dir, out, OPTIONS, jobs=1)
    made = (out / "feats.ark").stat().st_mtime_ns

    again = extract_set(data_dir, out, OPTIONS, jobs=1)
    assert again.skipped and (out / "feats.ark").stat().st_mtime_ns == made

    changed = extract_set(data_dir, out, FbankOptions(sample_frequency=RATE, num_mel_bins=23), jobs=1)
    assert not changed.skipped and (out / "feat_dim").read_text() == "23\n"
    assert next(iter(kaldiio.load_scp(str(out / "feats.scp")).values())).shape[1] == 23

    forced = extract_set(data_dir, out, FbankOptions(sample_frequency=RATE, num_mel_bins=23), jobs=1, force=True)
    assert not forced.skipped and forced.utterances == 12


def test_the_stage_record_decides_and_older_sets_are_adopted(tmp_path, caplog):
    """The skip rule is the set's stage record (features.record.json); a set made before
    records existed is complete by its own files and recorded on the next run."""
    data_dir, _ = make_data_dir(tmp_path)
    out = tmp_path / "feats" / "train"
    extract_set(data_dir, out, OPTIONS, jobs=1)
    (out / "features.record.json").unlink()  # as a set extracted before stage records
    assert extract_set(data_dir, out, OPTIONS, jobs=1).skipped and (out / "features.record.json").is_file()
    ark = out / "feats.ark"
    ark.write_bytes(ark.read_bytes()[:-100])
    with caplog.at_level("INFO", logger="asr.features"):
        assert not extract_set(data_dir, out, OPTIONS, jobs=1).skipped
    assert f"{ark}: " in caplog.text and "bytes, the stage wrote" in caplog.text


def test_unreadable_recording_is_skipped_and_counted(tmp_path, caplog):
    data_dir, _ = make_data_dir(tmp_path, bad_recording=True)
    out = tmp_path / "feats" / "train"
    with caplog.at_level("WARNING", logger="asr.features"):
        summary = extract_set(data_dir, out, OPTIONS, cmvn_unit="global", jobs=1)
    assert summary.utterances == 8 and summary.skipped_utterances == 4
    feats = kaldiio.load_scp(str(out / "feats.scp"))
    assert len(feats) == 8 and not any(u.startswith("sw02003") for u in feats)
    skipped = (out / "skipped").read_text().splitlines()
    assert len(skipped) == 4 and all(line.startswith("sw02003-") and "sw02003.sph" in line for line in skipped)
    assert sum("sw02003" in r.message and "skipped 2 utterance" in r.message for r in caplog.records) == 2
    stats = kaldiio.load_scp(str(out / "cmvn.scp"))
    assert list(stats) == ["global"] and stats["global"][0, -1] == summary.frames


def test_everything_failing_raises_input_error(tmp_path):
    data_dir, _ = make_data_dir(tmp_path)
    out = tmp_path / "feats" / "train"
    with pytest.raises(InputError, match="no utterance could be extracted.*16000"):
        extract_set(data_dir, out, FbankOptions(sample_frequency=16000), jobs=1)
    assert not out.exists()


def test_whole_recordings_without_segments(tmp_path):
    audio = write_sphere(tmp_path / "a.sph", 1.5, seed=3)
    d = DataDir(wav_scp={"a": str(tmp_path / "a.sph")}, utt2spk={"a": "a"}, text={"a": "x"})
    data_dir = write_data_dir(d, tmp_path / "data" / "eval")
    out = tmp_path / "feats" / "eval"
    summary = extract_set(data_dir, out, OPTIONS, cmvn_unit="none", jobs=1)
    feats = kaldiio.load_scp(str(out / "feats.scp"))
    assert summary.utterances == 1 and feats["a"].shape == (1 + (12000 - 200) // 80, 40)
    assert np.abs(feats["a"] - fbank(audio[:, 0], OPTIONS).numpy()).max() < 1e-5
    assert (out / "cmvn_type").read_text() == "none\n"


def test_split_balances_audio_by_recording(tmp_path):
    data_dir, _ = make_data_dir(tmp_path)
    works = plan_recordings(data_dir)
    assert len(works) == 6 and all(abs(w.weight - 1.77) < 1e-9 for w in works)  # 0.82 + 0.95 s each
    parts = split_into_parts(works, 4)
    assert len(parts) == 4 and sorted(len(p) for p in parts) == [1, 1, 2, 2]
    assert sorted(w.recording for p in parts for w in p) == sorted(w.recording for w in works)


@pytest.mark.slow
def test_parallel_jobs_give_the_same_features(tmp_path):
    data_dir, _ = make_data_dir(tmp_path)
    one = extract_set(data_dir, tmp_path / "one", OPTIONS, jobs=1)
    two = extract_set(data_dir, tmp_path / "two", OPTIONS, jobs=2)
    assert (one.utterances, one.frames) == (two.utterances, two.frames)
    a, b = kaldiio.load_scp(str(tmp_path / "one" / "feats.scp")), kaldiio.load_scp(str(tmp_path / "two" / "feats.scp"))
    assert list(a) == list(b)  # both sorted by key
    assert all(np.array_equal(a[u], b[u]) for u in a)
    c, d = kaldiio.load_scp(str(tmp_path / "one" / "cmvn.scp")), kaldiio.load_scp(str(tmp_path / "two" / "cmvn.scp"))
    assert list(c) == list(d) == list(a) and all(np.array_equal(c[u], d[u]) for u in c)  # per utterance, sorted
    assert sorted(p.name for p in (tmp_path / "two").iterdir() if p.name.startswith(("feats", "cmvn"))) == [
        "cmvn.ark",
        "cmvn.scp",
        "cmvn_type",
        "feats.ark",
        "feats.scp",
    ]


def test_features_do_not_depend_on_how_utterances_are_batched():
    rng = np.random.default_rng(0)
    waves = [rng.normal(0, 0.1, n).astype(np.float32) for n in (12_345, 800, 40_000, 7_999, 40_000, 201)]
    alone = [fbank(w, OPTIONS).numpy() for w in waves]
    for limit in (1, 41_000, 80_000, 10**7):  # one per batch, pairs, the default, all in one
        batched = compute_features(waves, OPTIONS, max_batch_samples=limit)
        assert [f.shape for f in batched] == [a.shape for a in alone]
        assert all(np.array_equal(f, a) for f, a in zip(batched, alone))  # the same bits


@pytest.mark.slow
def test_cli_extracts_every_set(tmp_path):
    for set_name in ("train", "dev", "eval"):
        make_data_dir(tmp_path, set_name)
    args = [
        sys.executable,
        "-m",
        "asr.features",
        "features=logmel40",
        "features.jobs=1",
        f"data.data_dir={tmp_path / 'data'}",
        "data.train_set=train",
        "data.dev_set=dev",
        "data.eval_set=eval",
        f"features.feats_dir={tmp_path / 'feats'}",
        f"exp_dir={tmp_path / 'exp'}",
    ]
    run = subprocess.run(args, cwd=REPO, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    for set_name in ("train", "dev", "eval"):
        set_dir = tmp_path / "feats" / "logmel40" / set_name
        assert (set_dir / "feat_dim").read_text() == "40\n"
        assert len(kaldiio.load_scp(str(set_dir / "feats.scp"))) == 12
    assert "12 utterances" in run.stderr and "real-time factor" in run.stderr
    rerun = subprocess.run(args, cwd=REPO, capture_output=True, text=True, timeout=300)
    assert rerun.returncode == 0 and rerun.stderr.count("complete already") == 3


def test_cluster_shares_merge_into_the_same_set(tmp_path, caplog):
    """features.split: shares computed apart (one array job each) and merged give the set a
    single run gives; a share missing at the merge is computed there; the shares go away."""
    data_dir, _ = make_data_dir(tmp_path)
    whole = extract_set(data_dir, tmp_path / "whole", OPTIONS, jobs=1, cmvn_unit="speaker", compress=True)
    out = tmp_path / "split"
    for index in (0, 2):
        share = extract_set(data_dir, out, OPTIONS, jobs=1, cmvn_unit="speaker", compress=True, split=(index, 3))
        assert share.share == f"{index}-of-3" and (tmp_path / "split.shares" / f"{index}-of-3" / "share.json").is_file()
    assert not out.exists()  # no set until the merge
    with caplog.at_level("INFO", logger="asr.features"):
        merged = extract_set(data_dir, out, OPTIONS, jobs=1, cmvn_unit="speaker", compress=True, split=(-1, 3))
    assert "share 1-of-3 is missing; computing it here" in caplog.text and "share 0-of-3" not in caplog.text
    assert (merged.utterances, merged.frames) == (whole.utterances, whole.frames)
    a, b = kaldiio.load_scp(str(tmp_path / "whole" / "feats.scp")), kaldiio.load_scp(str(out / "feats.scp"))
    assert list(a) == list(b) and all(np.array_equal(a[u], b[u]) for u in a)
    for name in ("cmvn.ark", "utt2num_frames"):
        assert (out / name).read_bytes() == (tmp_path / "whole" / name).read_bytes()
    assert not (tmp_path / "split.shares").exists()


def test_a_share_made_from_other_inputs_is_made_again(tmp_path, caplog):
    data_dir, _ = make_data_dir(tmp_path)
    extract_set(data_dir, tmp_path / "out", OPTIONS, jobs=1, split=(0, 2))
    extract_set(data_dir, tmp_path / "out", FbankOptions(sample_frequency=RATE, num_mel_bins=23), jobs=1, split=(1, 2))
    with caplog.at_level("INFO", logger="asr.features"):
        extract_set(
            data_dir, tmp_path / "out", FbankOptions(sample_frequency=RATE, num_mel_bins=23), jobs=1, split=(-1, 2)
        )
    assert "share 0-of-2 is from other inputs; computing it here" in caplog.text
    assert all(m.shape[1] == 23 for m in kaldiio.load_scp(str(tmp_path / "out" / "feats.scp")).values())
    with pytest.raises(InputError, match=r"features.split.index=2, features.split.count=2: give 0 <= index < count"):
        extract_set(data_dir, tmp_path / "again", OPTIONS, jobs=1, split=(2, 2))


@pytest.mark.slow
def test_cli_shares_as_array_jobs_then_merge(tmp_path):
    """`python -m asr.features features.split.count=2 features.split.index=I` as two array jobs,
    then the same command without the index merges them: every set complete."""
    for set_name in ("train", "dev", "eval"):
        make_data_dir(tmp_path, set_name)
    args = [
        sys.executable,
        "-m",
        "asr.features",
        "features=logmel40",
        "features.jobs=1",
        "features.split.count=2",
        f"data.data_dir={tmp_path / 'data'}",
        "data.train_set=train",
        "data.dev_set=dev",
        "data.eval_set=eval",
        f"features.feats_dir={tmp_path / 'feats'}",
        f"exp_dir={tmp_path / 'exp'}",
    ]
    for index in (0, 1):
        job = subprocess.run(
            [*args, f"features.split.index={index}"], cwd=REPO, capture_output=True, text=True, timeout=300
        )
        assert job.returncode == 0, job.stderr
    assert not (tmp_path / "feats" / "logmel40" / "train").exists()
    merge = subprocess.run(args, cwd=REPO, capture_output=True, text=True, timeout=300)
    assert merge.returncode == 0 and "computing it here" not in merge.stderr, merge.stderr
    for set_name in ("train", "dev", "eval"):
        assert len(kaldiio.load_scp(str(tmp_path / "feats" / "logmel40" / set_name / "feats.scp"))) == 12
        assert not (tmp_path / "feats" / "logmel40" / f"{set_name}.shares").exists()


def make_many_utterances(root: Path, conversations: int, per_side: int = 50) -> Path:
    """`conversations` 1-second conversations x 2 sides x `per_side` overlapping 0.1 s segments:
    the utterances grow with the recordings, each recording's run staying the same size."""
    d = DataDir()
    root.mkdir(parents=True, exist_ok=True)
    for i in range(conversations):
        name = f"sw{3000 + i:05d}"
        write_sphere(root / f"{name}.sph", 1.0, seed=i)
        for channel, side in enumerate("AB"):
            reco = f"{name}-{side}"
            d.wav_scp[reco] = f"sph2pipe -f wav -p -c {channel + 1} {root / name}.sph |"
            for k in range(per_side):
                start = round(0.015 * k, 3)
                utt = swbd_utt_id(reco, start, start + 0.1)
                d.segments[utt], d.utt2spk[utt], d.text[utt] = Segment(reco, start, start + 0.1), reco, "x"
    return write_data_dir(d, root / "data")


def test_no_process_holds_a_line_per_utterance(tmp_path):
    """extract_set in one process (jobs=1: the worker's part runs there too) holds the recordings,
    not the utterances: its traced peak barely grows from 800 to 3,200 utterances (both arks
    over the 1 MB a join copies at a time). The code that read the data dir into dicts and sent
    utt2spk and the frame counts between processes grew by about 0.58 KB per utterance here
    (this code: none)."""
    peaks = []
    for conversations in (8, 32):
        data_dir = make_many_utterances(tmp_path / f"c{conversations}", conversations)
        tracemalloc.start()
        try:
            summary = extract_set(data_dir, tmp_path / f"out{conversations}", OPTIONS, cmvn_unit="speaker", jobs=1)
            peaks.append(tracemalloc.get_traced_memory()[1])
        finally:
            tracemalloc.stop()
        assert summary.utterances == conversations * 100
    growth_per_utt = (peaks[1] - peaks[0]) / 2400
    assert growth_per_utt < 100, (
        f"traced peak {peaks[0] / 2**20:.2f} -> {peaks[1] / 2**20:.2f} MB: {growth_per_utt:.0f} bytes per utterance"
    )


def test_a_recording_whose_utterances_are_apart_in_sorted_order(tmp_path):
    """Utterance ids that sort by time, not by recording (as a Hub5 recording holding both
    sides' speakers): each recording comes in runs, and every utterance gets its features."""
    data_dir, _ = make_data_dir(tmp_path)
    plain = read_data_dir(data_dir)
    d, renamed = DataDir(wav_scp=plain.wav_scp), {}
    for utt, segment in plain.segments.items():
        apart = renamed[utt] = f"t{round(segment.start * 100):04d}-{segment.recording}"  # sorts by start time first
        d.segments[apart], d.utt2spk[apart], d.text[apart] = segment, segment.recording, "x"
    apart_dir = write_data_dir(d, tmp_path / "data" / "apart")
    extract_set(data_dir, tmp_path / "plain", OPTIONS, cmvn_unit="speaker", jobs=1)
    extract_set(apart_dir, tmp_path / "apart", OPTIONS, cmvn_unit="speaker", jobs=1)
    a, b = (
        kaldiio.load_scp(str(tmp_path / "plain" / "feats.scp")),
        kaldiio.load_scp(str(tmp_path / "apart" / "feats.scp")),
    )
    assert len(b) == 12 and all(np.array_equal(a[u], b[renamed[u]]) for u in a)
    c, s = (
        kaldiio.load_scp(str(tmp_path / "plain" / "cmvn.scp")),
        kaldiio.load_scp(str(tmp_path / "apart" / "cmvn.scp")),
    )
    assert list(c) == list(s) and all(np.allclose(c[k], s[k], rtol=1e-12) for k in c)


def test_a_truncated_feature_archive_is_refused_before_reading(tmp_path):
    """Issue 31, item 3: the feature set's reader checks its files against the set's record."""
    from asr.data.datadir import read_data_dir
    from asr.features.featureset import FeatureReader
    from asr.utils.errors import InputError

    data_dir, _ = make_data_dir(tmp_path)
    out = tmp_path / "feats" / "train"
    extract_set(data_dir, out, OPTIONS, jobs=1)
    utt2spk = read_data_dir(data_dir).utt2spk
    FeatureReader(out, utt2spk)
    ark = out / "feats.ark"
    ark.write_bytes(ark.read_bytes()[: ark.stat().st_size // 2])
    with pytest.raises(InputError, match=rf"^{ark}: damaged, truncated or replaced feature set file \(\d+ bytes"):
        FeatureReader(out, utt2spk)
