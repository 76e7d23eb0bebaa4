"""Pseudo-labelled rows as training data: what a labelling model's vocabulary must cover, which rows a confidence
filter keeps, and a pseudo-labelled folder read beside the labelled rows of a stage.

A pseudo-labelled folder (written by ``adaptspeech pseudo-label``,
:mod:`~adaptspeech.inference.pseudo_labels.labelling`) is a prepared folder: ``dataset/`` (split :data:`PSEUDO_SPLIT`:
the pool's rows with ``text``, ``labels``, ``confidence`` and ``labelled_by``), ``processor/`` (the target's) and
``prepare_config.json``, plus ``pseudo_label.json`` (the run's summary) and ``labels.jsonl`` (every row's label and
confidence, kept or not).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from .prepared_data import load_prepared
from .text import SPECIAL_TOKENS

PSEUDO_SPLIT = "train"
"""The split of a pseudo-labelled folder's ``DatasetDict`` that holds the kept rows."""
SUMMARY_FILE = "pseudo_label.json"
LABELS_FILE = "labels.jsonl"


class VocabularyMismatchError(ValueError):
    """A labelling model that cannot write some characters of the target's vocabulary."""


class NothingDecodedError(ValueError):
    """The labelling model decoded nothing: every label is empty (so no filter can keep one)."""

    def __init__(self, where: str, utterances: int) -> None:
        self.utterances = utterances
        super().__init__(f"{where}: the labelling model decoded nothing: empty text for all {utterances} utterances "
                         "(is it trained, and on this language?)")


def vocabulary_characters(tokenizer: Any) -> set[str]:
    """The characters a CTC tokenizer writes (its vocabulary less the special tokens)."""
    return {token for token in tokenizer.get_vocab() if token not in SPECIAL_TOKENS and len(token) == 1}


def check_vocabulary(labelling: Any, target: Any, where: str) -> None:
    """Refuse a labelling tokenizer that lacks characters of the target tokenizer: the pseudo-labels could never hold
    them, and the student would learn that they do not occur.

    Raises:
        VocabularyMismatchError: naming the missing characters and ``where`` (the model).
    """
    missing = sorted(vocabulary_characters(target) - vocabulary_characters(labelling))
    if missing:
        shown = " ".join(repr(c) for c in missing[:30]) + (" ..." if len(missing) > 30 else "")
        raise VocabularyMismatchError(
            f"{where}: the labelling model's vocabulary lacks {len(missing)} character(s) of the target's: {shown}; "
            "label with a model trained on the target's vocabulary"
        )


@dataclass(frozen=True)
class ConfidenceFilter:
    """Which pseudo-labels are kept: those with a confidence of at least ``min_confidence``, or the ``keep_fraction``
    most confident ones (ties in row order); never an empty label. Neither set: every non-empty label.

    Raises:
        ValueError: both set, or a value outside (0, 1].
    """

    min_confidence: float | None = None
    keep_fraction: float | None = None

    def __post_init__(self) -> None:
        if self.min_confidence is not None and self.keep_fraction is not None:
            raise ValueError("give a minimum confidence or a fraction to keep, not both")
        if self.min_confidence is not None and not 0.0 <= self.min_confidence <= 1.0:
            raise ValueError(f"min_confidence must be in [0, 1], got {self.min_confidence}")
        if self.keep_fraction is not None and not 0.0 < self.keep_fraction <= 1.0:
            raise ValueError(f"keep_fraction must be in (0, 1], got {self.keep_fraction}")

    def describe(self) -> str:
        if self.min_confidence is not None:
            return f"minimum confidence {self.min_confidence:g}"
        if self.keep_fraction is not None:
            return f"keep fraction {self.keep_fraction:g}"
        return "no confidence filter"

    def keep(self, confidences: Sequence[float], texts: Sequence[str]) -> np.ndarray:
        """``[N]`` bool: the rows kept."""
        confidences = np.asarray(confidences, dtype=np.float64)
        labelled = np.array([bool(t.strip()) for t in texts], dtype=bool)
        if self.min_confidence is not None:
            return labelled & (confidences >= self.min_confidence)
        if self.keep_fraction is not None:
            count = round(self.keep_fraction * len(confidences))
            order = np.argsort(-np.where(labelled, confidences, -np.inf), kind="stable")[:count]
            keep = np.zeros(len(confidences), dtype=bool)
            keep[order] = True
            return keep & labelled
        return labelled

    def check_kept(self, kept: np.ndarray, confidences: Sequence[float], where: str,
                   texts: Sequence[str] | None = None) -> None:
        """Refuse a filter that keeps nothing: one line naming it and the confidence quantiles, or, when every label
        of ``texts`` is empty, saying that the model decoded nothing (:class:`NothingDecodedError`)."""
        if kept.any():
            return
        if texts is not None and len(texts) and not any(t.strip() for t in texts):
            raise NothingDecodedError(where, len(texts))
        values = np.asarray(confidences, dtype=np.float64)
        quantiles = ", ".join(f"{name} {np.quantile(values, q):.3f}" for name, q in
                              (("min", 0.0), ("10%", 0.1), ("50%", 0.5), ("90%", 0.9), ("max", 1.0))) \
            if len(values) else "no labels"
        raise ValueError(f"{where}: every pseudo-label was filtered out by the {self.describe()} "
                         f"({len(values)} labels; confidence quantiles: {quantiles})")


def load_pseudo_labelled(folder: str | os.PathLike, languages: str | Sequence[str], target_tokenizer: Any,
                         confidence_filter: ConfidenceFilter) -> Any:
    """The pseudo-labelled rows of ``languages`` in ``folder`` that ``confidence_filter`` keeps, to train beside a
    stage's labelled rows.

    Raises:
        FileNotFoundError: not a pseudo-labelled folder.
        VocabularyMismatchError: its labels were written with another vocabulary than the stage's (label ids would
            mean other characters): naming the characters that differ.
        ValueError: no row of ``languages``, or the filter keeps none (naming its threshold and the quantiles).
    """
    folder = Path(folder)
    if not (folder / SUMMARY_FILE).is_file():
        raise FileNotFoundError(f"data.pseudo_labelled_dir {folder}: no {SUMMARY_FILE}, not a folder written by "
                                "`adaptspeech pseudo-label`")
    dataset, processor = load_prepared(folder)
    if processor.tokenizer.get_vocab() != target_tokenizer.get_vocab():
        ours, theirs = vocabulary_characters(target_tokenizer), vocabulary_characters(processor.tokenizer)
        differ = sorted(ours ^ theirs)
        raise VocabularyMismatchError(
            f"data.pseudo_labelled_dir {folder}: its labels use another vocabulary than the stage's prepared data "
            f"(characters in one only: {' '.join(repr(c) for c in differ[:30]) or 'none; other ids'}); pseudo-label "
            "with --target the stage's prepared folder"
        )
    wanted = {languages} if isinstance(languages, str) else set(languages)
    rows = dataset[PSEUDO_SPLIT]
    rows = rows.filter(lambda lang: lang in wanted, input_columns=["language"])
    if len(rows) == 0:
        raise ValueError(f"data.pseudo_labelled_dir {folder}: no row of language(s) {', '.join(sorted(wanted))} "
                         f"(it holds {', '.join(sorted(set(dataset[PSEUDO_SPLIT].unique('language'))))})")
    kept = confidence_filter.keep(rows["confidence"], rows["text"])
    confidence_filter.check_kept(kept, rows["confidence"], f"data.pseudo_labelled_dir {folder}")
    return rows.select(np.flatnonzero(kept))
