"""The offline WER / CER agree with jiwer and with a naive edit distance on hand-made cases.

Both paths are checked: the scoring functions directly and the ``evaluate`` modules loaded by path
(whose inputs go through an Arrow round trip, so unicode and empty strings must survive it).
"""

from __future__ import annotations

import unicodedata

import jiwer
import pytest

from adaptspeech.metrics import load_metric, scoring

# (reference, prediction); every string NFC, whitespace made of plain spaces (jiwer's defaults split on " ")
CASES: list[tuple[str, str]] = [
    ("ana are mere", "ana are pere"),  # one substitution
    ("tři slova zde", ""),  # empty prediction: all deletions
    ("   ", "x y"),  # whitespace-only reference: insertions against zero reference units
    ("", ""),  # nothing against nothing
    ("", "ceva"),  # empty reference, non-empty prediction
    ("a  b   c", " a b c "),  # multiple / leading / trailing spaces
    ("řeka teče", "reka tece"),  # Czech diacritics
    ("și țară", "si tara"),  # Romanian comma-below letters
    ("Ce faci? Bine, mulțumesc.", "ce faci bine multumesc"),  # punctuation and case are compared as given
    ("dober dan", "dober dan dan"),  # insertion
    ("hello world again", "hello again"),  # deletion
    ("ștefan  cel mare", "ștefan cel mare și sfânt"),  # spaces plus insertions
]

# jiwer's character transform plus RemoveMultipleSpaces: the documented rule for whitespace runs
JIWER_CHARS = jiwer.Compose([jiwer.RemoveMultipleSpaces(), jiwer.Strip(), jiwer.ReduceToListOfListOfChars()])
JIWER_CHARS_CONTIGUOUS = jiwer.Compose(
    [
        jiwer.RemoveMultipleSpaces(),
        jiwer.Strip(),
        jiwer.ReduceToSingleSentence(""),
        jiwer.ReduceToListOfListOfChars(),
    ]
)
RATE_KEY = {"word": "wer", "char": "cer"}


def ours(backend: str, unit: str, hyps: list[str], refs: list[str], **kwargs: bool) -> dict:
    if backend == "scoring":
        return scoring.error_rate(hyps, refs, unit, return_counts=True, **kwargs)
    module = load_metric(RATE_KEY[unit])
    return module.compute(predictions=hyps, references=refs, return_counts=True, **kwargs)


def jiwer_output(unit: str, refs: list[str], hyps: list[str], contiguous: bool = False):
    if unit == "word":
        transform = jiwer.wer_contiguous if contiguous else jiwer.wer_default
        return jiwer.process_words(refs, hyps, transform, transform)
    transform = JIWER_CHARS_CONTIGUOUS if contiguous else JIWER_CHARS
    return jiwer.process_characters(refs, hyps, transform, transform)


def jiwer_rate(unit: str, output) -> float:
    return output.wer if unit == "word" else output.cer


def naive_units(text: str, unit: str) -> list[str]:
    words = unicodedata.normalize("NFC", text).split()
    return words if unit == "word" else list(" ".join(words))


def naive_edit_distance(ref: list[str], hyp: list[str]) -> int:
    """Levenshtein distance by the textbook dynamic programme, explicit loops."""
    previous = list(range(len(hyp) + 1))
    for i in range(1, len(ref) + 1):
        current = [i] + [0] * len(hyp)
        for j in range(1, len(hyp) + 1):
            substitution = previous[j - 1] + (0 if ref[i - 1] == hyp[j - 1] else 1)
            current[j] = min(previous[j] + 1, current[j - 1] + 1, substitution)
        previous = current
    return previous[-1]


def assert_same_counts(result: dict, expected, unit: str) -> None:
    assert result["substitutions"] == expected.substitutions
    assert result["deletions"] == expected.deletions
    assert result["insertions"] == expected.insertions
    assert result["hits"] == expected.hits
    assert result[RATE_KEY[unit]] == pytest.approx(jiwer_rate(unit, expected), abs=1e-12)


BACKENDS = ["scoring", "evaluate"]
UNITS = ["word", "char"]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("unit", UNITS)
@pytest.mark.parametrize("case", CASES, ids=[f"case{i}" for i in range(len(CASES))])
def test_single_pair_matches_jiwer(backend: str, unit: str, case: tuple[str, str]) -> None:
    ref, hyp = case
    result = ours(backend, unit, [hyp], [ref])
    assert_same_counts(result, jiwer_output(unit, [ref], [hyp]), unit)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("unit", UNITS)
def test_corpus_matches_jiwer_and_is_sum_of_edits_over_sum_of_lengths(backend: str, unit: str) -> None:
    refs = [ref for ref, _ in CASES]
    hyps = [hyp for _, hyp in CASES]
    result = ours(backend, unit, hyps, refs)
    assert_same_counts(result, jiwer_output(unit, refs, hyps), unit)

    edits = ref_len = 0
    for ref, hyp in CASES:
        edits += naive_edit_distance(naive_units(ref, unit), naive_units(hyp, unit))
        ref_len += len(naive_units(ref, unit))
    assert result["edits"] == edits
    assert result["ref_units"] == ref_len
    assert result[RATE_KEY[unit]] == pytest.approx(edits / ref_len)
    mean_of_rates = sum(
        naive_edit_distance(naive_units(r, unit), naive_units(h, unit)) / max(len(naive_units(r, unit)), 1)
        for r, h in CASES
    ) / len(CASES)
    assert result[RATE_KEY[unit]] != pytest.approx(mean_of_rates)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("unit", UNITS)
def test_bare_rate_is_the_hub_return_type(backend: str, unit: str) -> None:
    refs, hyps = ["ana are mere", "bine"], ["ana are pere", ""]
    if backend == "scoring":
        rate = scoring.error_rate(hyps, refs, unit)
    else:
        rate = load_metric(RATE_KEY[unit]).compute(predictions=hyps, references=refs)
    assert isinstance(rate, float)
    expected = {"word": 2 / 4, "char": (1 + 4) / (12 + 4)}[unit]
    assert rate == pytest.approx(expected)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("unit", UNITS)
def test_concatenated_texts_match_jiwer_contiguous(backend: str, unit: str) -> None:
    refs = ["a b", "c", "   ", "ștefan cel mare"]
    hyps = ["a", "b c", "", "stefan cel mare"]
    joined = ours(backend, unit, hyps, refs, concatenate_texts=True)
    separate = ours(backend, unit, hyps, refs)
    assert_same_counts(joined, jiwer_output(unit, refs, hyps, contiguous=True), unit)
    # same denominator, and the alignment across utterance boundaries recovers "b"
    assert joined["ref_units"] == separate["ref_units"]
    assert separate["edits"] == {"word": 3, "char": 5}[unit]
    assert joined["edits"] == {"word": 1, "char": 3}[unit]
