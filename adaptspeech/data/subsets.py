"""Low-resource subsets (N minutes / hours / utterances per language, speaker-disjoint, seeded) and
temperature-based multilingual mixing.

Mixing follows the usual temperature rule: language ``l`` with ``n_l`` utterances is sampled with
probability ``p_l = n_l^(1/T) / sum_k n_k^(1/T)``; ``T = 1`` keeps the natural proportions, larger ``T``
flattens them toward uniform, which up-samples the low-resource languages.
"""

from __future__ import annotations

import logging
import math
import re
import zlib
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import torch
from datasets import Dataset, DatasetDict

logger = logging.getLogger(__name__)

_UNIT_NAMES = {
    "minutes": ("m", "min", "mins", "minute", "minutes"),
    "hours": ("h", "hr", "hrs", "hour", "hours"),
    "utterances": ("utt", "utts", "utterance", "utterances"),
}
_UNITS = {alias: unit for unit, aliases in _UNIT_NAMES.items() for alias in aliases}
_SIZE = re.compile(r"^\s*(\d+(?:\.\d*)?|\.\d+)\s*([a-z]+)\s*$", re.IGNORECASE)


@dataclass(frozen=True)
class SubsetSize:
    """A per-language budget: ``SubsetSize(30, "minutes")``, ``SubsetSize(2, "hours")``, ....

    ``unit`` is one of ``minutes``, ``hours``, ``utterances``.
    """

    amount: float
    unit: str

    def __post_init__(self) -> None:
        if self.unit not in _UNIT_NAMES:
            raise ValueError(f"subset unit: unknown value {self.unit!r}; allowed values: {', '.join(_UNIT_NAMES)}")
        if not self.amount > 0:
            raise ValueError(f"subset size must be positive, got {self.amount} {self.unit}")
        if self.unit == "utterances" and self.amount != int(self.amount):
            raise ValueError(f"a number of utterances must be whole, got {self.amount}")

    @classmethod
    def parse(cls, value: str | int | SubsetSize) -> SubsetSize:
        """Parse ``"30min"``, ``"1.5h"``, ``"500utt"`` (m/min/minutes, h/hr/hours, utt/utterances); int = utterances."""
        if isinstance(value, SubsetSize):
            return value
        if isinstance(value, int):
            return cls(value, "utterances")
        match = _SIZE.match(str(value))
        if not match or match.group(2).lower() not in _UNITS:
            raise ValueError(
                f"subset size {value!r}: expected a number and a unit, e.g. 30min, 1.5h, 500utt "
                f"(units: {', '.join(sorted(_UNITS))})"
            )
        return cls(float(match.group(1)), _UNITS[match.group(2).lower()])

    @property
    def is_duration(self) -> bool:
        return self.unit != "utterances"

    @property
    def budget(self) -> float:
        """Seconds for a duration, else the number of utterances."""
        return self.amount * {"minutes": 60.0, "hours": 3600.0, "utterances": 1.0}[self.unit]

    def __str__(self) -> str:
        return f"{self.amount:g} {self.unit}"


def speakers(dataset: Dataset, speaker_column: str = "client_id") -> set[str]:
    """The non-empty speaker ids of ``dataset``."""
    return {s for s in dataset[speaker_column] if s}


def _column(dataset: Dataset, name: str) -> list:
    if name not in dataset.column_names:
        raise ValueError(f"column {name!r} not in the dataset; columns: {', '.join(dataset.column_names)}")
    return list(dataset[name])


def _rng(seed: int, language: str) -> np.random.Generator:
    return np.random.default_rng([seed, zlib.crc32(language.encode())])


