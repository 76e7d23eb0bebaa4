"""Labelled and pseudo-labelled rows in every batch, in a set share: the training rows of a self-training stage.

:func:`mix_sources` puts the pseudo-labelled rows after the labelled ones (the columns both have, with the labelled
rows' types); :class:`SourceMixSampler` draws the training order: every consecutive block of ``batch_size`` indices
(one batch of one process) holds ``round(share x batch_size)`` pseudo-labelled rows and the rest labelled ones, each
source read in its own shuffled order and started again when used up. An epoch is enough batches to read the larger
source once (in its share). Noisy-student training (Xie et al. 2020; Park et al. 2020 for speech) mixes the two sources
this way, so that the few labelled rows are seen in every batch.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import torch
from datasets import Value, concatenate_datasets

#: the columns a training batch reads, kept when the two sources are joined
MIX_COLUMNS = ("input_features", "input_values", "labels", "input_length", "language", "text", "path", "duration",
               "source_file", "start", "end")


def mix_sources(labelled: Any, pseudo: Any) -> Any:
    """The labelled rows, then the pseudo-labelled ones (``datasets.Dataset``\\ s), on the columns of
    :data:`MIX_COLUMNS` the labelled rows have (``source_file`` / ``start`` / ``end`` empty for them)."""
    if "source_file" not in labelled.column_names:
        n = len(labelled)
        labelled = labelled.add_column("source_file", [""] * n).add_column("start", [0.0] * n)
        labelled = labelled.add_column("end", [0.0] * n)
        labelled = labelled.cast_column("start", Value("float64")).cast_column("end", Value("float64"))
    columns = [c for c in MIX_COLUMNS if c in labelled.column_names and c in pseudo.column_names]
    labelled = labelled.select_columns(columns)
    pseudo = pseudo.select_columns(columns).cast(labelled.features)
    return concatenate_datasets([labelled, pseudo])


class SourceMixSampler(torch.utils.data.Sampler[int]):
    """Indices into ``mix_sources(labelled, pseudo)`` with ``share`` of every batch pseudo-labelled (module
    docstring).

    Args:
        num_labelled: labelled rows (indices ``[0, num_labelled)``).
        num_pseudo: pseudo-labelled rows (indices after them).
        share: the pseudo-labelled share of a batch, in (0, 1).
        batch_size: rows per batch of one process.
        seed: the shuffles' seed (with the epoch).
    """

    def __init__(self, num_labelled: int, num_pseudo: int, share: float, batch_size: int, seed: int = 0) -> None:
        if not 0.0 < share < 1.0:
            raise ValueError(f"data.pseudo_labelled_share must be in (0, 1), got {share}")
        if num_labelled < 1 or num_pseudo < 1:
            raise ValueError(f"both sources need rows: {num_labelled} labelled, {num_pseudo} pseudo-labelled")
        self.num_labelled, self.num_pseudo = num_labelled, num_pseudo
        self.batch_size = batch_size
        self.pseudo_per_batch = min(batch_size - 1, max(1, round(share * batch_size)))
        labelled_per_batch = batch_size - self.pseudo_per_batch
        self.batches = max(-(-num_labelled // labelled_per_batch), -(-num_pseudo // self.pseudo_per_batch))
        self.seed = seed
        self.epoch = 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = int(epoch)

    def __len__(self) -> int:
        return self.batches * self.batch_size

    @staticmethod
    def _stream(size: int, rng: np.random.Generator) -> Iterator[int]:
        while True:
            yield from rng.permutation(size).tolist()

    def __iter__(self) -> Iterator[int]:
        rng = np.random.default_rng([self.seed, self.epoch])
        labelled, pseudo = self._stream(self.num_labelled, rng), self._stream(self.num_pseudo, rng)
        for _ in range(self.batches):
            block = [next(labelled) for _ in range(self.batch_size - self.pseudo_per_batch)]
            block += [self.num_labelled + next(pseudo) for _ in range(self.pseudo_per_batch)]
            yield from (block[i] for i in rng.permutation(len(block)))
