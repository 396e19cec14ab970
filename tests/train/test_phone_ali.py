"""Frame targets from the synthetic corpus' phone timings (asr.train.phone_ali): one target per
feature frame, silence where the audio is silent, through speed perturbation too.

One tiny corpus (conf/synth/tiny.yaml) is made, prepared and speed-perturbed per module.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest

from asr.config import load_config
from asr.data.audio import read_segment
from asr.data.datadir import read_data_dir, write_data_dir
from asr.data.perturb import speed_perturb
from asr.data.prepare import prepare_data
from asr.data.synth.corpus import synthesize_corpus
from asr.features.logmel.fbank import fbank
from asr.features.logmel.options import FbankOptions
from asr.kaldi.segments import Segment
from asr.kaldi.alignments import AlignmentArchives, read_int_vectors
from asr.train.phone_ali import (
    ARCHIVE,
    PHONES,
    FrameLabeller,
    main,
    phone_inventory,
    speed_and_side,
    write_phone_alignments,
)
from asr.utils.errors import InputError

OPTS = FbankOptions(sample_frequency=8000.0)  # the log-mel features' frames: 25 ms every 10 ms


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    root = tmp_path_factory.mktemp("phone_ali")
    cfg = load_config(
        [
            "synth=tiny",
            f"synth.out_dir={root / 'corpus'}",
            f"data.data_dir={root / 'data'}",
            "data.dev_utts=20",
            "data.prepare_sets=[train,dev]",
        ]
    )
    synthesize_corpus(cfg.synth)
    prepare_data(cfg.data)
    speed_perturb(root / "data/train", [0.9, 1.1])
    ms98 = Path(cfg.data.ms98_dir)
    sets = [root / "data" / name for name in ("train", "train_dev", "train_sp")]
    written = write_phone_alignments(ms98, sets, root / "ali", OPTS)
    return root, ms98, written


def archive(root: Path, name: str) -> dict[str, np.ndarray]:
    return dict(read_int_vectors(root / "ali" / name / ARCHIVE))


def test_every_utterance_of_every_set_has_a_target_per_feature_frame(corpus):
    root, _, written = corpus
    for name in ("train", "train_dev", "train_sp"):
        data = read_data_dir(root / "data" / name)
        targets = archive(root, name)
        assert written[name] == len(targets) == len(data.utt2spk)
        assert any(u.startswith("sp0.9-") for u in targets) == (name == "train_sp")
        for utt in sorted(targets)[::7]:  # the filterbank's own frame count, on the audio as training reads it
            segment = data.segments[utt]
            samples, _ = read_segment(data.wav_scp[segment.recording], segment.start, segment.end, utt)
            assert len(targets[utt]) == fbank(samples, OPTS).shape[0], utt


def test_archives_read_as_pdf_ids_with_one_phone_table(corpus):
    root, ms98, _ = corpus
    table = [line.split() for line in (root / "ali" / PHONES).read_text().splitlines()]
    assert table[0] == ["sil", "0"] and [int(i) for _, i in table] == list(range(len(table)))
    assert {p for p, _ in table} == set(phone_inventory(ms98))
    assert {"[laughter]", "aI", "t", "n"} <= {p for p, _ in table}
    reader = AlignmentArchives(str(root / "ali/train/pdf.1.gz"), "auto")
    assert reader.mapping is None  # not ali.N.gz: pdf ids as they are (train.transition_model=none alike)
    ids = np.concatenate([v for _, v in reader.read(set(archive(root, "train")))])
    assert ids.min() == 0 and ids.max() < len(table)
    assert 0.15 < np.mean(ids == 0) < 0.6  # silence: margins, pauses, closures are not


def frame_db(samples: np.ndarray, count: int) -> np.ndarray:
    """Log energy of each 25 ms frame, cut as the filterbank cuts them."""
    frames = np.lib.stride_tricks.sliding_window_view(samples, OPTS.window_length)[:: OPTS.window_shift][:count]
    return 10 * np.log10(np.mean(frames.astype(np.float64) ** 2, axis=1) + 1e-12)


def loud_silence(root: Path, ms98: Path, name: str, shift: float = 0.0, ignore_speed: bool = False) -> float:
    """The fraction of loud frames (within 30 dB of the utterance's loudest) whose target is
    silence; `shift` seconds moves every target, `ignore_speed` reads a perturbed copy on the
    original's timeline without the speed factor (the mistakes the targets must not have)."""
    data = read_data_dir(root / "data" / name)
    labeller = FrameLabeller(ms98, phone_inventory(ms98), OPTS)
    wrong = loud = 0
    for utt in sorted(data.segments):
        segment = data.segments[utt]
        samples, _ = read_segment(data.wav_scp[segment.recording], segment.start, segment.end, utt)
        factor, side = speed_and_side(segment.recording)
        times = (labeller.frame_centres(segment.start, segment.end) + shift) * (1.0 if ignore_speed else factor)
        targets = labeller.at(side, times)
        db = frame_db(samples, len(targets))
        is_loud = db > db.max() - 30
        wrong += int(np.sum(is_loud & (targets[: len(db)] == 0)))
        loud += int(np.sum(is_loud))
    return wrong / loud


def test_silence_targets_are_where_the_audio_is_silent(corpus):
    # Measured on the tiny corpus: 1.2% of loud frames have a silence target (frames at a
    # word's edge, half in silence); with every target 50 ms early or late 4.5-5%.
    root, ms98, _ = corpus
    assert loud_silence(root, ms98, "train") < 0.025
    for shift in (-0.05, 0.05):
        assert loud_silence(root, ms98, "train", shift) > 0.035, shift


def test_speed_perturbed_targets_follow_the_perturbed_audio(corpus):
    # The same with the 0.9 and 1.1 copies; reading them without the factor: 36%.
    root, ms98, _ = corpus
    assert loud_silence(root, ms98, "train_sp") < 0.025
    assert loud_silence(root, ms98, "train_sp", ignore_speed=True) > 0.2
    assert (
        archive(root, "train_sp")["sp1.1-" + min(archive(root, "train"))].size
        < archive(root, "train")[min(archive(root, "train"))].size
    )


def test_recordings_without_phone_timings_are_refused(corpus, tmp_path):
    root, ms98, _ = corpus
    data = read_data_dir(root / "data/train_dev")
    utt = min(data.segments)
    data.segments = {utt: Segment("en_4156-A", 1.0, 2.0)}
    data.utt2spk = {utt: data.utt2spk[utt]}
    data.text, data.utt2dur = {}, {}
    data.wav_scp = {"en_4156-A": "x.wav"}
    data.reco2file_and_channel = {}
    write_data_dir(data, tmp_path / "eval")
    with pytest.raises(InputError, match="en_4156-A.*only the synthetic Switchboard-1 sides"):
        write_phone_alignments(ms98, [tmp_path / "eval"], tmp_path / "ali", OPTS)
    with pytest.raises(InputError, match="no \\*/\\*/\\*-ms98-a-phone.text"):
        write_phone_alignments(tmp_path, [root / "data/train_dev"], tmp_path / "ali", OPTS)


def test_the_command_line_writes_the_sets_and_exits_2_on_user_errors(corpus, tmp_path):
    root, ms98, _ = corpus
    assert main(["--ms98-dir", str(ms98), "--out", str(tmp_path / "ali"), str(root / "data/train_dev")]) == 0
    ours, theirs = archive(tmp_path, "train_dev"), archive(root, "train_dev")
    assert ours.keys() == theirs.keys() and all(np.array_equal(ours[u], theirs[u]) for u in ours)
    assert (
        main(["--ms98-dir", str(tmp_path / "nowhere"), "--out", str(tmp_path / "ali2"), str(root / "data/train_dev")])
        == 2
    )


def test_the_command_line_skips_the_sets_its_record_says_are_done(corpus, tmp_path, caplog):
    """An edited segments file, other framing or no record (a run killed before writing it)
    writes the targets again; otherwise the stage is skipped."""
    root, ms98, _ = corpus
    data = shutil.copytree(root / "data/train_dev", tmp_path / "train_dev")
    args = ["--ms98-dir", str(ms98), "--out", str(tmp_path / "ali"), str(data)]

    def ran(*extra: str) -> bool:
        caplog.clear()
        with caplog.at_level("INFO", logger="asr.train.phone_ali"):
            assert main([*extra, *args]) == 0
        return "done already" not in caplog.text

    assert ran() and not ran()
    segments = data / "segments"
    segments.write_text("".join(segments.read_text().splitlines(keepends=True)[1:]))
    assert ran() and f"{segments} changed since the phone_ali stage read it" in caplog.text
    assert not ran()
    assert ran("--frame-shift-ms", "12") and not ran("--frame-shift-ms", "12")
    (tmp_path / "ali" / "phone_ali.record.json").unlink()
    assert ran("--frame-shift-ms", "12") and not ran("--frame-shift-ms", "12")


def test_a_truncated_phone_alignment_is_refused_in_one_line(corpus, tmp_path):
    """Issue 31, item 3: the phone_ali archives are verified against its record before use."""
    import shutil

    root, _, _ = corpus
    ali = shutil.copytree(root / "ali", tmp_path / "ali")
    archive_path = ali / "train_dev" / ARCHIVE
    archive_path.write_bytes(archive_path.read_bytes()[:-20])
    with pytest.raises(
        InputError,
        match=rf"^{archive_path}: damaged, truncated or replaced alignment archive \(\d+ bytes, the stage wrote \d+\); "
        r"re-run the phone_ali stage \(python -m asr.train.phone_ali\)$",
    ):
        dict(read_int_vectors(archive_path))
