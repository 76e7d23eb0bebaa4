"""Is a confidence any good? Which hypothesis words are correct, the area under the ROC curve of "word correct"
against its confidence, and the reliability table (calibration) with its expected calibration error
(:func:`calibration_report`), drawn as a reliability diagram (:func:`reliability_diagram`).

A hypothesis word is *correct* when the Levenshtein alignment of the hypothesis words to the reference words
(jiwer's, the one WER counts) matches it to an equal reference word; substituted and inserted words are wrong.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jiwer
import numpy as np

from .scoring import canonical_text


def word_correctness(hypothesis: str, reference: str) -> list[bool]:
    """One flag per word of ``hypothesis``: matched to an equal word of ``reference`` by the WER alignment."""
    hyp_words = canonical_text(hypothesis).split()
    if not hyp_words:
        return []
    if not canonical_text(reference):
        return [False] * len(hyp_words)
    output = jiwer.process_words(canonical_text(reference), canonical_text(hypothesis))
    correct = [False] * len(hyp_words)
    for chunk in output.alignments[0]:
        if chunk.type == "equal":
            for i in range(chunk.hyp_start_idx, chunk.hyp_end_idx):
                correct[i] = True
    return correct


def roc_auc(scores: Sequence[float] | np.ndarray, labels: Sequence[bool] | np.ndarray) -> float:
    """Area under the ROC curve of ``labels`` (True: positive) ranked by ``scores``: the probability that a random
    positive scores above a random negative, ties counted one half (the Mann-Whitney statistic). NaN when either
    class is empty."""
    scores = np.asarray(scores, dtype=np.float64)
    labels = np.asarray(labels, dtype=bool)
    positives, negatives = int(labels.sum()), int((~labels).sum())
    if positives == 0 or negatives == 0:
        return float("nan")
    order = np.argsort(scores, kind="mergesort")
    ranks = np.empty(len(scores), dtype=np.float64)
    sorted_scores = scores[order]
    i = 0
    while i < len(scores):  # average ranks over ties
        j = i
        while j + 1 < len(scores) and sorted_scores[j + 1] == sorted_scores[i]:
            j += 1
        ranks[order[i : j + 1]] = (i + j) / 2 + 1
        i = j + 1
    return float((ranks[labels].sum() - positives * (positives + 1) / 2) / (positives * negatives))


@dataclass(frozen=True)
class ReliabilityBin:
    """Words whose confidence lies in ``[low, high)`` (the last bin includes 1): how many, their mean confidence and
    the share that is correct."""

    low: float
    high: float
    count: int
    mean_confidence: float
    accuracy: float


def reliability_bins(scores: Sequence[float] | np.ndarray, labels: Sequence[bool] | np.ndarray,
                     num_bins: int = 10) -> list[ReliabilityBin]:
    """The reliability table: ``num_bins`` equal-width confidence bins over [0, 1] (empty bins included, with NaN
    means)."""
    scores = np.clip(np.asarray(scores, dtype=np.float64), 0.0, 1.0)
    labels = np.asarray(labels, dtype=bool)
    edges = np.linspace(0.0, 1.0, num_bins + 1)
    index = np.minimum((scores * num_bins).astype(int), num_bins - 1)
    out = []
    for b in range(num_bins):
        mask = index == b
        count = int(mask.sum())
        out.append(ReliabilityBin(float(edges[b]), float(edges[b + 1]), count,
                                  float(scores[mask].mean()) if count else float("nan"),
                                  float(labels[mask].mean()) if count else float("nan")))
    return out


def expected_calibration_error(bins: Sequence[ReliabilityBin]) -> float:
    """``sum_b (n_b / N) |accuracy_b - mean confidence_b|`` over the non-empty bins."""
    total = sum(b.count for b in bins)
    if total == 0:
        return float("nan")
    return float(sum(b.count / total * abs(b.accuracy - b.mean_confidence) for b in bins if b.count))


def calibration_report(scores: Sequence[float] | np.ndarray, correct: Sequence[bool] | np.ndarray,
                       num_bins: int = 10) -> dict[str, Any]:
    """``{"words", "correct_share", "roc_auc", "ece", "bins"}`` of word confidences ``scores`` against whether each
    word is ``correct`` (:func:`roc_auc`, :func:`reliability_bins` with ``num_bins`` equal-width bins,
    :func:`expected_calibration_error`)."""
    if len(scores) != len(correct):
        raise ValueError(f"{len(scores)} confidences for {len(correct)} correctness flags")
    bins = reliability_bins(scores, correct, num_bins)
    return {"words": len(scores), "correct_share": float(np.mean(correct)) if len(correct) else float("nan"),
            "roc_auc": roc_auc(scores, correct), "ece": expected_calibration_error(bins),
            "bins": [b.__dict__ for b in bins]}


def reliability_diagram(results: Mapping[str, Mapping[str, Any]], path: str | Path, title: str) -> Path:
    """Write the reliability diagram of ``results`` (name -> :func:`calibration_report`) as a PNG at ``path``: per
    result, the share correct of each non-empty bin against its mean confidence, beside the diagonal."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5, 5))
    ax.plot([0, 1], [0, 1], color="grey", linestyle="--", linewidth=1, label="perfectly calibrated")
    for name, result in results.items():
        bins = [b for b in result["bins"] if b["count"]]
        ax.plot([b["mean_confidence"] for b in bins], [b["accuracy"] for b in bins], marker="o",
                label=f"{name}: AUC {result['roc_auc']:.3f}, ECE {result['ece']:.3f}")
    ax.set_xlim(0, 1)
    ax.set_ylim(0, 1)
    ax.set_xlabel("word confidence (bin mean)")
    ax.set_ylabel("share of words correct")
    ax.set_title(title)
    ax.legend(loc="upper left", fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return Path(path)
