"""compute_error_rates: per-language and overall corpus-level rates, checked by hand; JSON output."""

from __future__ import annotations

import json
import math

import pytest

from adaptspeech.metrics import compute_error_rates, load_metric, write_error_rates_json

# (language, reference, prediction) and, worked out by hand, the edits and reference lengths
ROWS = [
    ("ro", "ana are mere", "ana are pere"),  # words 1 sub / 3; chars 1 sub / 12
    ("sl", "dober dan", "dober dan"),  # words 0 / 2; chars 0 / 9
    ("sl", "hvala", ""),  # words 1 del / 1; chars 5 del / 5
    ("ro", "   ", "x y"),  # words 2 ins / 0; chars 3 ins ("x y") / 0; an empty reference
    ("cs", "řeka teče", "reka tece"),  # words 2 sub / 2; chars 2 sub / 9
]
LANGS = [lang for lang, _, _ in ROWS]
REFS = [ref for _, ref, _ in ROWS]
HYPS = [hyp for _, _, hyp in ROWS]

EXPECTED = {
    #     word edits, ref words, char edits, ref chars, utterances, empty references
    "cs": (2, 2, 2, 9, 1, 0),
    "ro": (1 + 2, 3 + 0, 1 + 3, 12 + 0, 2, 1),
    "sl": (0 + 1, 2 + 1, 0 + 5, 9 + 5, 2, 0),
}


def expected_entry(word_edits: int, ref_words: int, char_edits: int, ref_chars: int, n: int, empty: int):
    return {
        "wer": pytest.approx(word_edits / ref_words),
        "cer": pytest.approx(char_edits / ref_chars),
        "num_utterances": n,
        "ref_words": ref_words,
        "ref_chars": ref_chars,
        "word_edits": word_edits,
        "char_edits": char_edits,
        "empty_references": empty,
    }


def test_per_language_and_overall_by_hand() -> None:
    result = compute_error_rates(HYPS, REFS, LANGS)
    assert list(result["per_language"]) == ["cs", "ro", "sl"]
    for lang, numbers in EXPECTED.items():
        assert result["per_language"][lang] == expected_entry(*numbers)
    total = [sum(numbers[i] for numbers in EXPECTED.values()) for i in range(6)]
    assert total == [6, 8, 11, 35, 5, 1]
    assert result["overall"] == expected_entry(*total)
    # corpus level, not the mean of the per-language (or per-utterance) rates
    per_language_mean = sum(entry["wer"] for entry in result["per_language"].values()) / 3
    assert result["overall"]["wer"] == pytest.approx(6 / 8)
    assert not math.isclose(result["overall"]["wer"], per_language_mean)


def test_without_languages_only_overall() -> None:
    result = compute_error_rates(HYPS, REFS)
    assert result["per_language"] == {}
    assert result["overall"] == compute_error_rates(HYPS, REFS, LANGS)["overall"]
    assert result["overall"]["wer"] == pytest.approx(
        load_metric("wer").compute(predictions=HYPS, references=REFS)
    )
    assert result["overall"]["cer"] == pytest.approx(
        load_metric("cer").compute(predictions=HYPS, references=REFS)
    )


def test_language_with_only_empty_references_reports_inserted_units() -> None:
    result = compute_error_rates(["a b", "", "ok"], ["", " ", "ok"], ["xx", "xx", "ro"])
    assert result["per_language"]["xx"] == {
        "wer": 2.0,
        "cer": 3.0,
        "num_utterances": 2,
        "ref_words": 0,
        "ref_chars": 0,
        "word_edits": 2,
        "char_edits": 3,
        "empty_references": 2,
    }
    assert result["overall"]["wer"] == pytest.approx(2 / 1)
    assert result["overall"]["cer"] == pytest.approx(3 / 2)


def test_json_round_trip(tmp_path) -> None:
    result = compute_error_rates(HYPS, REFS, LANGS)
    path = write_error_rates_json(result, tmp_path / "eval" / "nested" / "error_rates.json")
    assert path.is_file()

    def refuse_constant(name: str) -> None:
        raise AssertionError(f"non-strict JSON constant {name}")

    assert json.loads(path.read_text(encoding="utf-8"), parse_constant=refuse_constant) == result


def test_json_refuses_non_results(tmp_path) -> None:
    with pytest.raises(ValueError, match="missing per_language"):
        write_error_rates_json({"overall": {}}, tmp_path / "x.json")
    with pytest.raises(ValueError, match="not JSON compliant"):
        write_error_rates_json({"overall": {"wer": float("nan")}, "per_language": {}}, tmp_path / "y.json")
    assert not (tmp_path / "y.json").exists()


def test_bad_input_names_row_or_lengths() -> None:
    with pytest.raises(ValueError, match="2 predictions, 1 references"):
        compute_error_rates(["a", "b"], ["a"])
    with pytest.raises(ValueError, match="languages has 1 entries but there are 2 utterances"):
        compute_error_rates(["a", "b"], ["a", "b"], ["ro"])
    with pytest.raises(ValueError, match="language at row 1 is empty"):
        compute_error_rates(["a", "b"], ["a", "b"], ["ro", " "])
    with pytest.raises(TypeError, match="language at row 0 is NoneType"):
        compute_error_rates(["a"], ["a"], [None])
    with pytest.raises(TypeError, match="prediction at row 1 is NoneType"):
        compute_error_rates(["a", None], ["a", "b"], ["ro", "ro"])
    with pytest.raises(ValueError, match="no utterances"):
        compute_error_rates([], [])
