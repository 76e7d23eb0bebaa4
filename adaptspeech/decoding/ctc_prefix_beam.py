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

import torch

from ..runtime.prefix_beam import (
    MAX_VOCAB,
    NEG_INF,
    Beam,
    FrameCandidates,
    candidates_from_top,
    check_search_options,
    log_add,
    search_one,
)
from .hypothesis import Hypothesis
from .inputs import check_id, check_log_probs

__all__ = ["MAX_VOCAB", "NEG_INF", "Beam", "FrameCandidates", "ctc_prefix_beam_search", "frame_candidates", "log_add"]


def frame_candidates(
    log_probs: torch.Tensor, lengths: list[int], blank_id: int, token_prune: int, token_min_logp: float
) -> list[FrameCandidates]:
    """Candidate labels of every frame of every utterance, from one ``topk`` over the batch.

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
    return candidates_from_top(values.numpy(), indices.numpy(), log_probs[..., blank_id].numpy(), lengths, blank_id,
                               token_min_logp)


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
    prune = check_search_options(vocab_size, beam_size, nbest, token_prune, token_min_logp, beam_prune_logp)
    rows = log_probs.detach().cpu().double()
    results = []
    for frames in frame_candidates(rows, lengths.tolist(), blank_id, prune, token_min_logp):
        beams = search_one(frames, beam_size, beam_prune_logp)
        results.append([Hypothesis([ord(c) for c in key], s, s, {"ctc": s}) for s, *_, key, _ in beams[:nbest]])
    return results
