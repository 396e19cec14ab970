"""The training index: the same utterances, tokens and features as reading the files directly,
built once and reused, rebuilt when an input changes, a few bytes per utterance; and the
prefetching reader."""

from __future__ import annotations

import shutil
import time
import tracemalloc
from pathlib import Path

import kaldiio
import numpy as np
import pytest

from asr.features.cmvn import apply, read_stats
from asr.kaldi.table import read_table
from asr.text.tokenizer import Tokenizer, tokenizer_model_path
from asr.train import index as index_module
from asr.train.data import Prefetcher
from asr.train.index import IndexBuilder, IndexSources, TrainingIndex, load_index
from asr.utils.errors import InputError
from tests.fixtures.toy_corpus import toy_config


@pytest.fixture(scope="module")
def toy(toy_corpus, tmp_path_factory) -> tuple[Path, Tokenizer]:
    root = tmp_path_factory.mktemp("index_toy") / "toy"
    shutil.copytree(toy_corpus, root)
    return root, Tokenizer(tokenizer_model_path(toy_config(root).tokenizer))


def sources(root: Path, tokenizer: Tokenizer) -> IndexSources:
    return IndexSources.of(root / "data" / "train", root / "feats" / "toy" / "train", tokenizer.path)


@pytest.mark.parametrize("chunk", [3, index_module.ENCODE_CHUNK])
def test_the_index_holds_what_the_files_say(toy, tmp_path, monkeypatch, chunk):
    """Written in chunks of 3 utterances too (the toy set is smaller than a real chunk)."""
    root, tokenizer = toy
    monkeypatch.setattr(index_module, "ENCODE_CHUNK", chunk)
    shutil.copytree(root / "feats" / "toy" / "train", tmp_path / "train")  # an index of its own
    index = load_index(sources(root, tokenizer), tokenizer, tmp_path / "train", build=True)
    text = read_table(root / "data" / "train" / "text")
    frames = read_table(root / "feats" / "toy" / "train" / "utt2num_frames")
    feats = kaldiio.load_scp(str(root / "feats" / "toy" / "train" / "feats.scp"))
    stats = read_stats(root / "feats" / "toy" / "train" / "cmvn.scp")["global"]
    assert [index.utt(i) for i in range(len(index))] == sorted(text, key=str.encode)
    for i in range(len(index)):
        utt = index.utt(i)
        assert index.frames[i] == int(frames[utt])
        ids = tokenizer.encode(text[utt])
        assert index.token_ids(i).tolist() == ids
        assert index.min_frames[i] == len(ids) + sum(a == b for a, b in zip(ids, ids[1:]))
        np.testing.assert_array_equal(index.features(i), feats[utt])
        np.testing.assert_array_equal(apply(index.features(i), index.cmvn_stats(i)), apply(feats[utt], stats))


def test_built_once_reused_and_rebuilt_when_an_input_changes(toy, tmp_path):
    root, tokenizer = toy
    shutil.copytree(root, tmp_path / "t")
    root = tmp_path / "t"
    set_dir = root / "feats" / "toy" / "train"
    first = load_index(sources(root, tokenizer), tokenizer, set_dir, build=True)
    again = load_index(sources(root, tokenizer), tokenizer, set_dir, build=False)
    assert again is not None and again.dir == first.dir
    text = root / "data" / "train" / "text"
    lines = text.read_text().splitlines()
    time.sleep(0.01)
    text.write_text("\n".join(lines[:-1]) + "\n")  # one transcript fewer
    assert load_index(sources(root, tokenizer), tokenizer, set_dir, build=False) is None  # stale: not used
    rebuilt = load_index(sources(root, tokenizer), tokenizer, set_dir, build=True)
    assert len(rebuilt) == len(first) - 1 and rebuilt.meta["without_text"] == 1
    assert [p.name for p in set_dir.glob("index.*")] == [rebuilt.dir.name]  # the old one is gone


def test_a_few_bytes_per_utterance(toy):
    root, tokenizer = toy
    index = load_index(sources(root, tokenizer), tokenizer, root / "feats" / "toy" / "train", build=True)
    n = len(index)
    stored = sum(
        np.asarray(getattr(index, name)).nbytes
        for name in (
            "utt_bytes",
            "utt_offsets",
            "frames",
            "tokens",
            "token_offsets",
            "min_frames",
            "feat_file",
            "feat_offset",
            "cmvn_of",
        )
    )
    # The layout: the id's bytes, 4 per token, 8 + 4 + 4 + 8 + 4 + 4 + 8 for the per-utterance numbers.
    id_bytes, tokens = index.utt_offsets[-1] / n, index.token_offsets[-1] / n
    assert stored / n <= id_bytes + 4 * tokens + 40 + 16 / n


