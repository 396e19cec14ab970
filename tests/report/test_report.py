"""`python -m asr.report`: the comparison table and plot from experiment directories."""

from __future__ import annotations

import json

import yaml

from asr.report.__main__ import main
from asr.report.experiments import read_experiments


def make_exp(root, name, wer, epochs=None, seconds=None, hub5=None, decode_kind="greedy"):
    exp = root / name
    decode = exp / "decode_eval2000"
    decode.mkdir(parents=True)
    (decode / "wer.json").write_text(
        json.dumps({k: {"wer": v, "sub": 0, "del": 0, "ins": 0, "words": 1, "sentences": 1} for k, v in wer.items()})
    )
    if hub5:
        (decode / "hub5").mkdir()
        (decode / "hub5" / "scorer.txt").write_text(hub5 + "\n")
    if epochs is not None:
        (exp / "train_log.csv").write_text(
            f"step,epoch,train_loss,dev_loss,lr,elapsed_s\n10,1,2.0,,0.1,5.0\n20,{epochs},1.0,0.9,0.1,{seconds}\n"
        )
    (exp / "train_config.yaml").write_text(
        yaml.safe_dump(
            {
                "model": {"name": "blstm", "num_layers": 2, "hidden_size": 64},
                "tokenizer": {"model_type": "bpe", "vocab_size": 300},
                "distributed": {"algorithm": "adpsgd"},
            }
        )
    )
    (exp / ".hydra" / "score").mkdir(parents=True)
    (exp / ".hydra" / "score" / "config.yaml").write_text(
        yaml.safe_dump({"score": {"kind": "hub5" if hub5 else "jiwer"}})
    )
    (exp / ".hydra" / "decode").mkdir(parents=True)
    (exp / ".hydra" / "decode" / "config.yaml").write_text(
        yaml.safe_dump({"decode": {"kind": decode_kind, "lm_weight": 0.5, "word_score": 1.0, "use_tuned": False}})
    )
    return exp


