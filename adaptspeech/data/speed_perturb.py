"""Speed perturbation (Ko et al. 2015, "Audio augmentation for speech recognition"; the Kaldi / ESPnet convention):
each training utterance is played ``f`` times faster, ``f`` drawn from a list such as ``[0.9, 1.0, 1.1]``, which
changes its tempo and its pitch together (as ``sox speed f``). A data option every stage has:
``data.speed_perturb: [0.9, 1.0, 1.1]``.

Resampled on the fly with soxr (:func:`speed_perturb`: the samples read as recorded at ``f x 16 kHz`` and resampled
to 16 kHz; ``len / f`` samples), then featurised as ``prepare`` does (:meth:`~adaptspeech.data.feature_types.
FeatureType.extract`). :class:`SpeedPerturbedRows` wraps a stage's training rows: each time a row is read it draws its
factor from a generator seeded by (seed, epoch, row), so a run draws the same factors again; a factor of 1 gives the
row as prepared. The waveform comes from the row itself (``input_values``), from its source file and offsets (pool and
pseudo-labelled rows: ``source_file``, ``start``, ``end``), or from the corpus the prepared folder was made from
(``prepare_config.json``'s ``source``, the row's ``language`` and ``path``); decoded waveforms are kept in memory
(:class:`WaveformReader`). A factor that leaves an utterance too short for its labels (CTC needs a frame per label and
per repeat) is replaced by 1.
"""

from __future__ import annotations

import itertools
import os
from collections import OrderedDict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import soxr
import torch

from .audio import load_audio
from .common_voice import find_language_dir
from .feature_types import FeatureType
from .prepared_data import prepared_corpus_source

SAMPLING_RATE = 16000


def speed_perturb(waveform: np.ndarray, factor: float, sampling_rate: int = SAMPLING_RATE) -> np.ndarray:
    """``waveform`` ``[S]`` played ``factor`` times faster: ``[round(S / factor)]`` float32 samples (soxr, ``HQ``);
    ``factor == 1`` returns it unchanged.

    Raises:
        ValueError: a factor that is not a positive finite number.
    """
    if not (np.isfinite(factor) and factor > 0):
        raise ValueError(f"speed factor must be a positive number, got {factor}")
    if factor == 1.0:
        return np.asarray(waveform, dtype=np.float32)
    return soxr.resample(np.asarray(waveform, dtype=np.float32), sampling_rate * factor, sampling_rate,
                         quality="HQ").astype(np.float32)


class WaveformReader:
    """A prepared row's 16-kHz waveform (module docstring), decoded once and kept (least recently used first out
    beyond ``max_seconds`` of audio).

    Args:
        corpus: the corpus folder the prepared rows were made from (``prepare_config.json``'s ``source``), or None.
        max_seconds: audio kept in memory (default 2 hours: 230 MB).
    """

    def __init__(self, corpus: str | os.PathLike[str] | None, max_seconds: float = 7200.0) -> None:
        self.corpus = Path(corpus) if corpus else None
        self.max_samples = int(max_seconds * SAMPLING_RATE)
        self._cache: OrderedDict[tuple[str, ...], np.ndarray] = OrderedDict()
        self._samples = 0
        self._language_dirs: dict[str, Path] = {}

    @classmethod
    def of_prepared(cls, prepared_dir: str | os.PathLike[str] | None) -> WaveformReader:
        """The reader of a prepared folder's rows (its corpus from ``prepare_config.json``)."""
        return cls(prepared_corpus_source(prepared_dir) if prepared_dir is not None else None)

    def _clip(self, row: Any) -> tuple[tuple[str, ...], Path, float | None, float | None]:
        if row.get("source_file"):
            return ((row["source_file"], str(row["start"]), str(row["end"])), Path(row["source_file"]),
                    float(row["start"]), float(row["end"]))

        if self.corpus is None or not self.corpus.is_dir():
            raise FileNotFoundError(
                f"speed perturbation of row {row.get('path', '?')}: its audio is not in the row and the prepared "
                f"folder's corpus ({self.corpus}) is not there to read it from"
            )
        language = row["language"]
        if language not in self._language_dirs:
            self._language_dirs[language] = find_language_dir(self.corpus, language)
        path = self._language_dirs[language] / "clips" / row["path"]
        return (str(path),), path, None, None

    def __call__(self, row: Any) -> np.ndarray:
        """``[S]`` float32 samples of ``row``."""
        if "input_values" in row:
            return np.asarray(row["input_values"], dtype=np.float32)
        key, path, start, end = self._clip(row)
        cached = self._cache.get(key)
        if cached is not None:
            self._cache.move_to_end(key)
            return cached
        wave = load_audio(path, SAMPLING_RATE)
        if start is not None and end is not None:
            wave = wave[round(start * SAMPLING_RATE) : round(end * SAMPLING_RATE)]
        self._cache[key] = wave
        self._samples += len(wave)
        while self._samples > self.max_samples and len(self._cache) > 1:
            _, dropped = self._cache.popitem(last=False)
            self._samples -= len(dropped)
        return wave


