"""CTC frame outputs in numpy: log-softmax, the best path (argmax, repeats merged, blanks dropped) and the checks a
decoder's inputs get. The torch greedy decoder (:func:`adaptspeech.decoding.ctc_greedy_decode`) collapses its argmax
with :func:`collapse_best_path`, so both paths give the same label ids."""

from __future__ import annotations

import numpy as np


def log_softmax(logits: np.ndarray, axis: int = -1) -> np.ndarray:
    """``logits - logsumexp(logits)`` along ``axis``, float32 (the max subtracted first, as torch does)."""
    x = np.asarray(logits, dtype=np.float32)
    shifted = x - x.max(axis=axis, keepdims=True)
    return (shifted - np.log(np.exp(shifted).sum(axis=axis, keepdims=True))).astype(np.float32)


def frame_lengths(log_probs: np.ndarray, lengths: np.ndarray | None, name: str = "log_probs") -> np.ndarray:
    """Validate ``[B, T, V]`` frame scores and return the real frames ``[B]`` (all ``T`` when None).

    Raises:
        ValueError: naming ``name`` / ``lengths`` and the offending row.
    """
    if log_probs.ndim != 3:
        raise ValueError(f"{name} must be [batch, frames, vocab]; got shape {tuple(log_probs.shape)}")
    batch, frames, _ = log_probs.shape
    if lengths is None:
        return np.full(batch, frames, dtype=np.int64)
    lengths = np.asarray(lengths, dtype=np.int64).reshape(-1)
    if lengths.shape != (batch,):
        raise ValueError(f"lengths must be [batch] = [{batch}]; got shape {tuple(lengths.shape)}")
    bad = np.flatnonzero((lengths < 0) | (lengths > frames))
    if bad.size:
        row = int(bad[0])
        raise ValueError(f"lengths row {row} is {int(lengths[row])}; allowed values: 0..{frames} "
                         f"(the frames of {name})")
    return lengths


def check_id(name: str, value: int, vocab_size: int) -> None:
    """Refuse a special-token id outside ``[0, vocab_size)``."""
    if not 0 <= value < vocab_size:
        raise ValueError(f"{name}={value} is outside the vocabulary; allowed values: 0..{vocab_size - 1}")


def collapse_best_path(best: np.ndarray, lengths: np.ndarray, blank_id: int = 0) -> list[list[int]]:
    """Label ids of best paths: ``best`` ``[B, T]`` (the argmax label of each frame), ``lengths`` ``[B]`` real
    frames; repeats merged, blanks dropped, frames past a row's length ignored."""
    best = np.asarray(best, dtype=np.int64)
    previous = np.concatenate([np.full((best.shape[0], 1), -1, dtype=np.int64), best[:, :-1]], axis=1)
    real = np.arange(best.shape[1])[None, :] < np.asarray(lengths)[:, None]
    keep = (best != blank_id) & (best != previous) & real
    return [row[mask].tolist() for row, mask in zip(best, keep)]


def greedy_decode(log_probs: np.ndarray, lengths: np.ndarray | None = None, blank_id: int = 0) -> list[list[int]]:
    """Best-path decoding of ``[B, T, V]`` frame log-probabilities (or logits: only the argmax matters) -> one list
    of label ids per utterance; the numpy twin of :func:`adaptspeech.decoding.ctc_greedy_decode`."""
    log_probs = np.asarray(log_probs)
    lengths = frame_lengths(log_probs, lengths)
    check_id("blank_id", blank_id, log_probs.shape[-1])
    return collapse_best_path(log_probs.argmax(axis=-1), lengths, blank_id)
