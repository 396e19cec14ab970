"""Write a Kaldi lang dir from a lexicon, as Kaldi's utils/prepare_lang.sh does (without
word-position-dependent phones): the symbol tables, the HMM topology, L.fst and
L_disambig.fst, and the phone lists under phones/ (every file prepare_lang.sh writes there and
validate_lang.pl checks, so Kaldi's own scripts take the dir as it is).

phones.txt numbers `<eps>`, the silence phones (sil first), the other phones (sorted), then
the disambiguation symbols #0 (G's backoff) .. #K, where #1 .. #K-1 tell apart homophones
and prefixes in the lexicon and #K follows the optional silence in L_disambig.
"""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path

import kaldi_hmm_gmm  # noqa: F401  (before kaldifst: with kaldifst 1.8 the other order deadlocks)

from asr.lang.lexicon import OOV_WORD, OPTIONAL_SILENCE, SILENCE_PHONES, Lexicon, read_ms98_dictionary
from asr.lang.lexicon_fst import add_lex_disambig, lexicon_fst
from asr.utils.atomic import atomic_dir
from asr.utils.record import outputs_of, why_rerun, write_record

log = logging.getLogger("asr.lang")

SIL_PROB = 0.5  # prepare_lang.sh's default probability of silence between words
NONSILENCE_STATES = 3
SILENCE_STATES = 5
WORD_DISAMBIG = "#0"


def phone_symbols(lexicon: Lexicon, num_disambig: int) -> list[str]:
    """phones.txt's symbols in id order; #0 .. #num_disambig at the end."""
    return ["<eps>", *SILENCE_PHONES, *lexicon.nonsilence_phones, *(f"#{i}" for i in range(num_disambig + 1))]


def word_symbols(lexicon: Lexicon) -> list[str]:
    return ["<eps>", *lexicon.words, WORD_DISAMBIG, "<s>", "</s>"]


def _entry_lines(state: int, pdf_class: int, transitions: list[tuple[int, float]]) -> str:
    arcs = " ".join(f"<Transition> {to} {prob:g}" for to, prob in transitions)
    return f"<State> {state} <PdfClass> {pdf_class} {arcs} </State>"


def topology_text(nonsilence: list[int], silence: list[int]) -> str:
    """Kaldi's utils/gen_topo.pl: 3-state left-to-right for speech phones; for silence 5 states,
    the first four fully connected among themselves and the last one, which alone exits."""
    lines = ["<Topology>", "<TopologyEntry>", "<ForPhones>", " ".join(map(str, nonsilence)), "</ForPhones>"]
    n = NONSILENCE_STATES
    lines += [_entry_lines(s, s, [(s, 0.75), (s + 1, 0.25)]) for s in range(n)]
    lines += [f"<State> {n} </State>", "</TopologyEntry>"]
    lines += ["<TopologyEntry>", "<ForPhones>", " ".join(map(str, silence)), "</ForPhones>"]
    n = SILENCE_STATES
    share = 1.0 / (n - 1)
    lines.append(_entry_lines(0, 0, [(to, share) for to in range(n - 1)]))
    lines += [_entry_lines(s, s, [(to, share) for to in range(1, n)]) for s in range(1, n - 1)]
    lines += [_entry_lines(n - 1, n - 1, [(n - 1, 0.75), (n, 0.25)]), f"<State> {n} </State>", "</TopologyEntry>"]
    return "\n".join(lines + ["</Topology>"]) + "\n"


def _write_table(path: Path, symbols: list[str]) -> None:
    path.write_text("".join(f"{s} {i}\n" for i, s in enumerate(symbols)), encoding="utf-8")


def _write_phone_sets(phones_dir: Path, name: str, ids: dict[str, int], sets: list[list[str]]) -> None:
    """<name>.txt and .int: one set of phones a line."""
    (phones_dir / f"{name}.txt").write_text("".join(" ".join(s) + "\n" for s in sets), encoding="utf-8")
    (phones_dir / f"{name}.int").write_text(
        "".join(" ".join(str(ids[p]) for p in s) + "\n" for s in sets), encoding="ascii"
    )


def _write_phone_lists(phones_dir: Path, ids: dict[str, int], nonsilence: list[str], disambig: list[str]) -> None:
    phones_dir.mkdir(parents=True, exist_ok=True)
    silence = list(SILENCE_PHONES)
    lists = {
        "silence": silence,
        "nonsilence": nonsilence,
        "disambig": disambig,
        "optional_silence": [OPTIONAL_SILENCE],
        "context_indep": silence,  # prepare_lang.sh: the silence phones take no context in the tree
    }
    for name, names in lists.items():
        _write_phone_sets(phones_dir, name, ids, [[p] for p in names])
        (phones_dir / f"{name}.csl").write_text(":".join(str(ids[p]) for p in names) + "\n", encoding="ascii")
    _write_phone_sets(phones_dir, "sets", ids, [[p] for p in silence + nonsilence])  # no position or stress variants
    # One question for silence, one for speech, as a dictionary's extra_questions.txt gives
    # prepare_lang.sh (validate_lang.pl warns when there are none).
    _write_phone_sets(phones_dir, "extra_questions", ids, [silence, nonsilence])
    # G's backoff symbol #0 in both tables (mkgraph.sh and format_lm.sh read these).
    (phones_dir / "wdisambig.txt").write_text(f"{WORD_DISAMBIG}\n", encoding="utf-8")
    (phones_dir / "wdisambig_phones.int").write_text(f"{ids[WORD_DISAMBIG]}\n", encoding="ascii")
    # Kaldi's roots file: each phone its own tree root, its HMM states' pdfs shared, split by questions.
    roots = silence + nonsilence
    (phones_dir / "roots.txt").write_text("".join(f"shared split {p}\n" for p in roots), encoding="utf-8")
    (phones_dir / "roots.int").write_text("".join(f"shared split {ids[p]}\n" for p in roots), encoding="ascii")