def check_factors(factors: Sequence[float]) -> tuple[float, ...]:
    """The factors as floats; refuses an empty list and a factor that is not in (0.5, 2]."""
    values = tuple(float(f) for f in factors)
    if not values or not all(0.5 < f <= 2.0 for f in values):
        raise ValueError(f"data.speed_perturb: a non-empty list of speed factors in (0.5, 2], got {list(factors)}")
    return values


def _fits_labels(num_frames: int, labels: Sequence[int]) -> bool:
    repeats = sum(a == b for a, b in itertools.pairwise(labels))
    return num_frames >= len(labels) + repeats


class SpeedPerturbedRows(torch.utils.data.Dataset):
    """A stage's training rows with speed perturbation (module docstring).

    Args:
        rows: prepared rows (a ``datasets.Dataset``, numpy-formatted or not).
        factors: the speed factors, drawn uniformly per row and epoch.
        features: the model input the rows hold (:meth:`FeatureType.of` of the stage's feature extractor).
        reader: where the waveforms come from.
        encoder_stride: input samples per encoder frame (the too-short check).
        seed: the draws' seed.
    """

    def __init__(self, rows: Any, factors: Sequence[float], features: FeatureType, reader: WaveformReader,
                 encoder_stride: int, seed: int = 0) -> None:
        self.rows = rows
        self.factors = check_factors(factors)
        self.features = features
        self.reader = reader
        self.encoder_stride = encoder_stride
        self.seed = seed
        self.epoch = 0
        self.counts: dict[float, int] = {}
        self.reset_counts()

    def reset_counts(self) -> None:
        """Count the factors from here on (:attr:`counts`: rows read at each factor; the stage resets it before
        training, so that its summary counts the training reads only)."""
        self.counts = {f: 0 for f in self.factors}

    def set_epoch(self, epoch: int) -> None:
        """Draw the next epoch's factors (the Trainer's epoch callback calls it)."""
        self.epoch = int(epoch)

    def __len__(self) -> int:
        return len(self.rows)

    @property
    def column_names(self) -> list[str]:
        return list(self.rows.column_names)

    def factor(self, index: int) -> float:
        """The speed factor of row ``index`` in this epoch."""
        rng = np.random.default_rng([self.seed, self.epoch, index])
        return self.factors[int(rng.integers(len(self.factors)))]

    def __getitem__(self, index: Any) -> Any:
        if isinstance(index, str):  # a whole column (samplers read lengths and languages)
            return self.rows[index]
        row = self.rows[int(index)]
        factor = self.factor(int(index))
        if factor == 1.0:
            self.counts[factor] += 1
            return row
        wave = speed_perturb(self.reader(row), factor)
        if "labels" in row and not _fits_labels(len(wave) // self.encoder_stride, list(row["labels"])):
            self.counts[1.0] = self.counts.get(1.0, 0) + 1
            return row
        values = self.features.extract(wave)
        row = dict(row)
        row.pop("input_values", None)
        row[self.features.input_name] = values
        row["input_length"] = len(values)
        self.counts[factor] += 1
        return row

    def __getitems__(self, indices: list[int]) -> list[Any]:
        return [self[i] for i in indices]
