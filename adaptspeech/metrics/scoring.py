"""Edit counting behind the offline WER / CER modules (``metrics/wer/wer.py``, ``metrics/cer/cer.py``).

Both metrics share one definition, written here once:

* **Text canonicalisation** (applied to references *and* predictions, nothing else):
  Unicode NFC (so a decomposed ``s`` + U+0326 and the precomposed ``ș`` are the same letter, and
  count as one character), then every run of whitespace (spaces, tabs, newlines) becomes one space
  and leading / trailing whitespace is dropped. Case, punctuation and diacritics are *not* touched:
  ``"Bine,"`` vs ``"bine"`` is a substitution, and so is the cedilla ``ş`` (U+015F) vs the comma
  ``ș`` (U+0219). Normalising text for scoring is the data pipeline's job and must be applied to
  both sides before they reach these metrics.
* **Units**: words are the space-separated tokens of the canonical text; characters are its Unicode
  code points, the single spaces between words included (as in jiwer and the Hub's ``cer``). This
  matches ``jiwer.process_words`` with its default transform, and ``jiwer.process_characters`` with
  ``RemoveMultipleSpaces`` added to its default transform (jiwer's plain default would count
  ``"a  b"`` vs ``"a b"`` as a deleted space; we treat whitespace runs as formatting, like the Hub's
  ``cer`` script does).
* **Edits**: the minimum number of substitutions S, deletions D and insertions I turning the reference
  units into the predicted ones (Levenshtein alignment computed by jiwer / rapidfuzz), per utterance.
* **Corpus-level rate**: ``sum(S + D + I) / sum(N_ref)`` over all utterances, not the mean of
  per-utterance rates (a 2-word utterance must not weigh as much as a 40-word one).
* **Empty references** (``""`` or whitespace only) are *kept*, not skipped: they contribute zero
  reference units, and every unit of their prediction counts as an insertion. When the whole set has
  zero reference units the rate is defined as the number of edits, i.e. the denominator is
  ``max(sum(N_ref), 1)``: 0.0 for empty predictions of empty references, ``k`` for ``k`` inserted
  units. This is jiwer 4's own convention (``jiwer.wer("", "a b") == 2``), keeps every rate finite
  (strict JSON has no ``inf``), and the reference counts reported beside the rate show when it applies.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

import jiwer

Unit = Literal["word", "char"]
UNITS: tuple[str, ...] = ("char", "word")
_RATE_KEY = {"word": "wer", "char": "cer"}


def canonical_text(text: str) -> str:
    """Unicode NFC, whitespace runs collapsed to one space, ends stripped (see the module docstring)."""
    return " ".join(unicodedata.normalize("NFC", text).split())


def text_units(text: str, unit: Unit) -> list[str]:
    """The scoring units of ``text``: its words (``unit="word"``) or characters (``unit="char"``)."""
    _check_unit(unit)
    canonical = canonical_text(text)
    return canonical.split() if unit == "word" else list(canonical)


@dataclass(frozen=True)
class EditCounts:
    """Levenshtein edit counts summed over utterances.

    Args:
        substitutions (`int`): reference units replaced by another unit (S).
        deletions (`int`): reference units missing from the prediction (D).
        insertions (`int`): predicted units with no reference counterpart (I).
        hits (`int`): units matched exactly (H).
    """

    substitutions: int = 0
    deletions: int = 0
    insertions: int = 0
    hits: int = 0

    @property
    def edits(self) -> int:
        """S + D + I."""
        return self.substitutions + self.deletions + self.insertions

    @property
    def ref_units(self) -> int:
        """Reference length N = H + S + D."""
        return self.hits + self.substitutions + self.deletions

    @property
    def hyp_units(self) -> int:
        """Prediction length H + S + I."""
        return self.hits + self.substitutions + self.insertions

    @property
    def rate(self) -> float:
        """Corpus-level error rate ``edits / max(ref_units, 1)`` (see the module docstring)."""
        return corpus_rate(self.edits, self.ref_units)

    def __add__(self, other: EditCounts) -> EditCounts:
        return EditCounts(
            self.substitutions + other.substitutions,
            self.deletions + other.deletions,
            self.insertions + other.insertions,
            self.hits + other.hits,
        )


def corpus_rate(edits: int, ref_units: int) -> float:
    """``edits / ref_units``; with no reference units at all, the number of edits (jiwer 4's convention)."""
    return float(edits) / float(max(ref_units, 1))


def count_edits(
    predictions: Sequence[str | None],
    references: Sequence[str | None],
    unit: Unit,
    concatenate_texts: bool = False,
) -> EditCounts:
    """Sum the edits turning each reference into its prediction.

    Args:
        predictions (`Sequence[str]`): one hypothesis per utterance.
        references (`Sequence[str]`): one reference per utterance, same length as ``predictions``.
        unit (`str`): ``"word"`` or ``"char"``.
        concatenate_texts (`bool`, defaults to `False`): align the concatenation of all references against
            the concatenation of all predictions as one sequence (word sequences joined, character
            sequences joined with nothing added, so ``ref_units`` is unchanged) instead of utterance by
            utterance; the edit count can only go down, as the alignment may cross utterance boundaries.

    Raises:
        ValueError: on an unknown ``unit``, lengths that differ, or no utterances at all.
        TypeError: naming the first row whose prediction or reference is not a string.
    """
    _check_unit(unit)
    check_texts(predictions, references)
    refs = [canonical_text(text) for text in references]
    hyps = [canonical_text(text) for text in predictions]
    if concatenate_texts:
        joiner = " " if unit == "word" else ""
        refs = [joiner.join(text for text in refs if text)]
        hyps = [joiner.join(text for text in hyps if text)]
    process = jiwer.process_words if unit == "word" else jiwer.process_characters
    output = process(refs, hyps)
    return EditCounts(output.substitutions, output.deletions, output.insertions, output.hits)


def error_rate(
    predictions: Sequence[str | None],
    references: Sequence[str | None],
    unit: Unit,
    concatenate_texts: bool = False,
    return_counts: bool = False,
) -> float | dict[str, float | int]:
    """What the WER / CER modules' ``_compute`` returns.

    Returns:
        The corpus-level rate as a float (the Hub scripts' return type, so existing ``compute_metrics``
        code keeps working), or with ``return_counts=True`` a dict: the rate under ``"wer"`` /
        ``"cer"`` plus ``edits``, ``substitutions``, ``deletions``, ``insertions``, ``hits``,
        ``ref_units`` and ``hyp_units`` (integers, summed over utterances).
    """
    counts = count_edits(predictions, references, unit, concatenate_texts=concatenate_texts)
    if not return_counts:
        return counts.rate
    return {
        _RATE_KEY[unit]: counts.rate,
        "edits": counts.edits,
        "substitutions": counts.substitutions,
        "deletions": counts.deletions,
        "insertions": counts.insertions,
        "hits": counts.hits,
        "ref_units": counts.ref_units,
        "hyp_units": counts.hyp_units,
    }


def counts_from_output(output: dict[str, Any]) -> EditCounts:
    """Rebuild :class:`EditCounts` from an ``error_rate(..., return_counts=True)`` dict."""
    return EditCounts(
        int(output["substitutions"]), int(output["deletions"]), int(output["insertions"]), int(output["hits"])
    )


def _check_unit(unit: str) -> None:
    if unit not in UNITS:
        raise ValueError(f"unknown scoring unit {unit!r}; allowed values: {', '.join(UNITS)}")


def check_texts(predictions: Sequence[Any], references: Sequence[Any]) -> None:
    """Refuse texts that cannot be scored: lengths that differ, no rows, or a row that is not a string.

    Raises:
        ValueError: naming both lengths, or saying there is nothing to score.
        TypeError: naming the first offending row and its type.
    """
    if len(predictions) != len(references):
        raise ValueError(
            f"predictions and references differ in length: {len(predictions)} predictions, "
            f"{len(references)} references"
        )
    if len(references) == 0:
        raise ValueError("no utterances to score: predictions and references are empty")
    for name, texts in (("prediction", predictions), ("reference", references)):
        for row, text in enumerate(texts):
            if not isinstance(text, str):
                raise TypeError(f"{name} at row {row} is {type(text).__name__} {text!r}, expected a string")
