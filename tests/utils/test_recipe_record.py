"""run.sh's record of a stage (asr/utils/recipe_record.py): made from the records the stage wrote,
done while the options, the inputs those records name and the outputs they list are the same."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys

from asr.utils.recipe_record import main
from asr.utils.record import USED_RECORDS_ENV, why_rerun, write_record


def run(monkeypatch, *argv: str, options: str = "") -> int:
    monkeypatch.setattr(sys, "stdin", io.StringIO(options))
    return main(list(argv))


def tokenizer_stage(root) -> None:
    """What a tokenizer stage leaves: lang/tok.model and its record naming data/train/text."""
    (root / "lang").mkdir(exist_ok=True)
    (root / "lang/tok.model").write_text("model of " + (root / "data/train/text").read_text())
    write_record(root / "lang", "tokenizer", "rerun", {}, [root / "data/train/text"], {"tok.model": True})


def test_the_record_takes_the_stages_records_and_follows_their_inputs(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "data/train").mkdir(parents=True)
    text = tmp_path / "data/train/text"
    text.write_text("u1 a b\n")
    (tmp_path / "exp/other").mkdir(parents=True)
    (tmp_path / "exp/other/.run.lock").touch()
    record = tmp_path / "exp/base/.done/3.tokenizer.record.json"
    record.parent.mkdir(parents=True)
    (tmp_path / "exp/base/.run.lock").touch()

    assert run(monkeypatch, "snapshot", str(record), "--exp", "exp/base") == 0
    tokenizer_stage(tmp_path)
    write_record(tmp_path / "exp/other", "train", "rerun", {}, [text], {})  # another experiment, meanwhile
    assert run(monkeypatch, "write", str(record), "--exp", "exp/base", options="tokenizer.vocab_size=60\n") == 0
    written = json.loads(record.read_text())
    assert list(written["inputs"]) == [str(text)]
    assert list(written["outputs"]) == [str(tmp_path / "lang/tok.model")]
    assert written["sources"] == [str(tmp_path / "lang/tokenizer.record.json")]

    assert run(monkeypatch, "check", str(record), options="tokenizer.vocab_size=60\n") == 0
    os.utime(text, ns=(1, 1))  # touched: the same bytes
    assert run(monkeypatch, "check", str(record), options="tokenizer.vocab_size=60\n") == 0
    capsys.readouterr()

    assert run(monkeypatch, "check", str(record), options="tokenizer.vocab_size=80\n") == 1
    assert capsys.readouterr().out.splitlines() == ["  - tokenizer.vocab_size=60", "  + tokenizer.vocab_size=80"]
    text.write_text("u1 a c\n")
    assert run(monkeypatch, "check", str(record), options="tokenizer.vocab_size=60\n") == 1
    assert capsys.readouterr().out.splitlines() == [f"  input {text}"]
    text.write_text("u1 a b\n")
    (tmp_path / "lang/tok.model").unlink()
    assert run(monkeypatch, "check", str(record), options="tokenizer.vocab_size=60\n") == 1
    assert capsys.readouterr().out.splitlines() == [f"  output {tmp_path}/lang/tok.model: missing"]


def test_a_record_the_stage_wrote_itself_is_none_of_its_inputs(tmp_path, monkeypatch):
    """The features stage writes a model's record, then the sets' records naming it."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "data/train").mkdir(parents=True)
    (tmp_path / "data/train/text").write_text("u1 a b\n")
    record = tmp_path / "exp/base/.done/2.features.record.json"
    record.parent.mkdir(parents=True)
    assert run(monkeypatch, "snapshot", str(record), "--exp", "exp/base") == 0
    (tmp_path / "feats/gmm").mkdir(parents=True)
    model = write_record(tmp_path / "feats/gmm", "features", "rerun", {}, [tmp_path / "data/train/text"], {})
    (tmp_path / "feats/eval").mkdir()
    write_record(tmp_path / "feats/eval", "features", "rerun", {}, [model], {})
    assert run(monkeypatch, "write", str(record), "--exp", "exp/base") == 0
    assert list(json.loads(record.read_text())["inputs"]) == [str(tmp_path / "data/train/text")]