def selection_order(
    languages: Sequence[str],
    speaker_ids: Sequence[str],
    *,
    seed: int = 0,
    exclude_speakers: Iterable[str] = (),
) -> dict[str, list[int]]:
    """Per language, every eligible row in the order a subset takes them (the order behind :func:`subset_indices`).

    A language's speakers (rows with an empty speaker id count as one speaker each), minus ``exclude_speakers``, are
    shuffled by ``(seed, language)``; each speaker's rows follow one another, shuffled too. Every budget takes a
    prefix of this order, so two budgets of the same seed and exclusions are nested.

    Returns:
        language (in order of first appearance) -> row indices.
    """
    excluded = set(exclude_speakers)
    lang_array = np.asarray(languages, dtype=object)
    orders: dict[str, list[int]] = {}
    for language in dict.fromkeys(languages):
        rng = _rng(seed, language)
        groups: dict[str, list[int]] = {}
        for row in np.flatnonzero(lang_array == language).tolist():
            speaker = speaker_ids[row]
            if speaker in excluded:
                continue
            groups.setdefault(speaker or f"\0row{row}", []).append(row)
        names = sorted(groups)
        order: list[int] = []
        for k in rng.permutation(len(names)).tolist():
            rows = groups[names[k]]
            order.extend(rows[j] for j in rng.permutation(len(rows)).tolist())
        orders[language] = order
    return orders


def _budget_prefix(
    order: Sequence[int], durations: Sequence[float | None] | None, size: SubsetSize
) -> tuple[int, float]:
    """``(n, total)``: the first ``n`` rows of ``order`` fit ``size`` (the next one would take the total over it)."""
    total = 0.0
    for n, row in enumerate(order):
        cost = float(durations[row]) if size.is_duration else 1.0
        if total + cost > size.budget:
            return n, total
        total += cost
    return len(order), total


def _check_durations(size: SubsetSize, durations: Sequence[float | None] | None) -> None:
    if size.is_duration and (durations is None or any(d is None for d in durations)):
        raise ValueError(
            f"a {size.unit} budget needs the duration of every clip: use the prepared dataset "
            "(prepare_dataset adds 'duration') or a release with clip_durations.tsv"
        )


def nested_subset_indices(
    languages: Sequence[str],
    speaker_ids: Sequence[str],
    durations: Sequence[float | None] | None,
    sizes: Sequence[str | int | SubsetSize],
    *,
    seed: int = 0,
    exclude_speakers: Iterable[str] = (),
) -> list[list[int]]:
    """Row indices of several budgets cut from one :func:`selection_order`: each is a prefix of the same order, so
    of any two, the smaller budget's rows are all in the larger one's (``1min`` inside ``3min`` inside ``10min``).

    Each entry equals :func:`subset_indices` of that size with the same seed and exclusions (sorted row indices); a
    language short of a budget gives all its rows and a warning.
    """
    parsed = [SubsetSize.parse(size) for size in sizes]
    for size in parsed:
        _check_durations(size, durations)
    orders = selection_order(languages, speaker_ids, seed=seed, exclude_speakers=exclude_speakers)
    out: list[list[int]] = []
    for size in parsed:
        selected: list[int] = []
        for language, order in orders.items():
            n, total = _budget_prefix(order, durations, size)
            if n == len(order) and total < size.budget:
                have = f"{total / (size.budget / size.amount):g} {size.unit}"
                logger.warning("language %s has only %s (of %s) for the subset", language, have, size)
            selected.extend(order[:n])
        out.append(sorted(selected))
    return out


def subset_indices(
    languages: Sequence[str],
    speaker_ids: Sequence[str],
    durations: Sequence[float | None] | None,
    size: str | int | SubsetSize,
    *,
    seed: int = 0,
    exclude_speakers: Iterable[str] = (),
) -> list[int]:
    """Row indices of a low-resource subset (the algorithm behind :func:`low_resource_subset`).

    For each language: its rows in :func:`selection_order` (whole speakers in a ``(seed, language)`` shuffle,
    ``exclude_speakers`` left out) are taken until the budget is full (the last speaker may be cut). A budget is an
    upper bound: the selection stops before the first row that would take the total over it, so "10min" is at most
    10 minutes (short of it by less than one clip). A language short of the budget gives all its rows and a warning.

    Returns:
        Sorted row indices.
    """
    return nested_subset_indices(
        languages, speaker_ids, durations, [size], seed=seed, exclude_speakers=exclude_speakers
    )[0]


