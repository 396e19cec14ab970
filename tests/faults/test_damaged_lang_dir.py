"""Issue 31, item 3, for the lang dir: a truncated L.fst or a swapped table is refused when the
lang dir is loaded, in one line naming the file and the lang stage (exit 2 from a stage), and
the lang stage re-runs exactly when its dictionary or silence probability changes."""

from __future__ import annotations

import shutil

import pytest

from asr.lang.langdir import Lang
from asr.lang.prepare import build_lang_dir
from asr.utils.errors import InputError


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("lang")
    dictionary = tmp / "sw-ms98-dict.text"
    dictionary.write_text("#\nab  a b\nba  b a\n", encoding="utf-8")
    build_lang_dir(dictionary, tmp / "lang", sil_prob=0.5)
    return dictionary, tmp / "lang"


@pytest.fixture
def lang_copy(built, tmp_path):
    shutil.copytree(built[1], tmp_path / "lang")
    return tmp_path / "lang"


def refused(lang_dir, damaged) -> str:
    with pytest.raises(InputError) as err:
        Lang.load(lang_dir)
    message = str(err.value)
    assert message.startswith(f"{damaged}: damaged, truncated or replaced lang dir file (") and "\n" not in message
    assert message.endswith("re-run the lang stage (python -m asr.lang)")
    return message


def test_a_truncated_lexicon_fst_is_refused(lang_copy):
    Lang.load(lang_copy)
    fst = lang_copy / "L_disambig.fst"
    fst.write_bytes(fst.read_bytes()[:-8])
    refused(lang_copy, fst)


def test_a_swapped_word_table_is_refused(lang_copy):
    words = lang_copy / "words.txt"
    words.write_text(words.read_text().replace("ab ", "ba ", 1).replace("ba 4", "ab 4"))  # same size, ids swapped
    assert "sha1 differs" in refused(lang_copy, words)


def test_the_stage_reruns_on_an_edited_dictionary_or_option_only(built, tmp_path, caplog):
    dictionary, _ = built
    own = tmp_path / "dict.text"
    own.write_text(dictionary.read_text(encoding="utf-8"), encoding="utf-8")
    lang_dir = tmp_path / "lang"
    build_lang_dir(own, lang_dir, sil_prob=0.5)
    stamp = (lang_dir / "L.fst").stat().st_mtime_ns
    build_lang_dir(own, lang_dir, sil_prob=0.5)
    assert (lang_dir / "L.fst").stat().st_mtime_ns == stamp
    with caplog.at_level("INFO", logger="asr.lang"):
        build_lang_dir(own, lang_dir, sil_prob=0.25)
    assert "sil_prob: 0.5 -> 0.25" in caplog.text
    own.write_text(own.read_text(encoding="utf-8") + "aa  a a\n", encoding="utf-8")
    build_lang_dir(own, lang_dir, sil_prob=0.25)
    assert "aa" in Lang.load(lang_dir).words
