"""The stage entry points end to end on the toy corpus: tokenizer -> train -> decode."""

import os
import subprocess
import sys

import jiwer
import pytest

from asr.config import load_config
from asr.data.datadir import read_data_dir
from asr.decode.stage import decode
from asr.kaldi.table import read_table
from asr.utils.errors import InputError
from tests.fixtures.toy_corpus import toy_overrides, write_toy_corpus

pytestmark = pytest.mark.slow


def run_stage(module, root, extra=()):
    env = dict(os.environ, OMP_NUM_THREADS="1")
    cmd = [sys.executable, "-m", module, *toy_overrides(root, list(extra))]
    result = subprocess.run(cmd, cwd=root, env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]


def test_tokenizer_train_decode_cli(tmp_path):
    root = tmp_path / "toy"
    write_toy_corpus(root)
    training = ["train.epochs=10", "train.lr=0.02", "model.dropout=0.0"]
    run_stage("asr.text", root)
    assert (root / "lang" / "bpe40.model").is_file() and (root / "lang" / "tokens.txt").is_file()
    run_stage("asr.train", root, training)
    assert (root / "exp" / "checkpoints" / "last.pt").is_file()
    run_stage("asr.decode", root, ["decode.sets=[eval,dev]"])

    for set_name in ("eval", "dev"):
        data = read_data_dir(root / "data" / set_name)
        out = root / "exp" / f"decode_{set_name}"
        hyp_lines = (out / "hyp.txt").read_text().splitlines()
        assert [line.split()[0] for line in hyp_lines] == data.utts  # every utterance, sorted
        hyp = read_table(out / "hyp.txt", allow_empty_value=True)
        wer = jiwer.wer([data.text[u] for u in data.utts], [hyp[u] or "<empty>" for u in data.utts])
        assert wer <= 0.1, (set_name, wer)  # the toy task is learnt (WER 0 when written)

        ctm = [line.split() for line in (out / "hyp.ctm").read_text().splitlines()]
        assert len(ctm) == sum(len(h.split()) for h in hyp.values())
        keys = [(f, c, float(s)) for f, c, s, *_ in ctm]
        assert keys == sorted(keys)
        # Every word lies inside a segment of its recording (file/channel from reco2file_and_channel).
        spans = {}
        for utt, seg in data.segments.items():
            spans.setdefault(data.reco2file_and_channel[seg.recording], []).append((seg.start, seg.end))
        for file, channel, start, dur, word, conf in ctm:
            start, end = float(start), float(start) + float(dur)
            assert any(s - 1e-6 <= start and end <= e + 0.03 for s, e in spans[(file, channel)]), (file, start)
            assert 0 < float(conf) <= 1

    # The LM path: LM stage, LM-weight sweep on dev, beam search with the tuned values.
    from asr.lm.tools import kenlm_tool

    try:
        kenlm_tool("lmplz")
    except InputError:
        pytest.skip("KenLM tools not built (make install runs scripts/build_kenlm.sh)")
    greedy_eval = (root / "exp" / "decode_eval" / "hyp.txt").read_text()
    lm = ["lm.orders=[2]", "lm.decode_order=2", "lm.perplexity_sets=[eval]"]
    beam = ["decode=beam_lm", "decode.jobs=2", "decode.tune_lm_weights=[0.2,1.0]", "decode.tune_word_scores=[0.0]", *lm]
    run_stage("asr.lm", root, lm)
    assert (root / "lang" / "lm" / "2gram.bin").is_file() and (root / "lang" / "lm" / "perplexity.json").is_file()
    run_stage("asr.tune", root, beam)
    tuning = __import__("json").loads((root / "exp" / "lm_tuning.json").read_text())
    assert tuning["set"] == "dev" and len(tuning["grid"]) == 2 and tuning["best"] in tuning["grid"]
    run_stage("asr.decode", root, beam)
    data = read_data_dir(root / "data" / "eval")
    hyp = read_table(root / "exp" / "decode_eval" / "hyp.txt", allow_empty_value=True)
    greedy = read_table_text(greedy_eval)
    refs = [data.text[u] for u in data.utts]
    assert jiwer.wer(refs, [hyp[u] or "<empty>" for u in data.utts]) <= jiwer.wer(
        refs, [greedy[u] or "<empty>" for u in data.utts]
    )
    ctm = (root / "exp" / "decode_eval" / "hyp.ctm").read_text().splitlines()
    assert len(ctm) == sum(len(h.split()) for h in hyp.values())

    # decode.checkpoint=best works; a damaged checkpoint is a clean error naming the file.
    best = decode(load_config(toy_overrides(root, ["decode.checkpoint=best"])))
    assert best == [root / "exp" / "decode_eval"]
    bad = root / "exp" / "bad.pt"
    bad.write_bytes(b"not a checkpoint")
    with pytest.raises(InputError, match="bad.pt: unreadable checkpoint"):
        decode(load_config(toy_overrides(root, [f"decode.checkpoint={bad}"])))


def read_table_text(text: str) -> dict[str, str]:
    return {line.split(maxsplit=1)[0]: (line.split(maxsplit=1) + [""])[1] for line in text.splitlines() if line.strip()}