def low_resource_subset(
    dataset: Dataset,
    size: str | int | SubsetSize,
    *,
    seed: int = 0,
    languages: Iterable[str] | None = None,
    exclude_speakers: Iterable[str] = (),
    speaker_column: str = "client_id",
    language_column: str = "language",
    duration_column: str = "duration",
) -> Dataset:
    """N minutes, hours or utterances of each language, whole speakers at a time, deterministic by ``seed``.

    Args:
        dataset: rows with ``language``, ``client_id`` and (for a duration budget) ``duration`` in seconds.
        size: ``"30min"``, ``"2h"``, ``"100utt"``, an int (utterances) or a :class:`SubsetSize`.
        seed (`int`, defaults to 0): the same seed gives the same rows.
        languages: restrict to these languages (default: all in the dataset).
        exclude_speakers: speakers that must not appear, e.g. ``speakers(dev) | speakers(test)``; this makes
            the subset speaker-disjoint from them.

    Returns:
        `Dataset`: the selected rows in their original order.
    """
    langs = _column(dataset, language_column)
    spk = _column(dataset, speaker_column) if speaker_column in dataset.column_names else [""] * len(langs)
    size = SubsetSize.parse(size)
    durations = _column(dataset, duration_column) if size.is_duration else None
    indices = subset_indices(langs, spk, durations, size, seed=seed, exclude_speakers=exclude_speakers)
    if languages is not None:
        keep = set(languages)
        unknown = sorted(keep - set(langs))
        if unknown:
            raise ValueError(
                f"languages: {', '.join(unknown)} not in the dataset; present: {', '.join(sorted(set(langs)))}"
            )
        indices = [i for i in indices if langs[i] in keep]
    return dataset.select(indices)


def nested_subsets(
    dataset: Dataset,
    sizes: Sequence[str | int | SubsetSize],
    *,
    seed: int = 0,
    exclude_speakers: Iterable[str] = (),
    speaker_column: str = "client_id",
    language_column: str = "language",
    duration_column: str = "duration",
) -> dict[str, Dataset]:
    """Nested low-resource subsets, e.g. ``["1min", "3min", "10min"]``: the 1-minute rows are inside the 3-minute
    rows, which are inside the 10-minute rows (each budget is a prefix of one :func:`selection_order`).

    Each subset is the one :func:`low_resource_subset` gives for its size, seed and ``exclude_speakers`` (what a
    training stage with ``data.train_subset`` trains on), so a learning curve over budgets adds audio to the same
    speakers and clips instead of drawing afresh. Pass ``speakers(dev) | speakers(test)`` to keep every budget
    speaker-disjoint from the evaluation sets.

    Returns:
        ``str(size)`` as given (``"1min"``) -> the subset, its rows in their original order, in the order of ``sizes``.
    """
    langs = _column(dataset, language_column)
    spk = _column(dataset, speaker_column) if speaker_column in dataset.column_names else [""] * len(langs)
    parsed = [SubsetSize.parse(size) for size in sizes]
    durations = _column(dataset, duration_column) if any(size.is_duration for size in parsed) else None
    keys = [str(size) for size in sizes]
    if len(set(keys)) != len(keys):
        raise ValueError(f"nested subset sizes must differ, got {keys}")
    indices = nested_subset_indices(langs, spk, durations, parsed, seed=seed, exclude_speakers=exclude_speakers)
    return {key: dataset.select(rows) for key, rows in zip(keys, indices, strict=True)}


def speaker_disjoint_split(
    dataset: Dataset,
    sizes: Mapping[str, str | int | SubsetSize],
    *,
    seed: int = 0,
    speaker_column: str = "client_id",
    language_column: str = "language",
    duration_column: str = "duration",
) -> DatasetDict:
    """Carve several subsets (e.g. ``{"train": "1h", "dev": "10min"}``) whose speakers never overlap.

    Subsets are drawn in the order given, each excluding the speakers of those before it.
    """
    out: dict[str, Dataset] = {}
    used: set[str] = set()
    for offset, (name, size) in enumerate(sizes.items()):
        part = low_resource_subset(
            dataset,
            size,
            seed=seed + offset,
            exclude_speakers=used,
            speaker_column=speaker_column,
            language_column=language_column,
            duration_column=duration_column,
        )
        used |= speakers(part, speaker_column) if speaker_column in part.column_names else set()
        out[name] = part
    return DatasetDict(out)


