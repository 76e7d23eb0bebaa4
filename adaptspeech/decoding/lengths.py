"""The max-length guard of attention decoding: how many tokens an utterance may get."""

from __future__ import annotations

import torch


def max_output_lengths(
    frames: torch.Tensor,
    max_length: int | None = None,
    max_length_ratio: float = 1.0,
    cap: int | None = None,
) -> torch.Tensor:
    """Most output tokens (``</s>`` not counted) per utterance.

    Args:
        frames: ``[B]`` real encoder frames.
        max_length: a fixed limit for every utterance; overrides the ratio.
        max_length_ratio: limit ``ceil(ratio * frames)`` (at least 1) when ``max_length`` is None.
        cap: a hard upper bound (e.g. ``LASConfig.max_target_length``).

    Returns:
        ``[B]`` long tensor.
    """
    if max_length is not None:
        if max_length < 1:
            raise ValueError(f"max_length={max_length}; allowed values: None or integers >= 1")
        limits = torch.full_like(frames, max_length)
    else:
        if not max_length_ratio > 0:
            raise ValueError(f"max_length_ratio={max_length_ratio}; allowed values: numbers > 0")
        limits = torch.ceil(frames.double() * max_length_ratio).long().clamp_min(1)
    if cap is not None:
        limits = limits.clamp_max(cap)
    return limits.long()
