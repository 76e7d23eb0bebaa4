"""The documented scoring rules: NFC, whitespace runs, empty references, bad input."""

from __future__ import annotations

import unicodedata

import jiwer
import pytest

from adaptspeech.metrics import scoring


def counts(hyp: str, ref: str, unit: str) -> scoring.EditCounts:
    return scoring.count_edits([hyp], [ref], unit)


def test_canonical_text_nfc_and_whitespace() -> None:
    decomposed = "s\u0326i t\u0326ara\u0300"
    assert scoring.canonical_text(f" \t{decomposed}\n\n  x ") == "și țarà x"
    assert scoring.text_units("  řeka \t teče ", "word") == ["řeka", "teče"]
    assert scoring.text_units("  řeka \t teče ", "char") == list("řeka teče")
    assert scoring.text_units(" \t\n ", "word") == []
    assert scoring.text_units(" \t\n ", "char") == []


@pytest.mark.parametrize("unit", ["word", "char"])
def test_decomposed_letters_score_as_their_composed_form(unit: str) -> None:
    composed = "știință și țară"
    decomposed = unicodedata.normalize("NFD", composed)
    assert decomposed != composed and len(decomposed) == len(composed) + 6
    result = counts(decomposed, composed, unit)
    assert result.edits == 0
    assert result.ref_units == {"word": 3, "char": 15}[unit]
    # the same holds with the decomposed form as reference: ř counts as one character
    assert counts("reka", unicodedata.normalize("NFD", "řeka"), "char").ref_units == 4


@pytest.mark.parametrize("unit", ["word", "char"])
def test_cedilla_and_comma_below_are_different_letters(unit: str) -> None:
    # ş (U+015F, cedilla) is a common misspelling of ș (U+0219); NFC keeps them apart, and so do we
    result = counts("\u015fi", "\u0219i", unit)
    assert (result.substitutions, result.deletions, result.insertions) == (1, 0, 0)


def test_tabs_and_newlines_are_word_separators() -> None:
    spaced = counts("ana are pere", "ana are mere", "word")
    assert counts("ana\tare\npere", "ana are\t\tmere", "word") == spaced
    assert counts("ana\tare\npere", "ana are\t\tmere", "char") == counts(
        "ana are pere", "ana are mere", "char"
    )


def test_whitespace_runs_are_formatting_not_characters() -> None:
    # jiwer's plain character default counts the doubled space as a deleted character; we do not
    assert jiwer.cer("a  b", "a b") == pytest.approx(0.25)
    assert counts("a b", "a  b", "char") == scoring.EditCounts(hits=3)
    assert counts("a b", "a  b", "char").rate == 0.0
    # with single spaces our CER is jiwer's plain default
    assert counts("ana are pere", "ana are mere", "char").rate == pytest.approx(
        jiwer.cer("ana are mere", "ana are pere")
    )


@pytest.mark.parametrize("reference", ["", "   ", "\t \n"])
def test_empty_reference_counts_insertions_against_zero_units(reference: str) -> None:
    words = counts("x yz", reference, "word")
    chars = counts("x yz", reference, "char")
    assert (words.insertions, words.ref_units, words.rate) == (2, 0, 2.0)
    assert (chars.insertions, chars.ref_units, chars.rate) == (4, 0, 4.0)
    assert counts("", reference, "word").rate == 0.0
    assert counts("  ", reference, "char").rate == 0.0
    # kept, not skipped: beside a real reference its insertions add to the numerator only
    mixed = scoring.count_edits(["ana are mere", "x yz"], ["ana are mere", reference], "word")
    assert (mixed.edits, mixed.ref_units, mixed.rate) == (2, 3, pytest.approx(2 / 3))
    assert mixed.rate == pytest.approx(jiwer.wer(["ana are mere", reference], ["ana are mere", "x yz"]))


def test_edit_counts_add_and_rate() -> None:
    a = scoring.EditCounts(substitutions=1, deletions=2, insertions=3, hits=4)
    b = scoring.EditCounts(substitutions=10, deletions=0, insertions=1, hits=5)
    total = a + b
    assert total == scoring.EditCounts(11, 2, 4, 9)
    assert (total.edits, total.ref_units, total.hyp_units) == (17, 22, 24)
    assert total.rate == pytest.approx(17 / 22)
    assert scoring.corpus_rate(0, 0) == 0.0
    assert scoring.corpus_rate(3, 0) == 3.0


def test_bad_input_is_refused_with_row_and_allowed_values() -> None:
    with pytest.raises(ValueError, match="1 predictions, 2 references"):
        scoring.count_edits(["a"], ["a", "b"], "word")
    with pytest.raises(ValueError, match="no utterances"):
        scoring.count_edits([], [], "word")
    with pytest.raises(TypeError, match="prediction at row 1 is NoneType"):
        scoring.count_edits(["a", None], ["a", "b"], "word")
    with pytest.raises(TypeError, match="reference at row 0 is int"):
        scoring.count_edits(["a"], [3], "char")
    with pytest.raises(ValueError, match="unknown scoring unit 'phone'; allowed values: char, word"):
        scoring.count_edits(["a"], ["a"], "phone")
    with pytest.raises(ValueError, match="allowed values: char, word"):
        scoring.text_units("a", "token")
