"""End to end: `python -m asr.score` in a fresh directory, as the recipe runs it."""

import json
import subprocess
import sys

import pytest

pytestmark = pytest.mark.slow

SWB1 = "sw_4390-A_000100-000200"
CH1 = "en_4156-A_000100-000200"
DEV1 = "sw02001-A_000098-001156"


def write(path, text):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def run_score(cwd, *overrides):
    return subprocess.run(
        [sys.executable, "-m", "asr.score", *overrides], cwd=cwd, capture_output=True, text=True, timeout=120
    )


@pytest.fixture
def workdir(tmp_path):
    write(tmp_path / "mydata/eval2000/text", f"{CH1} he is a police officer\n{SWB1} uh i think [noise] so ab- yes\n")
    write(tmp_path / "mydata/eval2000/utt2spk", f"{CH1} en_4156-A\n{SWB1} sw_4390-A\n")
    write(tmp_path / "mydata/train_dev/text", f"{DEV1} hi um yeah\n")
    write(tmp_path / "exp/e1/decode_eval2000/hyp.txt", f"{CH1} he is the police officer now\n{SWB1} i thing so\n")
    write(tmp_path / "exp/e1/decode_train_dev/hyp.txt", f"{DEV1} hi yeah\n")
    return tmp_path


def test_scores_every_decoded_set(workdir):
    proc = run_score(workdir, "exp_name=e1", "data.data_dir=mydata", "decode.sets=[eval2000,train_dev]")
    assert proc.returncode == 0, proc.stderr
    decode = workdir / "exp/e1/decode_eval2000"
    assert json.loads((decode / "wer.json").read_text()) == {
        # swb: i THINK so YES / i THING so *** -> 2/4; callhome: a->the + now -> 2/5
        "swb": {"wer": 50.0, "sub": 1, "del": 1, "ins": 0, "words": 4, "sentences": 1},
        "callhome": {"wer": 40.0, "sub": 1, "del": 0, "ins": 1, "words": 5, "sentences": 1},
        "total": {"wer": 44.44, "sub": 2, "del": 1, "ins": 1, "words": 9, "sentences": 2},
    }
    assert json.loads((workdir / "exp/e1/decode_train_dev/wer.json").read_text()) == {
        "total": {"wer": 0.0, "sub": 0, "del": 0, "ins": 0, "words": 2, "sentences": 1},
    }
    assert {"wer.md", "align.txt", "wer_by_speaker.md"} <= {p.name for p in decode.iterdir()}
    # The tables end the stage's stdout; one log line per subset goes to the stage log.
    assert "### e1: decode_eval2000\n\n| Subset | WER |" in proc.stdout  # headed by its decode dir
    assert "| total | 44.44 | 2 | 1 | 1 | 9 | 2 |" in proc.stdout
    assert proc.stdout.rstrip().endswith("| total | 0.00 | 0 | 0 | 0 | 2 | 1 |")
    log = (workdir / "exp/e1/log/score.log").read_text()
    assert "eval2000 callhome: WER 40.00%" in log and "train_dev total: WER 0.00%" in log


def test_default_set_is_the_eval_set(workdir):
    proc = run_score(workdir, "exp_name=e1", "data.data_dir=mydata", "score.per_speaker=false")
    assert proc.returncode == 0, proc.stderr
    assert (workdir / "exp/e1/decode_eval2000/wer.json").is_file()
    assert not (workdir / "exp/e1/decode_eval2000/wer_by_speaker.md").exists()
    assert not (workdir / "exp/e1/decode_train_dev/wer.json").exists()


def test_empty_hypothesis_file_exits_2_naming_it(workdir):
    write(workdir / "exp/e1/decode_eval2000/hyp.txt", "")
    proc = run_score(workdir, "exp_name=e1", "data.data_dir=mydata")
    assert proc.returncode == 2
    assert "exp/e1/decode_eval2000/hyp.txt: hypothesis file has no utterances" in proc.stderr
    assert not (workdir / "exp/e1/decode_eval2000/wer.json").exists()
