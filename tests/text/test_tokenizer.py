"""Tokenizer: training stage, blank at 0, noise tags whole, round trip, word spans."""

import random
from types import SimpleNamespace

import pytest

from asr.text.tokenizer import BLANK_ID, UNK_PIECE, Tokenizer, build_tokenizer, tokenizer_model_path
from asr.utils.errors import InputError

WORDS = "yes no maybe hello world okay right uh um you know i think so well".split()
TAGS = ["[noise]", "[laughter]", "[vocalized-noise]"]


def write_text(path, n=300, seed=0):
    rng = random.Random(seed)
    lines = []
    for i in range(n):
        words = [rng.choice(WORDS + TAGS + ["ab-", "wor-"]) for _ in range(rng.randint(3, 10))]
        lines.append(f"utt{i:04d} {' '.join(words)}\n")
    lines.append("utt9999\n")  # an empty transcript is legal in Kaldi and must be ignored
    path.write_text("".join(lines))
    return path


def cfg(tmp_path, model_type="bpe", vocab_size=60):
    return SimpleNamespace(
        lang_dir=str(tmp_path / "lang"),
        model_type=model_type,
        vocab_size=vocab_size,
        character_coverage=1.0,
        user_symbols=TAGS,
    )


@pytest.fixture(scope="module")
def bpe(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("tok")
    path = build_tokenizer(write_text(tmp / "text"), cfg(tmp))
    return Tokenizer(path)


def test_files_and_blank_at_zero(bpe):
    lang = bpe.path.parent
    assert bpe.path.name == "bpe60.model"
    assert bpe.vocab_size == 60
    tokens = (lang / "tokens.txt").read_text().splitlines()
    assert len(tokens) == 60 and tokens[0] == "<blk> 0" and tokens[1] == "<unk> 1"
    assert [line.split()[1] for line in tokens] == [str(i) for i in range(60)]
    assert len((lang / "bpe60.vocab").read_text().splitlines()) == 60


@pytest.mark.parametrize(
    "text", ["hello [noise] ab- world [laughter]", "[vocalized-noise] yes", "i think so wor- well", "okay"]
)
def test_round_trip_and_no_blank(bpe, text):
    ids = bpe.encode(text)
    assert BLANK_ID not in ids
    assert bpe.decode(ids) == text
    # Blanks anywhere are ignored by decode (CTC output after repeat collapse).
    assert bpe.decode([0] + [t for i in ids for t in (i, 0)]) == text


def test_noise_tags_are_single_tokens(bpe):
    for tag in TAGS:
        assert len(bpe.encode(tag)) == 1
        assert len(bpe.encode(f"yes {tag} no")) == len(bpe.encode("yes")) + 1 + len(bpe.encode("no"))


def test_unknown_characters_decode_to_unk_word(bpe):
    assert bpe.decode(bpe.encode("yes zzz#")).split()[0] == "yes"
    assert UNK_PIECE in bpe.decode(bpe.encode("q#"))


def test_word_spans(bpe):
    text = "hello [noise] ab- world"
    ids = bpe.encode(text)
    spans = bpe.word_spans(ids)
    assert [w for w, _, _ in spans] == text.split()
    # Spans tile the token sequence in order.
    assert spans[0][1] == 0 and spans[-1][2] == len(ids) - 1
    for (_, _, last), (_, first, _) in zip(spans, spans[1:]):
        assert first == last + 1
    tag = spans[1]
    assert tag[1] == tag[2]  # the tag is one token


def test_char_model_and_skip_when_present(tmp_path, caplog):
    text = write_text(tmp_path / "text")
    c = cfg(tmp_path, "char", 100)
    path = build_tokenizer(text, c)
    tok = Tokenizer(path)
    assert tok.vocab_size < 100  # soft limit: only the characters the text has
    assert tok.decode(tok.encode("you know [laughter]")) == "you know [laughter]"
    mtime = path.stat().st_mtime_ns
    with caplog.at_level("INFO"):
        assert build_tokenizer(text, c) == path
    assert path.stat().st_mtime_ns == mtime and "skipping" in caplog.text
    assert tokenizer_model_path(c) == path
    text.write_text(text.read_text() + "zz1 zebra\n")  # an edited transcript re-trains
    with caplog.at_level("INFO"):
        build_tokenizer(text, c)
    assert path.stat().st_mtime_ns != mtime and f"{text} changed since the tokenizer stage" in caplog.text


def test_a_changed_option_or_a_missing_record_trains_the_tokenizer_again(tmp_path, caplog):
    """Called directly (python -m asr.text), the stage skips by its record alone: another
    option value, or no record (a stage killed before writing it), trains again."""
    text = write_text(tmp_path / "text")
    c = cfg(tmp_path, "char", 100)
    path = build_tokenizer(text, c)

    def trained() -> bool:
        caplog.clear()
        with caplog.at_level("INFO", logger="asr.text"):
            build_tokenizer(text, c)
        return "training the tokenizer" in caplog.text

    assert not trained()
    c.character_coverage = 0.999
    assert trained() and not trained()
    (path.parent / f"{path.stem}.record.json").unlink()
    assert trained() and not trained()


def test_bad_inputs(tmp_path):
    with pytest.raises(InputError, match="training transcripts not found"):
        build_tokenizer(tmp_path / "missing", cfg(tmp_path))
    (tmp_path / "text").write_text("a\nb\n")
    with pytest.raises(InputError, match="no non-empty transcripts"):
        build_tokenizer(tmp_path / "text", cfg(tmp_path))
    (tmp_path / "junk.model").write_text("not a model")
    with pytest.raises(InputError, match="junk.model"):
        Tokenizer(tmp_path / "junk.model")
    assert not (tmp_path / "lang").exists() or not list((tmp_path / "lang").iterdir())


def test_a_piece_after_a_tag_starts_a_new_word(bpe):
    # Greedy CTC can emit a word-internal piece right after a tag: `▁[noise] s`.
    s_inside_word = bpe.sp.piece_to_id("s")
    assert s_inside_word != bpe.sp.unk_id()
    ids = bpe.encode("yes [noise]") + [s_inside_word] + bpe.encode("no")
    assert bpe.decode(ids) == "yes [noise] s no"
    assert [w for w, _, _ in bpe.word_spans(ids)] == ["yes", "[noise]", "s", "no"]