def test_a_stage_that_skips_by_its_own_record_still_names_its_inputs(tmp_path, monkeypatch):
    """Another experiment runs the tokenizer stage, whose own record says done: it writes no
    record, and why_rerun notes the one it found in the file run.sh names."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "data/train").mkdir(parents=True)
    text = tmp_path / "data/train/text"
    text.write_text("u1 a b\n")
    tokenizer_stage(tmp_path)
    record = tmp_path / "exp/other/.done/3.tokenizer.record.json"
    record.parent.mkdir(parents=True)
    used = record.with_name("3.tokenizer.used")
    assert run(monkeypatch, "snapshot", str(record), "--exp", "exp/other") == 0
    monkeypatch.setenv(USED_RECORDS_ENV, str(used))
    assert why_rerun(tmp_path / "lang", "tokenizer", {}, [text]) is None  # the stage, skipping
    monkeypatch.delenv(USED_RECORDS_ENV)
    assert run(monkeypatch, "write", str(record), "--exp", "exp/other", "--used", str(used)) == 0
    written = json.loads(record.read_text())
    assert list(written["inputs"]) == [str(text)] and not used.exists()
    assert written["sources"] == [str(tmp_path / "lang/tokenizer.record.json")]


def test_a_command_whose_records_name_no_input_takes_the_earlier_stages(tmp_path, monkeypatch):
    """A command a recipe adds that keeps no stage record (every stage of the toolkit but synth,
    which reads nothing, names its inputs)."""
    monkeypatch.chdir(tmp_path)
    earlier = tmp_path / "exp/base/.done/0.prepare.record.json"
    earlier.parent.mkdir(parents=True)
    earlier.write_text("{}")
    record = tmp_path / "exp/base/.done/7.report.record.json"
    assert run(monkeypatch, "snapshot", str(record)) == 0
    assert run(monkeypatch, "write", str(record), "--after", str(earlier), options="x=1\n") == 0
    assert list(json.loads(record.read_text())["inputs"]) == [str(earlier)]
    assert run(monkeypatch, "check", str(record), options="x=1\n") == 0
    earlier.write_text('{"ran": "again"}')
    assert run(monkeypatch, "check", str(record), options="x=1\n") == 1


def test_a_stage_whose_record_is_gone_is_not_done(tmp_path, monkeypatch, capsys):
    """prepare's records list no outputs (a data dir is the user's to edit) and live in the data
    dir: a data dir removed takes its record with it, and run.sh prepares it again."""
    monkeypatch.chdir(tmp_path)
    corpus = tmp_path / "corpus/sw2001A-trans.text"
    corpus.parent.mkdir()
    corpus.write_text("sw2001A-0001 0.0 1.0 hello\n")
    record = tmp_path / "exp/base/.done/0.prepare.record.json"
    record.parent.mkdir(parents=True)
    assert run(monkeypatch, "snapshot", str(record), "--exp", "exp/base") == 0
    (tmp_path / "data/train").mkdir(parents=True)
    write_record(tmp_path / "data/train", "prepare", "rerun", {}, [corpus], {})
    assert run(monkeypatch, "write", str(record), "--exp", "exp/base") == 0
    assert run(monkeypatch, "check", str(record)) == 0
    capsys.readouterr()
    (tmp_path / "data/train/prepare.record.json").unlink()
    assert run(monkeypatch, "check", str(record)) == 1
    assert capsys.readouterr().out.splitlines() == [f"  record {tmp_path}/data/train/prepare.record.json: missing"]


def test_the_check_starts_without_torch():
    code = (
        "import sys, asr.utils.recipe_record; print(sorted(m for m in ('torch', 'hydra', 'numpy') if m in sys.modules))"
    )
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout == "[]\n"
