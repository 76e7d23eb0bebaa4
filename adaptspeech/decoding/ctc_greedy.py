"""CTC greedy (best-path) decoding, batched: argmax per frame, merge repeats, drop blanks."""

from __future__ import annotations

import torch

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
    best = log_probs.argmax(dim=-1).cpu()  # [B, T]
    previous = torch.nn.functional.pad(best, (1, 0), value=-1)[:, :-1]
    real = torch.arange(best.shape[1])[None, :] < lengths[:, None]
    keep = (best != blank_id) & (best != previous) & real
    return [row[mask].tolist() for row, mask in zip(best, keep)]