def fake_set(directory: Path, utterances: int) -> IndexSources:
    """A data dir and feature set of `utterances` (tables only: the index never reads a matrix)."""
    directory.mkdir()
    words = ["yeah", "i", "think", "so", "uh-huh", "right", "we", "were", "talking", "about"]
    tables = {name: [] for name in ("text", "utt2spk", "feats.scp", "utt2num_frames", "cmvn.scp")}
    for i in range(utterances):
        utt = f"sw{i // 100:05d}-A_{i % 100:06d}"
        tables["text"].append(f"{utt} {' '.join(words[(i + k) % len(words)] for k in range(12))}")
        tables["utt2spk"].append(f"{utt} sw{i // 100:05d}-A")
        tables["feats.scp"].append(f"{utt} {directory}/feats.ark:{1000 * i + 17}")
        tables["utt2num_frames"].append(f"{utt} {300 + i % 50}")
        tables["cmvn.scp"].append(f"{utt} {directory}/cmvn.ark:{100 * i + 9}")
    for name, lines in tables.items():
        (directory / name).write_text("\n".join(lines) + "\n")
    (directory / "cmvn_type").write_text("utterance\n")
    return IndexSources(
        *(directory / name for name in ("text", "utt2spk", "feats.scp", "utt2num_frames", "cmvn.scp", "cmvn_type")),
        Path(),
    )


def test_building_holds_a_chunk_not_the_set(toy, tmp_path, monkeypatch):
    """SWB-2000's first learner builds an index of 2.2 million utterances: the arrays go to their
    files a chunk at a time (all of them held until the end took 0.8 KB per utterance). Chunks
    of 500 here, so that both sizes fill several."""
    _, tokenizer = toy
    monkeypatch.setattr(index_module, "ENCODE_CHUNK", 500)
    peaks = {}
    for n in (2_000, 20_000):
        source = fake_set(tmp_path / f"set{n}", n)
        tracemalloc.start()
        try:
            built = IndexBuilder(source, tokenizer, tmp_path / f"set{n}")
            built.build()
            peaks[n] = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        assert built.count == n
    index = TrainingIndex.__new__(TrainingIndex)  # the arrays as a learner maps them
    for name in ("frames", "feat_offset", "cmvn_offset", "token_offsets"):
        setattr(index, name, np.load(tmp_path / "set20000" / f"{name}.npy", mmap_mode="r"))
    assert index.frames[19_999] == 300 + 19_999 % 50 and index.feat_offset[19_999] == 1000 * 19_999 + 17
    assert index.cmvn_offset[12_345] == 100 * 12_345 + 9 and len(index.token_offsets) == 20_001
    per_utterance = (peaks[20_000] - peaks[2_000]) / 18_000
    assert per_utterance < 60, f"{per_utterance:.0f} B per utterance ({peaks})"


def test_unsorted_input_is_an_error_naming_the_line(toy, tmp_path):
    root, tokenizer = toy
    shutil.copytree(root, tmp_path / "t")
    scp = tmp_path / "t" / "feats" / "toy" / "train" / "feats.scp"
    lines = scp.read_text().splitlines()
    scp.write_text("\n".join([lines[1], lines[0], *lines[2:]]) + "\n")
    with pytest.raises(InputError, match=r"feats.scp:2: key .* out of order .* sorted by key"):
        load_index(sources(tmp_path / "t", tokenizer), tokenizer, scp.parent, build=True)


def test_prefetching_keeps_order_and_hands_errors_over():
    assert list(Prefetcher(range(10), depth=3)) == list(range(10))

    def failing():
        yield 1
        raise InputError("feats.scp: cannot read features of 'u2'")

    items = Prefetcher(failing(), depth=2)
    assert next(items) == 1
    with pytest.raises(InputError, match="cannot read features of 'u2'"):
        next(items)
    endless = Prefetcher(iter(int, 1), depth=2)  # never ends by itself
    assert next(endless) == 0
    endless.close()
    assert not endless.thread.is_alive()


def test_prefetching_reads_at_most_depth_batches_ahead():
    pulled = []

    def batches():
        for i in range(20):
            pulled.append(i)
            yield i

    items = Prefetcher(batches(), depth=2)
    for taken in range(5):
        assert next(items) == taken
        deadline = time.monotonic() + 5
        while len(pulled) < taken + 3 and time.monotonic() < deadline:
            time.sleep(0.001)
        time.sleep(0.05)  # room for a batch too many
        assert len(pulled) == taken + 3  # the one taken and 2 ahead
    items.close()
