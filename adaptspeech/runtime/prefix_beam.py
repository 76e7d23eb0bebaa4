"""CTC prefix beam search, the search itself in plain Python floats and the candidate labels in numpy, without torch.

The algorithm and its pruning are described in :mod:`adaptspeech.decoding.ctc_prefix_beam`, whose torch entry
point (:func:`~adaptspeech.decoding.ctc_prefix_beam_search`) runs the same search (:func:`search_one`) on candidates
taken with torch's ``topk``; :func:`prefix_beam_search` takes them with numpy (a stable sort: equal log-probabilities
in id order) for the torch-free runtime.
"""

from __future__ import annotations

import heapq
import math
from operator import itemgetter

import numpy as np

from .ctc import check_id, frame_lengths

NEG_INF = float("-inf")
MAX_VOCAB = 0x110000  # prefixes are str of chr(label): Unicode code points

# A beam entry: (total, p_b, p_nb, last label or -1, prefix key, parent key or None); total = log_add(p_b, p_nb).
Beam = tuple[float, float, float, int, str, "str | None"]
_total = itemgetter(0)


def log_add(a: float, b: float) -> float:
    """``log(exp(a) + exp(b))`` for Python floats, exact at -inf."""
    if a == NEG_INF:
        return b
    if b == NEG_INF:
        return a
    if a < b:
        a, b = b, a
    return a + math.log1p(math.exp(b - a))


class FrameCandidates:
    """The labels a frame may extend prefixes by, for one utterance, from one ``topk`` over the batch.

    Attributes:
        blank: ``[T]`` log-probability of the blank per frame.
        labels: ``[T][n_t]`` non-blank labels to try, most likely first.
        log_probs: ``[T][n_t]`` their log-probabilities (same order).
    """

    def __init__(self, blank: list[float], labels: list[list[int]], log_probs: list[list[float]]) -> None:
        self.blank, self.labels, self.log_probs = blank, labels, log_probs


def update_beam(
    beams: list[Beam], index: dict[str, int], blank: float, label_log_prob: dict[int, float]
) -> list[Beam]:
    """The beam prefixes after one more frame: blank, repeated last label, and a beam prefix extended into
    another beam prefix (the only ways a prefix already in the beam gains probability). ``index``: key -> row.
    ``log_add`` is inlined (the hot loop)."""
    updated = []
    append, label_get, index_get, log1p, exp = updated.append, label_log_prob.get, index.get, math.log1p, math.exp
    for total, _, p_nb, last, key, parent in beams:
        new_b = total + blank
        p = label_get(last)
        if p is None:  # no label yet, or the last label is not tried this frame
            if new_b != NEG_INF:  # a prefix of probability 0 is dropped
                append((new_b, new_b, NEG_INF, last, key, parent))
            continue
        new_nb = p_nb + p  # the repeat collapses into the same prefix
        j = index_get(parent)
        if j is not None:
            p_total, p_b, _, p_last, _, _ = beams[j]
            other = (p_b if p_last == last else p_total) + p  # a blank separates a repeat
            if other > new_nb:
                new_nb, other = other, new_nb
            if other != NEG_INF:
                new_nb += log1p(exp(other - new_nb))
        high, low = (new_b, new_nb) if new_b >= new_nb else (new_nb, new_b)
        if high != NEG_INF:
            append((high + log1p(exp(low - high)) if low != NEG_INF else high, new_b, new_nb, last, key, parent))
    return updated


def search_one(
    frames: FrameCandidates, beam_size: int, beam_prune_logp: float, beams: list[Beam] | None = None
) -> list[Beam]:
    """Prefix beam search over one utterance; returns the final beam, best first. ``beams``: the beam after the
    frames before these (a stream continues its search chunk by chunk); None starts from the empty prefix."""
    beams = [(0.0, 0.0, NEG_INF, -1, "", None)] if beams is None else beams
    heappush, heapreplace = heapq.heappush, heapq.heapreplace
    for blank, labels, probs in zip(frames.blank, frames.labels, frames.log_probs):
        index = {beam[4]: i for i, beam in enumerate(beams)}
        updated = update_beam(beams, index, blank, dict(zip(labels, probs)))
        heap = [beam[0] for beam in updated]  # the best beam_size scores found so far (min-heap)
        heapq.heapify(heap)
        best = max(heap, default=NEG_INF)
        floor = best + beam_prune_logp
        kth = heap[0] if len(heap) >= beam_size else NEG_INF
        threshold = kth if kth > floor else floor
        if labels:
            top = probs[0]
            for total, p_b, _, last, key, _ in beams:  # best first: the bound only falls
                if total + top <= threshold:
                    break
                for label, p in zip(labels, probs):
                    bound = total + p
                    if bound <= threshold:
                        break
                    score = p_b + p if label == last else bound  # a repeat needs a blank in between
                    if score <= threshold:
                        continue
                    child = key + chr(label)
                    if child in index:  # already scored by _update_beam
                        continue
                    updated.append((score, NEG_INF, score, label, child, key))
                    if len(heap) < beam_size:
                        heappush(heap, score)
                        kth = heap[0] if len(heap) == beam_size else NEG_INF
                    else:
                        heapreplace(heap, score)
                        kth = heap[0]
                    if score > best:
                        best = score
                        floor = best + beam_prune_logp
                    threshold = kth if kth > floor else floor
        updated.sort(key=_total, reverse=True)
        beams = updated[:beam_size]
        if floor > NEG_INF:
            beams = [beam for beam in beams if beam[0] >= floor]
    return beams


