"""The decode stage's record (asr/decode/record.py): a set decoded with the same options from
unchanged inputs is skipped; an option that changes the output, an edited input or a missing
record decodes it again, and the log says why."""

from __future__ import annotations

import json
import logging

import pytest
import torch

from asr.decode.stage import decode
from asr.utils.threads import torch_threads
from tests.fixtures.toy_corpus import make_toy_experiment, save_untrained_checkpoint, toy_config

torch.set_num_threads(1)

SETS = ["decode.sets=[eval,dev]"]


@pytest.fixture
def toy(tmp_path):
    cfg = make_toy_experiment(tmp_path, num_train=12, num_dev=4, extra=SETS)
    save_untrained_checkpoint(cfg)
    return tmp_path, cfg


def decoded(cfg, caplog) -> list[str]:
    """The sets this decode run decoded (not skipped by their records)."""
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="asr.decode.stage"):
        decode(cfg)
    return [name for name in ("eval", "dev") if f"{name}: decoding (" in caplog.text]


def test_decode_skips_what_its_records_match_and_reruns_what_changed(toy, caplog):
    root, cfg = toy
    with torch_threads(1):
        assert decoded(cfg, caplog) == ["eval", "dev"]
        assert torch.get_num_threads() == 1  # the model ran on decode.threads=2; the count is put back
    record = json.loads((root / "exp/decode_eval/decode.record.json").read_text())
    assert set(record["outputs"]) == {"hyp.txt", "hyp.ctm"}
    for name in ("exp/checkpoints/last.pt", "lang/bpe40.model", "data/eval/utt2spk", "data/eval/segments"):
        assert str(root / name) in record["inputs"], name
    hyp = root / "exp/decode_eval/hyp.txt"
    written = hyp.stat().st_mtime_ns

    assert decoded(cfg, caplog) == [] and hyp.stat().st_mtime_ns == written
    assert f"eval: decoded already ({root}/exp/decode_eval/decode.record.json), skipping" in caplog.text
    # where and how fast it runs is no option of the result
    assert decoded(toy_config(root, [*SETS, "decode.threads=1", "decode.jobs=1"]), caplog) == []

    cfg = toy_config(root, [*SETS, "decode.batch_size=2"])
    assert decoded(cfg, caplog) == ["eval", "dev"]
    assert "decode options changed" in caplog.text and "batch_size: 32 -> 2" in caplog.text

    save_untrained_checkpoint(cfg, seed=1)  # another model in the same place
    assert decoded(cfg, caplog) == ["eval", "dev"]
    assert f"{root}/exp/checkpoints/last.pt changed since the decode stage read it" in caplog.text

    segments = root / "data/dev/segments"  # a segment that starts later: its words' times change
    lines = segments.read_text().splitlines()
    utt, recording, start, end = lines[0].split()
    lines[0] = f"{utt} {recording} {float(start) + 0.01:.2f} {end}"
    segments.write_text("\n".join(lines) + "\n")
    assert decoded(cfg, caplog) == ["dev"]

    (root / "exp/decode_eval/decode.record.json").unlink()
    assert decoded(cfg, caplog) == ["eval"] and "no record of a finished decode stage" in caplog.text
    assert decoded(cfg, caplog) == []
