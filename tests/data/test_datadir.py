"""Kaldi data dirs: reading only the tables a stage needs."""

from asr.data.datadir import DataDir, read_data_dir, write_data_dir
from asr.kaldi.segments import Segment


def test_read_only_the_tables_asked_for(tmp_path):
    d = DataDir(
        wav_scp={"r1": "a.wav"}, text={"u1": "hello"}, utt2spk={"u1": "s1"}, segments={"u1": Segment("r1", 0.0, 1.0)}
    )
    write_data_dir(d, tmp_path / "d")
    some = read_data_dir(tmp_path / "d", tables=("segments",))
    assert some.utt2spk == {"u1": "s1"} and some.segments == d.segments and not some.text and not some.wav_scp
    assert read_data_dir(tmp_path / "d").text == {"u1": "hello"}
