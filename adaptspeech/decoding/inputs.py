"""Shared checks of decoder inputs (shapes, lengths), so every search fails the same clear way."""

from __future__ import annotations

import torch

from ..heads.listener import padding_mask_to_lengths
from ..runtime.ctc import check_id

__all__ = ["check_id", "check_log_probs", "encoder_frames"]


def check_log_probs(
    log_probs: torch.Tensor, lengths: torch.Tensor | None, name: str = "log_probs"
) -> torch.Tensor:
    """Validate ``[B, T, V]`` frame log-probabilities and return lengths ``[B]`` (all T when None).

    Raises:
        ValueError: naming ``name`` / ``lengths`` and the offending row.
    """
    if log_probs.dim() != 3:
        raise ValueError(f"{name} must be [batch, frames, vocab]; got shape {tuple(log_probs.shape)}")
    batch, frames, _ = log_probs.shape
    if lengths is None:
        return torch.full((batch,), frames, dtype=torch.long)
    lengths = torch.as_tensor(lengths).long().cpu()
    if lengths.shape != (batch,):
        raise ValueError(f"lengths must be [batch] = [{batch}]; got shape {tuple(lengths.shape)}")
    bad = (lengths < 0) | (lengths > frames)
    if bad.any():
        row = int(bad.nonzero()[0])
        raise ValueError(f"lengths row {row} is {int(lengths[row])}; allowed values: 0..{frames} "
                         f"(the frames of {name})")
    return lengths


def encoder_frames(encoder_hidden_states: torch.Tensor, encoder_padding_mask: torch.Tensor | None
                   ) -> tuple[torch.Tensor, torch.Tensor]:
    """The bool padding mask ``[B, T]`` (all real when None) and the real frames ``[B]``."""
    if encoder_padding_mask is None:
        encoder_padding_mask = torch.ones(encoder_hidden_states.shape[:2], dtype=torch.bool,
                                          device=encoder_hidden_states.device)
    return encoder_padding_mask.bool(), padding_mask_to_lengths(encoder_padding_mask)
