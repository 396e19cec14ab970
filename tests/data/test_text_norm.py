"""One test per transcript rule, on lines shaped like the real MS98 and Hub5 stm files."""

from asr.data.text_norm import (
    coinage,
    drop_angle_tags,
    drop_hesitation_placeholders,
    drop_silence_and_asides,
    is_ignored_segment,
    is_uncertain_fisher_line,
    laughter_word,
    map_fisher_tags,
    mispronounced_word,
    normalize_fisher_text,
    normalize_ms98_text,
    normalize_ms98_word,
    normalize_stm_text,
    partial_word_missing_end,
    partial_word_missing_middle,
    partial_word_missing_start,
    stray_bracket,
    unwrap_optional_words,
    variant_number,
)

# --- MS98 ---


def test_silence_dropped_and_silence_only_line_becomes_empty():
    assert drop_silence_and_asides("[silence] hi um yeah [silence]".split()) == ["hi", "um", "yeah"]
    assert normalize_ms98_text("[silence]") == ""


def test_aside_markers_dropped():
    assert normalize_ms98_text("<b_aside> hold on honey <e_aside> sorry") == "hold on honey sorry"


def test_noise_tags_kept():
    line = "[noise] well [laughter] i think [vocalized-noise] so"
    assert normalize_ms98_text(line) == line


def test_laughter_word_becomes_the_word():
    assert laughter_word("[laughter-yes]") == "yes"
    assert laughter_word("[laughter-sto]-") == "sto-"
    assert normalize_ms98_text("that's [laughter-right] [laughter]") == "that's right [laughter]"


def test_partial_word_missing_end():
    assert partial_word_missing_end("ab[solute]-") == "ab-"
    assert partial_word_missing_end("ab[solute]") == "ab-"  # the '-' is sometimes omitted
    assert normalize_ms98_text("it was ab[solute]- absolutely") == "it was ab- absolutely"


def test_partial_word_missing_start():
    assert partial_word_missing_start("[ab]solute") == "-solute"
    assert partial_word_missing_start("-[ab]solute") == "-solute"
    assert normalize_ms98_text("that [ex]pected") == "that -pected"


def test_mispronounced_word_keeps_what_was_said():
    assert mispronounced_word("[it'n/isn't]") == "it'n"
    # the said part may itself be partial: [lem[guini]-/linguini] -> lem-
    assert normalize_ms98_word("[lem[guini]-/linguini]") == "lem-"


def test_coinage_braces_removed():
    assert coinage("{yuppiedom}") == "yuppiedom"
    assert normalize_ms98_text("a real {yuppiedom} thing") == "a real yuppiedom thing"


def test_variant_number_removed():
    assert variant_number("them_1") == "them"
    assert variant_number("them_1's") == "them's"
    assert normalize_ms98_text("all of them_1 were") == "all of them were"


def test_stray_bracket_typo():
    assert stray_bracket("ex[specially]-/especially]") == "ex"


def test_partial_word_missing_middle():
    assert partial_word_missing_middle("ammu[n]it-") == "ammu-it-"


def test_lower_case():
    assert normalize_ms98_text("I Think [NOISE] SO") == "i think [noise] so"


def test_plain_words_untouched():
    line = "hi um yeah i'd like to talk about how you dress for work uh-huh"
    assert normalize_ms98_text(line) == line


# --- Hub5 stm ---


def test_stm_upper_to_lower():
    assert normalize_stm_text("HE IS A POLICE OFFICER") == "he is a police officer"


def test_stm_hesitation_placeholders_dropped():
    assert drop_hesitation_placeholders(["(%hesitation)", "i", "(%uh)", "%hesitation"]) == ["i"]
    assert normalize_stm_text("(%HESITATION) I THINK SO") == "i think so"


def test_stm_optional_words_unwrapped():
    assert unwrap_optional_words(["(uh-)", "((i))", "okay"]) == ["uh-", "i", "okay"]
    assert normalize_stm_text("I THINK SO ((UH-)") == "i think so uh-"


def test_stm_angle_tags_dropped():
    assert drop_angle_tags(["<b_aside>", "yeah", "<e_aside>"]) == ["yeah"]
    assert normalize_stm_text("<B_ASIDE> YEAH (OKAY) <E_ASIDE>") == "yeah okay"


def test_stm_only_hesitation_is_empty():
    assert normalize_stm_text("(%HESITATION)") == ""


def test_ignored_segment_recognised():
    assert is_ignored_segment("IGNORE_TIME_SEGMENT_IN_SCORING")
    assert not is_ignored_segment("IGNORE THIS")


# --- Fisher (fisher_data_prep.sh), on lines shaped like fe_03_p1_tran transcripts ---


def test_fisher_uncertain_line_dropped_whole():
    assert is_uncertain_fisher_line("(( i don't know )) what")
    assert normalize_fisher_text("yeah (( i don't know )) what") == ""


def test_fisher_tags_mapped_as_kaldi():
    assert map_fisher_tags(["[laugh]", "[sigh]", "[cough]", "[mn]", "[breath]", "[lipsmack]", "[noise]"]) == [
        "[laughter]",
        "[noise]",
        "[noise]",
        "[noise]",
        "[noise]",
        "[noise]",
        "[noise]",
    ]
    assert normalize_fisher_text("[lipsmack] an- so the topic is [laugh]") == "[noise] an- so the topic is [laughter]"


def test_fisher_lower_cased_and_plain_words_untouched():
    assert normalize_fisher_text("I'm not sure what they're doing") == "i'm not sure what they're doing"
