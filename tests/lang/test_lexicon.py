"""The MS98 dictionary reader and the lang dir: Kaldi's word mapping and silence words, errors
with file:line, and L.fst against the paths a hand-made two-word lexicon must have."""

from __future__ import annotations

import math
import subprocess
import sys
from pathlib import Path

import kaldi_hmm_gmm  # noqa: F401  (before kaldifst: with kaldifst 1.8 the other order deadlocks)
import kaldifst
import pytest

from asr.lang.langdir import Lang
from asr.lang.lexicon import SILENCE_WORDS, read_ms98_dictionary
from asr.lang.prepare import build_lang_dir
from asr.utils.errors import InputError

REPO = Path(__file__).resolve().parents[2]

DICTIONARY = """#
# a hand-made MS98-style dictionary
#
ab[out]-  a b
them_1  E m
them  D E m
about  a b aU t
[laughter-yes]  j E s
yes  j E s
{Ahem}  @ h E m
"""


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "sw-ms98-dict.text"
    path.write_text(text, encoding="utf-8")
    return path


def test_reader_maps_words_as_kaldi_and_adds_silence_words(tmp_path):
    lexicon = read_ms98_dictionary(write(tmp_path, DICTIONARY))
    entries = set(lexicon.entries)
    assert ("ab-", ("a", "b")) in entries  # partial word as swbd1_map_words.pl writes it
    assert {("them", ("E", "m")), ("them", ("D", "E", "m"))} <= entries  # them_1 is another them
    assert ("ahem", ("@", "h", "E", "m")) in entries  # braces gone, lower case, phones not lowered
    assert [e for e in lexicon.entries if e[0] == "yes"] == [("yes", ("j", "E", "s"))]  # kept once
    assert {(w, (p,)) for w, p in SILENCE_WORDS.items()} <= entries
    assert SILENCE_WORDS == {
        "[silence]": "sil",
        "[noise]": "nsn",
        "[laughter]": "lau",
        "[vocalized-noise]": "spn",
        "<unk>": "spn",
    }
    assert lexicon.words == sorted(lexicon.words, key=str.encode)
    assert lexicon.nonsilence_phones == ["@", "D", "E", "a", "aU", "b", "h", "j", "m", "s", "t"]


@pytest.mark.parametrize(
    "line, message",
    [("lonely\n", "sw-ms98-dict.text:5: expected 'word phone ...'"), ("word #1\n", "sw-ms98-dict.text:5: '#1'")],
)
def test_bad_lines_name_file_and_line(tmp_path, line, message):
    with pytest.raises(InputError, match=message):
        read_ms98_dictionary(write(tmp_path, "#\n# header\n#\nyes  j E s\n" + line))


def test_missing_or_empty_dictionary_is_an_input_error(tmp_path):
    with pytest.raises(InputError, match="not found"):
        read_ms98_dictionary(tmp_path / "none.text")
    with pytest.raises(InputError, match="no pronunciations"):
        read_ms98_dictionary(write(tmp_path, "# only a header\n"))


# ---- L.fst -------------------------------------------------------------------------------


def paths(
    fst: kaldifst.StdVectorFst, max_arcs: int, words: set[int], max_words: int = 2
) -> dict[tuple[tuple[int, ...], tuple[int, ...]], float]:
    """(non-epsilon input labels, non-epsilon output labels) -> lowest cost, over all successful
    paths of at most max_arcs arcs with at most max_words words, all among `words`."""
    found: dict = {}
    stack = [(fst.start, (), (), 0.0, 0)]
    while stack:
        state, ins, outs, cost, depth = stack.pop()
        final = fst.final(state).value
        if final != math.inf:
            key = (ins, outs)
            found[key] = min(found.get(key, math.inf), cost + final)
        if depth == max_arcs:
            continue
        for arc in kaldifst.ArcIterator(fst, state):
            if arc.olabel and (arc.olabel not in words or len(outs) == max_words):
                continue
            stack.append(
                (
                    arc.nextstate,
                    ins + ((arc.ilabel,) if arc.ilabel else ()),
                    outs + ((arc.olabel,) if arc.olabel else ()),
                    cost + arc.weight.value,
                    depth + 1,
                )
            )
    return found


