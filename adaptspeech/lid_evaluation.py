"""How well the language is told on a prepared split: accuracy overall and per language, the confusion counts, for
whole utterances or for their first seconds only.

A prefix is the first ``seconds`` of each utterance's model input, normalised over itself (as ``prepare`` would
normalise that audio alone: per-utterance standardisation does not see the rest; standardising the standardised
prefix again gives the same numbers as standardising the raw prefix).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from .data.array_rows import column_list, take_rows, with_array_rows
from .data.feature_types import FeatureType
from .runtime.features import normalize_utterance


def prefix_row(row: dict[str, Any], kind: FeatureType, seconds: float) -> dict[str, Any]:
    """``row`` with its model input cut to the first ``seconds`` (renormalised when the features are)."""
    units = kind.num_units(round(seconds * kind.sampling_rate))
    values = np.asarray(row[kind.input_name], np.float32)
    if len(values) <= units:
        return row
    values = values[:units]
    return {**row, kind.input_name: normalize_utterance(values, axis=0) if kind.do_normalize else values}


@torch.no_grad()
def identify_dataset(identifier: Any, dataset: Any, processor: Any, batch_size: int = 16,
                     prefix_seconds: float | None = None) -> np.ndarray:
    """Log-posteriors ``[N, L]`` (over ``identifier.languages``) of every row of a prepared split, in order.

    Args:
        identifier: a :class:`~adaptspeech.inference.language_id.LanguageIdentifier`.
        dataset: the prepared split.
        processor: the routed model's processor (its feature type names the input column).
        prefix_seconds: read only the first seconds of each row (None: the whole row).
    """
    from .data.collator import DataCollatorCTCWithPadding

    kind = FeatureType.of(processor.feature_extractor)
    collator = DataCollatorCTCWithPadding(processor, feature_type=kind.name, ctc_labels=False)
    rows = with_array_rows(dataset)
    lengths = column_list(dataset, "input_length") if "input_length" in dataset.column_names else [0] * len(dataset)
    order = sorted(range(len(dataset)), key=lambda i: lengths[i])
    out = np.zeros((len(dataset), len(identifier.languages)), np.float32)
    for start in range(0, len(order), batch_size):
        indices = order[start:start + batch_size]
        batch_rows = take_rows(rows, indices)
        if prefix_seconds is not None:
            batch_rows = [prefix_row(row, kind, prefix_seconds) for row in batch_rows]
        out[indices] = identifier.log_probs_batch(collator(batch_rows)).numpy()
    return out


def accuracy_report(log_probs: np.ndarray, languages: Sequence[str], truth: Sequence[str]) -> dict[str, Any]:
    """Accuracy overall and per true language, and the confusion counts ``{true: {predicted: n}}``.

    Args:
        log_probs: ``[N, L]`` over ``languages``.
        truth: each row's language (a language outside ``languages`` counts as an error every time).
    """
    predicted = [languages[i] for i in np.asarray(log_probs).argmax(-1)]
    confusion: dict[str, Counter] = {}
    for true, guess in zip(truth, predicted, strict=True):
        confusion.setdefault(true, Counter())[guess] += 1
    per_language = {
        true: {"accuracy": counts[true] / sum(counts.values()), "num_utterances": sum(counts.values())}
        for true, counts in sorted(confusion.items())
    }
    correct = sum(t == p for t, p in zip(truth, predicted, strict=True))
    return {
        "accuracy": correct / max(len(truth), 1),
        "num_utterances": len(truth),
        "per_language": per_language,
        "confusion": {true: dict(sorted(counts.items())) for true, counts in sorted(confusion.items())},
        "languages": list(languages),
    }


def lid_accuracy(model: Any, dataset: Any, processor: Any, batch_size: int = 16,
                 prefix_seconds: float | None = None) -> dict[str, Any]:
    """:func:`accuracy_report` of ``model``'s own language-ID head on a prepared split."""
    from .inference.language_id import HeadIdentifier

    identifier = HeadIdentifier(model, processor)
    log_probs = identify_dataset(identifier, dataset, processor, batch_size, prefix_seconds)
    return accuracy_report(log_probs, identifier.languages, column_list(dataset, "language"))
