"""Offline WER / CER: ``evaluate`` modules shipped in the package, loaded by path, reported per language.

``evaluate.load("wer")`` downloads its script from the Hub. adaptspeech ships its own modules
(``metrics/wer/wer.py``, ``metrics/cer/cer.py``, package data of the wheel) and loads them by path, so
evaluation works with ``HF_HUB_OFFLINE=1``::

    from adaptspeech.metrics import compute_error_rates, load_metric, write_error_rates_json

    wer = load_metric("wer")                      # an evaluate.EvaluationModule
    wer.compute(predictions=hyps, references=refs)  # float, corpus-level

    result = compute_error_rates(hyps, refs, languages=langs)
    write_error_rates_json(result, "outputs/eval/error_rates.json")

Scoring rules (Unicode NFC, whitespace runs collapsed, corpus-level rates, what an empty reference
means) are documented in :mod:`adaptspeech.metrics.scoring`. Rates are fractions, not percentages.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import evaluate

from adaptspeech.metrics.scoring import EditCounts, canonical_text, check_texts, counts_from_output

__all__ = [
    "METRIC_NAMES",
    "compute_error_rates",
    "load_metric",
    "metric_path",
    "write_error_rates_json",
]

METRIC_NAMES: tuple[str, ...] = ("cer", "wer")
"""The metric modules shipped with the package, one folder each under ``adaptspeech/metrics/``."""

_METRICS_DIR = Path(__file__).resolve().parent
_LOADED: dict[str, evaluate.EvaluationModule] = {}


def metric_path(name: str) -> Path:
    """The folder of the shipped module ``name`` (``"wer"`` or ``"cer"``), for ``evaluate.load(str(path))``.

    Raises:
        ValueError: for any other name, listing the allowed values.
    """
    if name not in METRIC_NAMES:
        raise ValueError(f"unknown metric {name!r}; allowed values: {', '.join(METRIC_NAMES)}")
    return _METRICS_DIR / name


def load_metric(name: str) -> evaluate.EvaluationModule:
    """Load the shipped ``evaluate`` module ``name`` by path (never from the Hub), once per process.

    The instance keeps its inputs in memory (``keep_in_memory=True``): no cache files, no locks. For
    multi-process evaluation gather the texts on one process first (as ``transformers.Trainer`` does).

    Args:
        name (`str`): ``"wer"`` or ``"cer"``.

    Raises:
        ValueError: for any other name, listing the allowed values.
    """
    path = metric_path(name)
    if name not in _LOADED:
        _LOADED[name] = evaluate.load(str(path), keep_in_memory=True)
    return _LOADED[name]


def compute_error_rates(
    predictions: Sequence[str],
    references: Sequence[str],
    languages: Sequence[str] | None = None,
) -> dict[str, Any]:
    """Corpus-level WER and CER over all utterances and per language, through the shipped modules.

    Every rate is ``sum of edits / sum of reference lengths`` over its utterances, never a mean of
    per-utterance rates; the overall counts are the sums of the per-language ones.

    Args:
        predictions (`Sequence[str]`): recognised text, one per utterance.
        references (`Sequence[str]`): reference text, one per utterance.
        languages (`Sequence[str]`, *optional*): language code of each utterance; without it
            ``per_language`` is empty.

    Returns:
        ``{"overall": entry, "per_language": {code: entry, ...}}`` with codes sorted, where each entry is
        ``{"wer", "cer", "num_utterances", "ref_words", "ref_chars", "word_edits", "char_edits",
        "empty_references"}``: rates as floats, the rest integers. ``empty_references`` counts the
        references that are empty or whitespace only (kept: their predicted words and characters count as
        insertions, see :mod:`adaptspeech.metrics.scoring`).

    Raises:
        ValueError: lengths that differ, no utterances, or an empty language code (its row named).
        TypeError: a text or language code that is not a string (its row named).
    """
    check_texts(predictions, references)
    if languages is None:
        groups = {"": list(range(len(references)))}
    else:
        groups = _group_rows(languages, len(references))

    per_language: dict[str, dict[str, Any]] = {}
    words_total, chars_total, empty_total = EditCounts(), EditCounts(), 0
    for code in sorted(groups):
        rows = groups[code]
        group_refs = [references[row] for row in rows]
        group_hyps = [predictions[row] for row in rows]
        words = counts_from_output(
            load_metric("wer").compute(predictions=group_hyps, references=group_refs, return_counts=True)
        )
        chars = counts_from_output(
            load_metric("cer").compute(predictions=group_hyps, references=group_refs, return_counts=True)
        )
        empty = sum(1 for text in group_refs if not canonical_text(text))
        if languages is not None:
            per_language[code] = _entry(words, chars, len(rows), empty)
        words_total, chars_total, empty_total = words_total + words, chars_total + chars, empty_total + empty
    return {
        "overall": _entry(words_total, chars_total, len(references), empty_total),
        "per_language": per_language,
    }


def write_error_rates_json(result: dict[str, Any], path: str | Path) -> Path:
    """Write a :func:`compute_error_rates` result as strict, indented UTF-8 JSON; return the path.

    Parent folders are created. Raises ``ValueError`` if ``result`` lacks ``overall`` / ``per_language``
    or holds a non-finite number (strict JSON has no ``NaN`` / ``Infinity``).
    """
    missing = [
        key for key in ("overall", "per_language") if not isinstance(result, dict) or key not in result
    ]
    if missing:
        raise ValueError(
            f"not a compute_error_rates result: missing {', '.join(missing)} "
            "(expected keys: overall, per_language)"
        )
    text = json.dumps(result, indent=2, ensure_ascii=False, allow_nan=False)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text + "\n", encoding="utf-8")
    return path


def _group_rows(languages: Sequence[str], num_rows: int) -> dict[str, list[int]]:
    """Row indices per language code, rows in input order."""
    if len(languages) != num_rows:
        raise ValueError(f"languages has {len(languages)} entries but there are {num_rows} utterances")
    groups: dict[str, list[int]] = {}
    for row, code in enumerate(languages):
        if not isinstance(code, str):
            raise TypeError(f"language at row {row} is {type(code).__name__} {code!r}, expected a string")
        if not code.strip():
            raise ValueError(
                f"language at row {row} is empty ({code!r}); give every utterance a language code"
            )
        groups.setdefault(code, []).append(row)
    return groups


def _entry(
    words: EditCounts, chars: EditCounts, num_utterances: int, empty_references: int
) -> dict[str, Any]:
    return {
        "wer": words.rate,
        "cer": chars.rate,
        "num_utterances": num_utterances,
        "ref_words": words.ref_units,
        "ref_chars": chars.ref_units,
        "word_edits": words.edits,
        "char_edits": chars.edits,
        "empty_references": empty_references,
    }
