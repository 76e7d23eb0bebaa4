"""Is system A's error rate really lower than system B's on this test set? Paired bootstrap over utterances.

Koehn (2004), "Statistical significance tests for machine translation evaluation": draw the test set's utterances
with replacement ``num_samples`` times; on each draw compute both systems' corpus-level rates (edits summed over
the drawn utterances divided by their reference units summed, as :class:`~adaptspeech.metrics.scoring.EditCounts`
does) and their difference. The spread of the differences is a confidence interval for ``rate_a - rate_b``, and
the share of draws where A is not better estimates how often the ranking would flip on a test set like this one.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from .scoring import Unit, count_edits


def utterance_edits(
    predictions: Sequence[str], references: Sequence[str], unit: Unit = "char"
) -> tuple[np.ndarray, np.ndarray]:
    """Edits and reference units of each utterance.

    Returns:
        ``(edits [N], ref_units [N])`` as int64 arrays; their sums give the corpus-level counts of
        :func:`~adaptspeech.metrics.scoring.count_edits`.
    """
    if len(predictions) != len(references):
        raise ValueError(f"{len(predictions)} predictions for {len(references)} references")
    counts = [count_edits([p], [r], unit) for p, r in zip(predictions, references, strict=True)]
    return (
        np.array([c.edits for c in counts], dtype=np.int64),
        np.array([c.ref_units for c in counts], dtype=np.int64),
    )


@dataclass(frozen=True)
class PairedBootstrap:
    """Result of :func:`paired_bootstrap` (rates as fractions, e.g. 0.15 = 15%).

    Args:
        rate_a (`float`), rate_b (`float`): the two systems' corpus-level rates on the full test set.
        delta (`float`): ``rate_a - rate_b`` on the full test set (negative: A is better).
        low (`float`), high (`float`): the central ``confidence`` interval of the resampled differences.
        p_not_better (`float`): share of resamples where A's rate is not below B's.
        num_samples (`int`), confidence (`float`): the settings used.
    """

    rate_a: float
    rate_b: float
    delta: float
    low: float
    high: float
    p_not_better: float
    num_samples: int
    confidence: float

    def describe(self, name_a: str = "A", name_b: str = "B") -> str:
        """One line, in percentage points: ``A - B = -0.08 points [95% CI -0.61, +0.44], A not better in 38%``."""
        return (
            f"{name_a} - {name_b} = {100 * self.delta:+.2f} points "
            f"[{100 * self.confidence:.0f}% CI {100 * self.low:+.2f}, {100 * self.high:+.2f}], "
            f"{name_a} not better in {100 * self.p_not_better:.0f}% of {self.num_samples} resamples"
        )


def paired_bootstrap(
    edits_a: Sequence[int] | np.ndarray,
    edits_b: Sequence[int] | np.ndarray,
    ref_units: Sequence[int] | np.ndarray,
    num_samples: int = 1000,
    confidence: float = 0.95,
    seed: int = 0,
) -> PairedBootstrap:
    """Paired bootstrap of ``rate_a - rate_b`` over utterances (module docstring).

    Args:
        edits_a (`[N]`), edits_b (`[N]`): per-utterance edit counts of the two systems, same utterance order.
        ref_units (`[N]`): per-utterance reference lengths (the same for both systems).
        num_samples (`int`, defaults to 1000): resamples.
        confidence (`float`, defaults to 0.95): width of the interval.
        seed (`int`, defaults to 0): the same seed gives the same draws.

    Raises:
        ValueError: on arrays of different lengths, no utterances, or settings out of range.
    """
    a = np.asarray(edits_a, dtype=np.float64)
    b = np.asarray(edits_b, dtype=np.float64)
    n = np.asarray(ref_units, dtype=np.float64)
    if not (a.shape == b.shape == n.shape) or a.ndim != 1:
        raise ValueError(f"edits_a, edits_b and ref_units must be 1-D and equal in length, got {a.shape}, "
                         f"{b.shape}, {n.shape}")
    if a.size == 0:
        raise ValueError("paired_bootstrap needs at least one utterance")
    if num_samples < 1:
        raise ValueError(f"num_samples must be >= 1, got {num_samples}")
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    draws = np.random.default_rng(seed).integers(0, a.size, size=(num_samples, a.size))  # [S, N]
    units = np.maximum(n[draws].sum(1), 1.0)  # [S]
    deltas = (a[draws].sum(1) - b[draws].sum(1)) / units  # [S]
    tail = (1 - confidence) / 2
    low, high = np.quantile(deltas, [tail, 1 - tail])
    total = max(n.sum(), 1.0)
    return PairedBootstrap(
        rate_a=float(a.sum() / total),
        rate_b=float(b.sum() / total),
        delta=float((a.sum() - b.sum()) / total),
        low=float(low),
        high=float(high),
        p_not_better=float(np.mean(deltas >= 0)),
        num_samples=num_samples,
        confidence=confidence,
    )
