"""CTC prefix beam search (frame-synchronous; Hannun et al., 2014; as in wenet's ``ctc_prefix_beam_search``).

Every prefix keeps two log-probabilities, of the alignments so far that end in a blank (``p_b``) and in its
last label (``p_nb``), so all alignments that collapse to the same prefix are summed, not just the best
one. With a beam at least as large as the number of distinct prefixes and no token pruning the result
is exact: the label sequence maximising ``p_ctc(y | x)`` with its exact log-probability.

Not batched across utterances: prefixes merge through a dict, which does not vectorise; each utterance
runs in plain Python floats (fast for the beams used in ASR). ``token_prune`` limits the labels tried at
each frame to the most likely ones.
"""

from __future__ import annotations

import math

import torch

from .hypothesis import Hypothesis
from .inputs import check_id, check_log_probs

NEG_INF = float("-inf")


def log_add(a: float, b: float) -> float:
    """``log(exp(a) + exp(b))`` for Python floats, exact at -inf."""
    if a == NEG_INF:
        return b
    if b == NEG_INF:
        return a
    if a < b:
        a, b = b, a
    return a + math.log1p(math.exp(b - a))


def _search_one(
    frames: list[list[float]], beam_size: int, blank_id: int, token_prune: int
) -> list[tuple[tuple[int, ...], float]]:
    """Prefix beam search over one utterance's frames ``[T][V]``; returns (prefix, log p) best first."""
    beams: dict[tuple[int, ...], tuple[float, float]] = {(): (0.0, NEG_INF)}
    vocab = range(len(frames[0])) if frames else range(0)
    for frame in frames:
        if token_prune < len(frame):
            tokens = sorted(vocab, key=frame.__getitem__, reverse=True)[:token_prune]
        else:
            tokens = list(vocab)
        tokens = [t for t in tokens if t != blank_id]
        blank = frame[blank_id]
        following: dict[tuple[int, ...], list[float]] = {}
        for prefix, (p_b, p_nb) in beams.items():
            total = log_add(p_b, p_nb)
            entry = following.setdefault(prefix, [NEG_INF, NEG_INF])
            entry[0] = log_add(entry[0], total + blank)
            last = prefix[-1] if prefix else None
            for token in tokens:
                p = frame[token]
                extended = following.setdefault((*prefix, token), [NEG_INF, NEG_INF])
                if token == last:
                    entry[1] = log_add(entry[1], p_nb + p)  # repeat collapses into the same prefix
                    extended[1] = log_add(extended[1], p_b + p)  # a blank separated the repeat
                else:
                    extended[1] = log_add(extended[1], total + p)
        ranked = sorted(following.items(), key=lambda item: log_add(*item[1]), reverse=True)
        beams = {prefix: (p_b, p_nb) for prefix, (p_b, p_nb) in ranked[:beam_size]}
    scored = [(prefix, log_add(p_b, p_nb)) for prefix, (p_b, p_nb) in beams.items()]
    return sorted(scored, key=lambda item: item[1], reverse=True)


def ctc_prefix_beam_search(
    log_probs: torch.Tensor,
    lengths: torch.Tensor | None = None,
    beam_size: int = 8,
    blank_id: int = 0,
    token_prune: int | None = None,
    nbest: int = 1,
) -> list[list[Hypothesis]]:
    """CTC prefix beam search for every utterance of a batch.

    Args:
        log_probs: ``[B, T, V]`` frame log-probabilities (log-softmax output of the CTC head).
        lengths: ``[B]`` real frames; None = all T.
        beam_size: prefixes kept after each frame.
        blank_id: the CTC blank.
        token_prune: labels tried per frame, the most likely first; None = ``beam_size``; ``>= V`` = all.
        nbest: hypotheses returned per utterance (at most ``beam_size``).

    Returns:
        Per utterance, up to ``nbest`` hypotheses best first; ``score == log_prob`` is ``log p_ctc(y | x)``
        summed over the alignments the beam kept.
    """
    lengths = check_log_probs(log_probs, lengths)
    vocab_size = log_probs.shape[-1]
    check_id("blank_id", blank_id, vocab_size)
    if beam_size < 1 or nbest < 1:
        raise ValueError(f"beam_size={beam_size}, nbest={nbest}; allowed values: integers >= 1")
    prune = beam_size if token_prune is None else token_prune
    if prune < 1:
        raise ValueError(f"token_prune={token_prune}; allowed values: None or integers >= 1")
    rows = log_probs.detach().float().cpu()
    results = []
    for row, length in zip(rows, lengths.tolist()):
        ranked = _search_one(row[:length].tolist(), beam_size, blank_id, prune)
        results.append([Hypothesis(list(p), s, s, {"ctc": s}) for p, s in ranked[:nbest]])
    return results