@pytest.fixture(scope="module")
def two_words(tmp_path_factory) -> Lang:
    tmp = tmp_path_factory.mktemp("lang")
    dictionary = write(tmp, "#\nab  a b\nb  b\n")
    build_lang_dir(dictionary, tmp / "lang", sil_prob=0.25)
    return Lang.load(tmp / "lang")


def expected_paths(lang: Lang, words: list[tuple[str, tuple[str, ...]]], sil_prob: float) -> dict:
    """Every word sequence of one or two words with silence or not before each word and after
    the last: its phones, words and cost (-log of the silence choices)."""
    sil = lang.phones["sil"]
    out = {}
    sequences = [[w] for w in words] + [[w, v] for w in words for v in words]
    for sequence in sequences:
        for choices in range(2 ** (len(sequence) + 1)):
            silent = [(choices >> i) & 1 for i in range(len(sequence) + 1)]
            ins: tuple[int, ...] = (sil,) if silent[0] else ()
            for (word, pron), after in zip(sequence, silent[1:]):
                ins += tuple(lang.phones[p] for p in pron) + ((sil,) if after else ())
            outs = tuple(lang.words[word] for word, _ in sequence)
            cost = sum(-math.log(sil_prob) if s else -math.log(1 - sil_prob) for s in silent)
            out[(ins, outs)] = min(out.get((ins, outs), math.inf), cost)
    return out


def test_lexicon_fst_has_exactly_the_paths_of_the_lexicon(two_words):
    lexicon = [("ab", ("a", "b")), ("b", ("b",))]
    # Up to two of the lexicon's own words (the silence and noise words stay out of the check).
    found = paths(two_words.lexicon_fst(), max_arcs=10, words={two_words.words["ab"], two_words.words["b"]})
    own = {key: cost for key, cost in found.items() if key[1]}
    expected = expected_paths(two_words, lexicon, 0.25)
    assert set(own) >= set(expected)
    assert {k: pytest.approx(v, abs=1e-4) for k, v in expected.items()} == {k: own[k] for k in expected}
    assert set(own) - set(expected) == set()  # nothing else: no path drops or invents a phone


def test_lexicon_fst_with_disambiguation_symbols(two_words):
    # The silence disambiguation symbol follows every sil, and #0 loops for G's backoff arcs.
    names = two_words.phone_names
    word_zero = two_words.words["#0"]
    words = {two_words.words["ab"], two_words.words["b"], word_zero}
    found = paths(two_words.lexicon_fst(disambig=True), max_arcs=8, words=words)
    assert any(outs == (word_zero,) for _, outs in found)
    last = names[max(two_words.disambig_phones)]
    for ins, _ in found:
        labels = [names[i] for i in ins]
        for i, label in enumerate(labels):
            if label == "sil":
                assert labels[i + 1] == last, labels


def test_lang_dir_files_and_tables(two_words):
    lang = two_words
    phones = (lang.dir / "phones.txt").read_text().split()
    assert phones[:10] == ["<eps>", "0", "sil", "1", "spn", "2", "nsn", "3", "lau", "4"]
    # #1 and #2 tell apart <unk> and [vocalized-noise] (both spn), #3 follows the optional silence
    assert [p for p in phones[::2] if p.startswith("#")] == ["#0", "#1", "#2", "#3"]
    words = (lang.dir / "words.txt").read_text().split()[::2]
    assert words[0] == "<eps>" and words[-3:] == ["#0", "<s>", "</s>"]
    assert words[1:-3] == sorted(words[1:-3], key=str.encode) and {"ab", "b", "<unk>"} <= set(words)
    assert lang.oov == lang.words["<unk>"] and lang.optional_silence == lang.phones["sil"]
    assert lang.silence_phones == [1, 2, 3, 4]
    assert lang.word_ids(["b", "zzz"]) == [lang.words["b"], lang.oov]
    topo = lang.topology()
    assert topo.num_pdf_classes(lang.phones["sil"]) == 5 and topo.num_pdf_classes(lang.phones["a"]) == 3
    roots = (lang.dir / "phones/roots.txt").read_text().splitlines()
    assert roots[0] == "shared split sil" and len(roots) == len(lang.silence_phones + lang.nonsilence_phones)


