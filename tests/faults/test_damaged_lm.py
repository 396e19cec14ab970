"""Issue 31, item 3, for the LM stage's files: a truncated KenLM binary, a swapped ARPA or a
damaged vocabulary is refused by its reader with one line naming it and the stage to re-run
(the stage runner prints an InputError as that line, exit 2); and the stage's own skip rule is
its record: an edited transcript re-trains, an unchanged one does not."""

from __future__ import annotations

from pathlib import Path

import pytest

from asr.config import load_config
from asr.decode.search import lm_path
from asr.lang.graph import grammar_fst
from asr.lm import tools
from asr.lm.build import build_lms
from asr.lm.corpus import read_vocabulary
from asr.utils.errors import InputError

try:
    tools.kenlm_tool("lmplz")
    HAVE_KENLM = True
except InputError:
    HAVE_KENLM = False
pytestmark = pytest.mark.skipif(not HAVE_KENLM, reason="KenLM tools not built (scripts/build_kenlm.sh)")

LINES = ["i like the cat", "the cat likes me", "you like the dog", "it is a dog"]


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    root = tmp_path_factory.mktemp("lm")
    for name, lines in (("train", LINES * 3), ("eval2000", LINES[:1])):
        (root / "data" / name).mkdir(parents=True)
        (root / "data" / name / "text").write_text("".join(f"u{i:02d} {t}\n" for i, t in enumerate(lines)))
    cfg = load_config([f"data.data_dir={root}/data", f"lm.dir={root}/lm", "lm.orders=[2]", "lm.decode_order=2"])
    build_lms(cfg)
    return root, cfg


@pytest.fixture
def lm_copy(built, tmp_path):
    """A private copy of the built LM dir (with its records) to damage."""
    root, cfg = built
    lm_dir = tmp_path / "lm"
    lm_dir.mkdir()
    for path in (root / "lm").iterdir():
        if path.is_file():
            (lm_dir / path.name).write_bytes(path.read_bytes())
    cfg = load_config([f"data.data_dir={root}/data", f"lm.dir={lm_dir}", "lm.orders=[2]", "lm.decode_order=2"])
    return lm_dir, cfg


def one_line(err: pytest.ExceptionInfo, path: Path) -> str:
    message = str(err.value)
    assert "\n" not in message and message.startswith(f"{path}: damaged, truncated or replaced")
    assert message.endswith("re-run the lm stage (python -m asr.lm)")
    return message


def test_a_truncated_kenlm_binary_is_refused_before_decoding(lm_copy):
    lm_dir, cfg = lm_copy
    assert lm_path(cfg) == str(lm_dir / "2gram.bin")
    binary = lm_dir / "2gram.bin"
    binary.write_bytes(binary.read_bytes()[:-100])
    with pytest.raises(InputError) as err:
        lm_path(cfg)
    assert "KenLM binary" in one_line(err, binary)


def test_a_swapped_arpa_of_the_same_size_is_refused_before_the_graph(lm_copy):
    lm_dir, _ = lm_copy
    arpa = lm_dir / "2gram.arpa"
    arpa.write_text(arpa.read_text().replace("cat", "cap"))
    with pytest.raises(InputError) as err:
        grammar_fst(arpa, lang=None)  # refused before the lang dir is looked at
    assert "sha1 differs" in one_line(err, arpa)


def test_a_damaged_vocabulary_is_refused(lm_copy):
    lm_dir, _ = lm_copy
    words = lm_dir / "words.txt"
    words.write_text(words.read_text() + "extra 1\n")
    with pytest.raises(InputError) as err:
        read_vocabulary(words)
    one_line(err, words)


def test_an_edited_transcript_retrains_an_unchanged_one_does_not(lm_copy, tmp_path, caplog):
    lm_dir, _ = lm_copy
    data = tmp_path / "data"
    (data / "train").mkdir(parents=True)
    (data / "train" / "text").write_text("".join(f"u{i:02d} {t}\n" for i, t in enumerate(LINES * 3)))
    cfg = load_config([f"data.data_dir={data}", f"lm.dir={lm_dir}", "lm.orders=[2]", "lm.perplexity_sets=[]"])
    build_lms(cfg)  # the copy's record names the other data dir's text: trains once
    mtime = (lm_dir / "2gram.bin").stat().st_mtime_ns
    build_lms(cfg)
    assert (lm_dir / "2gram.bin").stat().st_mtime_ns == mtime
    (data / "train" / "text").write_text("u00 a new sentence\n" * 4)
    with caplog.at_level("INFO", logger="asr.lm.build"):
        build_lms(cfg)
    assert (lm_dir / "2gram.bin").stat().st_mtime_ns != mtime
    assert f"{data / 'train' / 'text'} changed since the lm stage read it" in caplog.text
