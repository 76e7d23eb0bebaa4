"""CTC prefix beam search (frame-synchronous; Hannun et al., 2014; as in wenet's ``ctc_prefix_beam_search``).

Every prefix keeps two log-probabilities, of the alignments so far that end in a blank (``p_b``) and in its
last label (``p_nb``), so all alignments that collapse to the same prefix are summed, not just the best
one. With a beam at least as large as the number of distinct prefixes and no token pruning the result
is exact: the label sequence maximising ``p_ctc(y | x)`` with its exact log-probability.

Speed without changing the result. Each frame first updates the prefixes already in the beam (blank, repeated
label, and extension of a beam prefix into another beam prefix: their final scores this frame), then tries new
prefixes ``y + c`` best first (prefixes by score, labels by log-probability) and stops as soon as the bound
``log p(y) + log p_t(c)`` cannot beat the ``beam_size``-th best score found so far (a min-heap). The kept
prefixes are exactly those of the plain search that extends every prefix by every label and sorts (the
reference in the tests); on peaky posteriors most frames are blank-dominated and try no new prefix at all.
Per-frame candidate labels come from one ``topk`` over the whole batch. Prefixes are ``str`` keys (one
character per label id, hash cached), so extending and merging them costs no tuple copies.

Pruning beyond the beam: ``token_prune`` (the ``k`` most likely labels per frame, blank counted; default
``beam_size`` as in wenet), and, off by default, ``token_min_logp`` (labels below this log-probability are not
tried, except the frame's most likely label; pyctcdecode uses -5) and ``beam_prune_logp`` (prefixes more than
this below the best are dropped; pyctcdecode uses -10). Prefixes of probability 0 are never kept. Not batched
across utterances: prefixes merge through a dict, which does not vectorise; each utterance runs in plain Python
floats.
"""

from __future__ import annotations

import heapq
import math
from operator import itemgetter

import torch

from .hypothesis import Hypothesis
from .inputs import check_id, check_log_probs

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


def frame_candidates(
    log_probs: torch.Tensor, lengths: list[int], blank_id: int, token_prune: int, token_min_logp: float
) -> list[FrameCandidates]:
    """Candidate labels of every frame of every utterance.

    Args:
        log_probs: ``[B, T, V]`` frame log-probabilities.
        lengths: ``B`` real frames per utterance.
        blank_id: the CTC blank (never a candidate; counted in ``token_prune`` like wenet's ``topk``).
        token_prune: the ``k`` most likely labels per frame, blank included.
        token_min_logp: labels below this log-probability are dropped, except the frame's most likely label.

    Returns:
        One :class:`FrameCandidates` per utterance.
    """
    values, indices = log_probs.topk(min(token_prune, log_probs.shape[-1]), dim=-1)  # [B, T, k], best first
    keep = indices != blank_id
    if token_min_logp > NEG_INF:
        keep &= values >= token_min_logp
        keep[..., 0] = indices[..., 0] != blank_id  # the frame's most likely label is always tried
    all_kept = bool(keep.all())
    blanks = log_probs[..., blank_id].tolist()
    result = []
    for b, length in enumerate(lengths):
        ids, probs = indices[b, :length].tolist(), values[b, :length].tolist()
        if not all_kept:
            masks = keep[b, :length].tolist()
            ids = [[t for t, m in zip(row, mask) if m] for row, mask in zip(ids, masks)]
            probs = [[p for p, m in zip(row, mask) if m] for row, mask in zip(probs, masks)]
        result.append(FrameCandidates(blanks[b][:length], ids, probs))
    return result


def _update_beam(
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


def _search_one(
    frames: FrameCandidates, beam_size: int, beam_prune_logp: float
) -> list[Beam]:
    """Prefix beam search over one utterance; returns the final beam, best first."""
    beams: list[Beam] = [(0.0, 0.0, NEG_INF, -1, "", None)]
    heappush, heapreplace = heapq.heappush, heapq.heapreplace
    for blank, labels, probs in zip(frames.blank, frames.labels, frames.log_probs):
        index = {beam[4]: i for i, beam in enumerate(beams)}
        updated = _update_beam(beams, index, blank, dict(zip(labels, probs)))
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


def ctc_prefix_beam_search(
    log_probs: torch.Tensor,
    lengths: torch.Tensor | None = None,
    beam_size: int = 8,
    blank_id: int = 0,
    token_prune: int | None = None,
    nbest: int = 1,
    token_min_logp: float = NEG_INF,
    beam_prune_logp: float = NEG_INF,
) -> list[list[Hypothesis]]:
    """CTC prefix beam search for every utterance of a batch.

    Args:
        log_probs: ``[B, T, V]`` frame log-probabilities (log-softmax output of the CTC head).
        lengths: ``[B]`` real frames; None = all T.
        beam_size: prefixes kept after each frame.
        blank_id: the CTC blank.
        token_prune: labels tried per frame, the most likely first, blank counted; None = ``beam_size``;
            ``>= V`` = all.
        nbest: hypotheses returned per utterance (at most ``beam_size``).
        token_min_logp: labels whose frame log-probability is below this are not tried (the frame's most
            likely label always is); -inf (default) = no threshold; pyctcdecode's default is -5.
        beam_prune_logp: after each frame, prefixes scoring more than ``-beam_prune_logp`` below the best are
            dropped; -inf (default) = keep ``beam_size``; pyctcdecode's default is -10.

    Returns:
        Per utterance, up to ``nbest`` hypotheses best first; ``score == log_prob`` is ``log p_ctc(y | x)``
        summed over the alignments the beam kept.
    """
    lengths = check_log_probs(log_probs, lengths)
    vocab_size = log_probs.shape[-1]
    check_id("blank_id", blank_id, vocab_size)
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
    rows = log_probs.detach().cpu().double()
    results = []
    for frames in frame_candidates(rows, lengths.tolist(), blank_id, prune, token_min_logp):
        beams = _search_one(frames, beam_size, beam_prune_logp)
        results.append([Hypothesis([ord(c) for c in key], s, s, {"ctc": s}) for s, *_, key, _ in beams[:nbest]])
    return results