def symbols(path) -> dict[str, int]:
    return {s: int(i) for s, i in (line.split() for line in path.read_text().splitlines())}


def test_phones_dir_has_what_kaldis_validate_lang_checks(two_words):
    """validate_lang.pl's file checks: each list as .txt, .int and .csl that agree through
    phones.txt; roots and sets as .txt and .int; non-empty extra questions; silence and
    nonsilence and disambig partitioning phones.txt; the #0 files mkgraph.sh reads."""
    phones_dir = two_words.dir / "phones"
    ids = symbols(two_words.dir / "phones.txt")
    lists = {}
    for name in ("context_indep", "disambig", "nonsilence", "silence", "optional_silence"):
        names = (phones_dir / f"{name}.txt").read_text().split()
        ints = [int(i) for i in (phones_dir / f"{name}.int").read_text().split()]
        assert ints == [ids[p] for p in names], name
        assert (phones_dir / f"{name}.csl").read_text().strip() == ":".join(map(str, ints)), name
        lists[name] = names
    for name, skip in (("roots", 2), ("sets", 0), ("extra_questions", 0)):
        txt = [line.split()[skip:] for line in (phones_dir / f"{name}.txt").read_text().splitlines()]
        ints = [line.split()[skip:] for line in (phones_dir / f"{name}.int").read_text().splitlines()]
        assert txt and [[str(ids[p]) for p in line] for line in txt] == ints, name
    assert lists["context_indep"] == lists["silence"] and lists["optional_silence"] == ["sil"]
    parts = [set(lists[n]) for n in ("silence", "nonsilence", "disambig")]
    assert sum(map(len, parts)) == len(set().union(*parts)) == len(ids) - 1  # all but <eps>, once each
    words = symbols(two_words.dir / "words.txt")
    assert (phones_dir / "wdisambig.txt").read_text().split() == ["#0"]
    assert int((phones_dir / "wdisambig_phones.int").read_text()) == ids["#0"]
    assert int((phones_dir / "wdisambig_words.int").read_text()) == words["#0"]


def test_incomplete_lang_dir_is_an_input_error(two_words, tmp_path):
    with pytest.raises(InputError, match="L.fst is missing"):
        (tmp_path / "phones").mkdir()
        for name in ("phones.txt", "words.txt", "topo"):
            (tmp_path / name).write_text((two_words.dir / name).read_text())
        Lang.load(tmp_path)


def test_stage_skips_a_lang_dir_made_from_the_same_dictionary(tmp_path):
    dictionary = write(tmp_path, "#\nab  a b\n")
    command = [sys.executable, "-m", "asr.lang", f"lang.dictionary={dictionary}", f"lang.dir={tmp_path / 'lang'}"]
    command.append(f"exp_dir={tmp_path / 'exp'}")
    env = {"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"}
    first = subprocess.run(command, capture_output=True, text=True, cwd=tmp_path, env=env, timeout=120)
    assert first.returncode == 0, first.stderr[-2000:]
    stamp = (tmp_path / "lang" / "L.fst").stat().st_mtime_ns
    again = subprocess.run(command, capture_output=True, text=True, cwd=tmp_path, env=env, timeout=120)
    assert again.returncode == 0 and "keeping it" in again.stderr + again.stdout
    assert (tmp_path / "lang" / "L.fst").stat().st_mtime_ns == stamp
    bad = subprocess.run(
        command[:3] + [f"lang.dictionary={tmp_path}/none"] + command[4:],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=env,
        timeout=120,
    )
    assert bad.returncode == 2 and "not found" in bad.stderr
