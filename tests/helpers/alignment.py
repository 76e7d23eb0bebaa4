"""Synthetic CTC log-probabilities with a known frame path, for the aligner's tests (no trained model needed)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

BLANK, DELIMITER = 0, 4
VOCAB_SIZE = 30


@dataclass
class SyntheticPosteriors:
    """``log_probs`` ``[T, V]``; ``lines`` the label ids of each line; ``spans`` their true ``(first, end)`` frames;
    ``untranscribed`` the ``(first, end)`` frames of the speech that has no line."""

    log_probs: np.ndarray
    lines: list[np.ndarray]
    spans: list[tuple[int, int]]
    untranscribed: list[tuple[int, int]]


def random_line(rng: np.random.Generator, words: int = 4) -> np.ndarray:
    """Label ids of a line of ``words`` words of 2-6 characters (ids 5.., the delimiter 4 between words)."""
    labels: list[int] = []
    for i in range(words):
        if i:
            labels.append(DELIMITER)
        labels.extend(rng.integers(5, VOCAB_SIZE, size=int(rng.integers(2, 7))).tolist())
    return np.asarray(labels, dtype=np.int64)


def _speak(path: list[int], labels: np.ndarray, rng: np.random.Generator, label_frames: tuple[int, int] = (1, 2)
           ) -> None:
    """Append the frames of ``labels`` to ``path``: each label ``label_frames`` (min, max) frames then 0-2 blanks
    (none after the last)."""
    for i, label in enumerate(labels):
        path.extend([int(label)] * int(rng.integers(label_frames[0], label_frames[1] + 1)))
        if i < len(labels) - 1:
            path.extend([BLANK] * int(rng.integers(0, 3)))


def synthetic_posteriors(num_lines: int, seed: int = 0, untranscribed_after: tuple[int, ...] = (),
                         untranscribed_frames: int = 60, peak: float = 6.0, noise: float = 1.0,
                         pause_frames: tuple[int, int] = (3, 25),
                         label_frames: tuple[int, int] = (1, 2)) -> SyntheticPosteriors:
    """Lines read one after the other with pauses of ``pause_frames`` (min, max) blank frames (at 40 ms: 0.1-1.0 s)
    and, after each line of ``untranscribed_after``, a pause, ``untranscribed_frames`` of speech that is in no line,
    and a pause. Each frame's logits are Gaussian noise (``noise``) with ``peak`` added to the path's label."""
    rng = np.random.default_rng(seed)
    lines = [random_line(rng, int(rng.integers(3, 7))) for _ in range(num_lines)]
    path: list[int] = [BLANK] * int(rng.integers(*pause_frames))
    spans, untranscribed = [], []
    for i, line in enumerate(lines):
        first = len(path)
        _speak(path, line, rng, label_frames)
        spans.append((first, len(path)))
        path.extend([BLANK] * int(rng.integers(*pause_frames)))
        if i in untranscribed_after:
            first = len(path)
            while len(path) - first < untranscribed_frames:
                _speak(path, random_line(rng, 1), rng)
                path.append(DELIMITER)
            untranscribed.append((first, len(path)))
            path.extend([BLANK] * int(rng.integers(*pause_frames)))
    logits = rng.normal(0.0, noise, size=(len(path), VOCAB_SIZE))
    logits[np.arange(len(path)), path] += peak
    log_probs = logits - np.logaddexp.reduce(logits, axis=1, keepdims=True)
    return SyntheticPosteriors(log_probs.astype(np.float32), lines, spans, untranscribed)