def test_table_plot_and_skipped_dirs(tmp_path, capsys):
    a = make_exp(
        tmp_path,
        "a",
        {"swb": 10.0, "callhome": 20.0, "total": 15.0},
        epochs=4,
        seconds=7200.0,
        hub5="sctk",
        decode_kind="beam_lm",
    )
    b = make_exp(tmp_path, "b", {"total": 30.5}, epochs=2, seconds=90.0)
    (tmp_path / "untrained").mkdir()
    out = tmp_path / "cmp"
    assert main([str(a), str(b), str(tmp_path / "untrained"), "--out", str(out)]) == 0
    table = (tmp_path / "cmp.md").read_text().splitlines()
    assert table[0].startswith("| Experiment | Decode dir | Config | Epochs | Training time")
    assert table[2] == (
        "| a | decode_eval2000 | blstm 2x64, bpe300, adpsgd | 4 | 2.00 h | beam+LM (0.5, 1.0) | hub5/sctk"
        " | 10.00 | 20.00 | 15.00 |"
    )
    assert (
        table[3] == "| b | decode_eval2000 | blstm 2x64, bpe300, adpsgd | 2 | 1.5 min | greedy | jiwer |  |  | 30.50 |"
    )
    rows = json.loads((tmp_path / "cmp.json").read_text())
    assert [(r["name"], r["wer"].get("total"), r["train_seconds"]) for r in rows] == [
        ("a", 15.0, 7200.0),
        ("b", 30.5, 90.0),
    ]
    assert len(table) == 4  # 'untrained' has no wer.json
    png = (tmp_path / "cmp.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 5000
    assert "| a |" in capsys.readouterr().out


def test_nothing_scored_is_an_error(tmp_path):
    (tmp_path / "x").mkdir()
    assert main([str(tmp_path / "x"), "--out", str(tmp_path / "r")]) == 2
    assert read_experiments(tmp_path / "x") == []


def scored(decode_dir, total, options=None):
    decode_dir.mkdir(parents=True, exist_ok=True)
    (decode_dir / "wer.json").write_text(json.dumps({"total": {"wer": total}}))
    if options is not None:
        (decode_dir / "decode.record.json").write_text(
            json.dumps({"stage": "decode", "options": options, "inputs": {}, "outputs": {}})
        )


def test_every_decode_dir_of_the_set_is_a_row_labelled_by_its_own_record(tmp_path):
    """The recipe decodes beam+LM into decode_<set>, then greedy into decode_<set>_greedy: the
    experiment's last decode config is the greedy one, so it must not label the beam+LM row."""
    exp = make_exp(tmp_path, "demo", {"total": 1.6}, epochs=3, seconds=400.0, decode_kind="greedy")
    (exp / ".hydra" / "decode" / "config.yaml").write_text(
        yaml.safe_dump({"decode": {"kind": "greedy", "dir_suffix": "_greedy"}})
    )
    (exp / "lm_tuning.json").write_text(json.dumps({"best": {"lm_weight": 0.5, "word_score": 2.0}}))
    scored(exp / "decode_eval2000", 1.6, {"kind": "beam_lm", "checkpoint": "last", "use_tuned": True})
    scored(exp / "decode_eval2000_greedy", 14.6)  # before records: the last config wrote it
    scored(exp / "decode_eval2000_avg3", 13.9, {"kind": "greedy", "checkpoint": "avg-last3"})
    scored(exp / "decode_eval2000_old", 20.0)  # no record, not the last config's: unknown
    scored(exp / "decode_train_dev", 1.0, {"kind": "greedy", "checkpoint": "last"})  # another set
    (exp / "train_config.yaml").write_text(
        yaml.safe_dump({"model": {"name": "blstm", "num_layers": 3, "hidden_size": 8}})
    )
    (exp / ".hydra" / "train").mkdir()
    (exp / ".hydra" / "train" / "config.yaml").write_text(yaml.safe_dump({"distributed": {"algorithm": "ssgd"}}))
    rows = read_experiments(exp, "eval2000")
    assert {r.config for r in rows} == {"blstm 3x8, ssgd"}  # the algorithm from the training's resolved config
    assert [(r.decode_dir, r.decoding, r.wer["total"]) for r in rows] == [
        ("decode_eval2000", "beam+LM (0.5, 2.0 tuned)", 1.6),
        ("decode_eval2000_avg3", "greedy, avg-last3", 13.9),
        ("decode_eval2000_greedy", "greedy", 14.6),
        ("decode_eval2000_old", "", 20.0),
    ]


def counts(wer: float, words: int = 100) -> dict:
    errors = round(wer * words / 100)
    return {"wer": wer, "sub": errors - 2, "del": 1, "ins": 1, "words": words, "sentences": 9}


def test_best_prints_each_experiments_lowest_total_as_kaldis_wer_lines(tmp_path, capsys):
    exp = tmp_path / "e"
    for suffix, total in (("", 12.0), ("_greedy", 20.0), ("_avg", 11.0)):
        decode = exp / f"decode_eval2000{suffix}"
        decode.mkdir(parents=True)
        report = {"swb": counts(total - 3), "callhome": counts(total + 3), "total": counts(total)}
        (decode / "wer.json").write_text(json.dumps(report))
    (tmp_path / "empty").mkdir()
    assert main(["--best", str(exp), str(tmp_path / "empty"), "--out", str(tmp_path / "never")]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines == [
        f"%WER 11.00 [ 11 / 100, 1 ins, 1 del, 9 sub ] {exp}/decode_eval2000_avg total",
        f"%WER 8.00 [ 8 / 100, 1 ins, 1 del, 6 sub ] {exp}/decode_eval2000_avg swb",
        f"%WER 14.00 [ 14 / 100, 1 ins, 1 del, 12 sub ] {exp}/decode_eval2000_avg callhome",
    ]
    assert not list(tmp_path.glob("never*"))  # --best writes nothing
    assert main(["--best", str(tmp_path / "empty")]) == 2


def test_the_plot_reads_in_a_unit_of_the_times_and_labels_each_decoding(tmp_path):
    from asr.report.render import point_label, time_unit

    assert time_unit([0.7, 1.2]) == ("seconds", 1.0)
    assert time_unit([30.0, 600.0]) == ("minutes", 60.0)
    assert time_unit([9000.0]) == ("hours", 3600.0)
    exp = make_exp(tmp_path, "t", {"total": 50.0}, epochs=1, seconds=0.7, decode_kind="beam_lm")
    scored(exp / "decode_eval2000_greedy", 60.0, {"kind": "greedy"})
    labels = {point_label(e) for e in read_experiments(exp)}
    assert len(labels) == 2 and any("greedy" in label for label in labels)
    assert main([str(exp), "--out", str(tmp_path / "r")]) == 0
    assert "| 0.7 s |" in (tmp_path / "r.md").read_text()