def language_sampling_probabilities(counts: Mapping[str, float], temperature: float) -> dict[str, float]:
    """``p_l = n_l^(1/T) / sum_k n_k^(1/T)`` for each language ``l`` with ``n_l`` utterances (or hours)."""
    if not temperature > 0:
        raise ValueError(f"temperature must be > 0, got {temperature}")
    if not counts or any(n < 0 for n in counts.values()) or sum(counts.values()) <= 0:
        raise ValueError(f"language counts must be non-negative with a positive total, got {dict(counts)}")
    weights = {lang: float(n) ** (1.0 / temperature) if n > 0 else 0.0 for lang, n in counts.items()}
    total = sum(weights.values())
    return {lang: w / total for lang, w in weights.items()}


def _largest_remainder(total: int, probs: Mapping[str, float]) -> dict[str, int]:
    exact = {lang: total * p for lang, p in probs.items()}
    counts = {lang: math.floor(x) for lang, x in exact.items()}
    order = sorted(exact, key=lambda lang: counts[lang] - exact[lang])  # largest fractional part first, stable
    for lang in order[: total - sum(counts.values())]:
        counts[lang] += 1
    return counts


def mixture_indices(
    languages: Sequence[str], temperature: float, num_samples: int | None, rng: np.random.Generator
) -> np.ndarray:
    """Row indices of one temperature-sampled pass over a multilingual dataset.

    Language ``l`` gets ``round(num_samples * p_l)`` draws (largest-remainder rounding, so they sum to
    ``num_samples``, default the number of rows). A language's rows are drawn without replacement, starting
    a fresh permutation each time they run out (so up-sampling repeats every row evenly); the result is
    shuffled.
    """
    lang_array = np.asarray(languages, dtype=object)
    rows = {lang: np.flatnonzero(lang_array == lang) for lang in dict.fromkeys(languages)}
    total = len(languages) if num_samples is None else int(num_samples)
    if total < 1:
        raise ValueError(f"num_samples must be >= 1, got {num_samples}")
    probs = language_sampling_probabilities({lang: len(r) for lang, r in rows.items()}, temperature)
    draws = [np.zeros(0, dtype=np.int64)]
    for lang, k in _largest_remainder(total, probs).items():
        passes = [rng.permutation(rows[lang]) for _ in range(-(-k // len(rows[lang])))]
        if passes:
            draws.append(np.concatenate(passes)[:k])
    return rng.permutation(np.concatenate(draws).astype(np.int64))


def temperature_mix(
    dataset: Dataset,
    temperature: float,
    *,
    num_samples: int | None = None,
    seed: int = 0,
    language_column: str = "language",
) -> Dataset:
    """A fixed temperature-sampled mix of ``dataset``'s languages (see :func:`mixture_indices`).

    For a fresh draw every epoch use :class:`TemperatureSampler` with the trainer's data loader instead.
    """
    indices = mixture_indices(_column(dataset, language_column), temperature, num_samples, np.random.default_rng(seed))
    return dataset.select(indices.tolist())


class TemperatureSampler(torch.utils.data.Sampler[int]):
    """Temperature-based language sampling as a ``torch`` sampler, redrawn each epoch.

    Args:
        languages: the language of each row of the dataset, e.g. ``dataset["language"]``.
        temperature (`float`): ``T`` of ``p_l ∝ n_l^(1/T)``.
        num_samples (`int`, *optional*): indices per epoch (default the number of rows).
        seed (`int`, defaults to 0): epoch ``e`` draws with ``(seed, e)``.
    """

    def __init__(
        self, languages: Sequence[str], temperature: float, num_samples: int | None = None, seed: int = 0
    ) -> None:
        self.languages = list(languages)
        self.temperature = temperature
        self.num_samples = len(self.languages) if num_samples is None else int(num_samples)
        self.seed = seed
        self.epoch = 0
        language_sampling_probabilities({"_": 1}, temperature)  # validate the temperature now

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __iter__(self) -> Iterator[int]:
        rng = np.random.default_rng([self.seed, self.epoch])
        yield from mixture_indices(self.languages, self.temperature, self.num_samples, rng).tolist()

    def __len__(self) -> int:
        return self.num_samples
