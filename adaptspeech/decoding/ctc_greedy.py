"""CTC greedy (best-path) decoding, batched: argmax per frame, merge repeats, drop blanks."""

from __future__ import annotations

import torch

from ..runtime.ctc import collapse_best_path
from .inputs import check_id, check_log_probs


def ctc_greedy_decode(
    log_probs: torch.Tensor, lengths: torch.Tensor | None = None, blank_id: int = 0
) -> list[list[int]]:
    """Best-path decoding.

    Args:
        log_probs: ``[B, T, V]`` frame log-probabilities (or logits: only the argmax matters).
        lengths: ``[B]`` real frames per utterance; None = all T.
        blank_id: the CTC blank.

    Returns:
        One list of label ids per utterance.
    """
    lengths = check_log_probs(log_probs, lengths)
    check_id("blank_id", blank_id, log_probs.shape[-1])
    return collapse_best_path(log_probs.argmax(dim=-1).cpu().numpy(), lengths.numpy(), blank_id)