def _write_align_lexicon(phones_dir: Path, entries, phone_ids: dict[str, int], word_ids: dict[str, int]) -> None:
    """Kaldi's phones/align_lexicon.{txt,int}: `word word phone...` a pronunciation (the word
    twice, as Kaldi writes it), what word times are read from (asr/lang/word_align.py)."""
    (phones_dir / "align_lexicon.txt").write_text(
        "".join(f"{w} {w} {' '.join(pron)}\n" for w, pron in entries), encoding="utf-8"
    )
    (phones_dir / "align_lexicon.int").write_text(
        "".join(f"{word_ids[w]} {word_ids[w]} {' '.join(str(phone_ids[p]) for p in pron)}\n" for w, pron in entries),
        encoding="ascii",
    )


def write_lang_dir(lexicon: Lexicon, out: Path, sil_prob: float = SIL_PROB) -> dict:
    """Write every file of the lang dir into `out` (an empty dir); returns its sizes."""
    entries = list(lexicon.entries)
    disambig_entries, max_lex_disambig = add_lex_disambig(entries)
    sil_disambig = f"#{max_lex_disambig + 1}"
    phones = phone_symbols(lexicon, max_lex_disambig + 1)
    words = word_symbols(lexicon)
    phone_ids = {p: i for i, p in enumerate(phones)}
    word_ids = {w: i for i, w in enumerate(words)}
    _write_table(out / "phones.txt", phones)
    _write_table(out / "words.txt", words)
    disambig = [p for p in phones if p.startswith("#")]
    _write_phone_lists(out / "phones", phone_ids, lexicon.nonsilence_phones, disambig)
    silence_ids = [phone_ids[p] for p in SILENCE_PHONES]
    nonsilence_ids = [phone_ids[p] for p in lexicon.nonsilence_phones]
    (out / "topo").write_text(topology_text(nonsilence_ids, silence_ids), encoding="ascii")
    (out / "oov.txt").write_text(f"{OOV_WORD}\n", encoding="utf-8")
    (out / "oov.int").write_text(f"{word_ids[OOV_WORD]}\n", encoding="ascii")
    _write_align_lexicon(out / "phones", entries, phone_ids, word_ids)
    (out / "phones/wdisambig_words.int").write_text(f"{word_ids[WORD_DISAMBIG]}\n", encoding="ascii")
    plain = lexicon_fst(entries, phone_ids, word_ids, OPTIONAL_SILENCE, sil_prob)
    plain.write(str(out / "L.fst"))
    with_disambig = lexicon_fst(
        disambig_entries, phone_ids, word_ids, OPTIONAL_SILENCE, sil_prob, sil_disambig, WORD_DISAMBIG
    )
    with_disambig.write(str(out / "L_disambig.fst"))
    return {
        "words": len(lexicon.words),
        "prons": len(entries),
        "phones": len(SILENCE_PHONES) + len(nonsilence_ids),
        "disambig": len(disambig),
        "L_states": plain.num_states,
        "L_arcs": sum(plain.num_arcs(s) for s in range(plain.num_states)),
    }


SUMMARY = "lang.json"
RERUN = "python -m asr.lang"


def build_lang_dir(
    dictionary: str | Path, lang_dir: str | Path, sil_prob: float = SIL_PROB, force: bool = False
) -> dict:
    """The lang stage: read the dictionary and write the lang dir whole (a temporary dir renamed
    into place), unless its stage record says it is made from this dictionary and silence
    probability already; returns its summary (sizes of tables and L.fst)."""
    dictionary, lang_dir = Path(dictionary), Path(lang_dir)
    # phones: which files phones/ holds (a dir made before context_indep, extra_questions and
    # wdisambig were written is made again)
    options = {"sil_prob": sil_prob, "phones": "prepare_lang.sh"}
    reason = "lang.force=true" if force else why_rerun(lang_dir, "lang", options, [dictionary])
    if reason is None:
        log.info("%s: made from this dictionary already; keeping it (lang.force=true rebuilds)", lang_dir)
        return json.loads((lang_dir / SUMMARY).read_text(encoding="utf-8"))
    log.info("%s: building (%s)", lang_dir, reason)
    lexicon = read_ms98_dictionary(dictionary)
    started = time.perf_counter()
    with atomic_dir(lang_dir) as tmp:
        tmp.chmod(0o755)
        record = {"dictionary": str(dictionary), "sil_prob": sil_prob, **write_lang_dir(lexicon, tmp, sil_prob)}
        record["seconds"] = round(time.perf_counter() - started, 3)
        (tmp / SUMMARY).write_text(json.dumps(record, indent=2, sort_keys=True) + "\n", encoding="utf-8")
        write_record(tmp, "lang", RERUN, options, [dictionary], outputs_of(tmp))
    log.info("%s: %s", lang_dir, ", ".join(f"{k} {record[k]}" for k in ("words", "prons", "phones", "disambig")))
    return record