def check_search_options(
    vocab_size: int, beam_size: int, nbest: int, token_prune: int | None, token_min_logp: float, beam_prune_logp: float
) -> int:
    """Refuse bad search settings (naming the setting and its allowed values); returns the labels tried per frame
    (``token_prune``, ``beam_size`` when None)."""
    if vocab_size > MAX_VOCAB:
        raise ValueError(f"log_probs has {vocab_size} labels; ctc_prefix_beam_search allows at most {MAX_VOCAB}")
    if beam_size < 1 or nbest < 1:
        raise ValueError(f"beam_size={beam_size}, nbest={nbest}; allowed values: integers >= 1")
    prune = beam_size if token_prune is None else token_prune
    if prune < 1:
        raise ValueError(f"token_prune={token_prune}; allowed values: None or integers >= 1")
    if math.isnan(token_min_logp) or token_min_logp > 0:
        raise ValueError(f"token_min_logp={token_min_logp}; allowed values: -inf .. 0")
    if math.isnan(beam_prune_logp) or beam_prune_logp > 0:
        raise ValueError(f"beam_prune_logp={beam_prune_logp}; allowed values: -inf .. 0")
    return prune


def candidates_from_top(
    values: np.ndarray, indices: np.ndarray, blanks: np.ndarray, lengths: list[int], blank_id: int,
    token_min_logp: float,
) -> list[FrameCandidates]:
    """:class:`FrameCandidates` per utterance from the ``k`` best labels of every frame.

    Args:
        values, indices: ``[B, T, k]`` log-probabilities and labels, best first.
        blanks: ``[B, T]`` the blank's log-probability per frame.
        lengths: ``B`` real frames per utterance.
        blank_id: the CTC blank (never a candidate; counted in ``k`` like wenet's ``topk``).
        token_min_logp: labels below this log-probability are dropped, except the frame's most likely label.
    """
    keep = indices != blank_id
    if token_min_logp > NEG_INF:
        keep &= values >= token_min_logp
        keep[..., 0] = indices[..., 0] != blank_id  # the frame's most likely label is always tried
    all_kept = bool(keep.all())
    blanks = blanks.tolist()
    result = []
    for b, length in enumerate(lengths):
        ids, probs = indices[b, :length].tolist(), values[b, :length].tolist()
        if not all_kept:
            masks = keep[b, :length].tolist()
            ids = [[t for t, m in zip(row, mask) if m] for row, mask in zip(ids, masks)]
            probs = [[p for p, m in zip(row, mask) if m] for row, mask in zip(probs, masks)]
        result.append(FrameCandidates(blanks[b][:length], ids, probs))
    return result


def prefix_beam_search(
    log_probs: np.ndarray,
    lengths: np.ndarray | None = None,
    beam_size: int = 8,
    blank_id: int = 0,
    token_prune: int | None = None,
    nbest: int = 1,
    token_min_logp: float = NEG_INF,
    beam_prune_logp: float = NEG_INF,
) -> list[list[tuple[list[int], float]]]:
    """CTC prefix beam search of ``[B, T, V]`` frame log-probabilities (numpy), the torch-free twin of
    :func:`adaptspeech.decoding.ctc_prefix_beam_search` (same settings, same search).

    Returns:
        Per utterance, up to ``nbest`` ``(label ids, log p_ctc(y | x))`` best first.
    """
    rows = np.asarray(log_probs, dtype=np.float64)
    lengths = frame_lengths(rows, lengths)
    vocab_size = rows.shape[-1]
    check_id("blank_id", blank_id, vocab_size)
    prune = check_search_options(vocab_size, beam_size, nbest, token_prune, token_min_logp, beam_prune_logp)
    k = min(prune, vocab_size)
    indices = np.argsort(-rows, axis=-1, kind="stable")[..., :k]
    values = np.take_along_axis(rows, indices, axis=-1)
    results = []
    for frames in candidates_from_top(values, indices, rows[..., blank_id], lengths.tolist(), blank_id,
                                      token_min_logp):
        beams = search_one(frames, beam_size, beam_prune_logp)
        results.append([([ord(c) for c in key], score) for score, *_, key, _ in beams[:nbest]])
    return results
