"""Global CMVN for ``prepare``: the per-bin mean and variance of a prepared training split, and the splits normalised
with them.

``prepare --normalization global`` featurises every split unnormalised (the raw log-mel frames), computes the
statistics over the training split's kept rows (:func:`compute_global_cmvn`: one pass over the rows, a batch at a
time, float64 sums of the frames and of their squares, so the memory does not grow with the split), stores them in the
feature extractor (``global_cmvn`` in ``processor_config.json``, which every model folder trained on the corpus
copies) and rewrites each split's rows normalised with them (:func:`normalize_splits`): the prepared rows stay the
model's input, as under per-utterance normalisation.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from datasets import Dataset, DatasetDict
from tqdm.auto import tqdm

from ..runtime.features import CmvnAccumulator, GlobalCmvn
from .feature_types import FeatureType

STATS_BATCH_ROWS = 64
"""Rows read at a time while the statistics are summed."""


def compute_global_cmvn(dataset: Dataset, input_name: str, *, batch_size: int = STATS_BATCH_ROWS,
                        progress: bool = True) -> GlobalCmvn:
    """Per-bin mean and variance of every unit of every row's ``input_name`` column (raw, unnormalised features).

    Args:
        dataset: a prepared split featurised without normalisation (a skipped row has no unit and counts for none).
        input_name: the column (``input_features``: ``[T, F]`` a row).
        batch_size: rows read at a time (memory: one batch).
        progress: show a progress bar over the rows.

    Raises:
        KeyError: the split has no ``input_name`` column (naming the ones it has).
        ValueError: no unit in the whole split, or rows of different widths.
    """
    if input_name not in dataset.column_names:
        raise KeyError(f"global CMVN reads {input_name!r}; the split has {', '.join(dataset.column_names)}")
    stats = CmvnAccumulator()
    rows = dataset.select_columns([input_name]).with_format("numpy")
    with tqdm(total=len(rows), desc="global CMVN statistics", unit="row", disable=not progress) as bar:
        for batch in rows.iter(batch_size=batch_size):
            for values in batch[input_name]:
                if len(values):
                    stats.add(np.asarray(values))
            bar.update(len(batch[input_name]))
    return stats.result()


def normalize_splits(prepared: DatasetDict, features: FeatureType, *, num_proc: int | None = None) -> DatasetDict:
    """Every split's ``features.input_name`` rows (raw) normalised with ``features``' statistics
    (:meth:`~adaptspeech.data.feature_types.FeatureType.normalize`); the other columns unchanged."""
    name = features.input_name

    def apply(batch: dict[str, list[Any]]) -> dict[str, list[Any]]:
        return {name: [features.normalize(np.asarray(values, np.float32)) if len(values) else features.empty()
                       for values in batch[name]]}

    return DatasetDict({split: part.map(apply, batched=True, num_proc=num_proc, features=part.features,
                                        desc=f"global CMVN {split}")
                        for split, part in prepared.items()})
