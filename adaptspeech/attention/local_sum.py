"""The local weighted sum of LDSA, eq. (3) of the multi-head LDSA (Xu et al. 2021), in ``O(T c)`` memory.

``Y[b, t, h] = sum_{j=0}^{c-1} W[b, t, h, j] * V[b, t + j - floor(c/2), h]`` with ``V`` zero outside
``0..T-1``.

Vectorised over batch, time and heads; the only Python loop runs over the ``c`` window offsets (15 by
default), each step one fused multiply-add over the whole ``[B, T, h, d_k]`` tensor, restricted to the frames
whose neighbour exists (so ``V`` is never padded or copied). A custom autograd function keeps only ``W`` and ``V``
for the backward pass (no ``[B, T, c, D]`` unfolded copy, which would be ``c`` times the size of the hidden
states), and its backward accumulates in place.
"""

from __future__ import annotations

from typing import Any

import torch
from torch.autograd.function import FunctionCtx, once_differentiable


def _window(offset: int, frames: int) -> tuple[int, int]:
    """Frames ``t`` in ``[lo, hi)`` whose neighbour ``t + offset`` lies inside ``0 .. frames-1``."""
    return max(0, -offset), min(frames, frames - offset)


class LocalWeightedSum(torch.autograd.Function):
    """``(weights [B, T, h, c], values [B, T, h, d_k]) -> [B, T, h, d_k]``; see the module docstring."""

    @staticmethod
    def forward(ctx: FunctionCtx, weights: torch.Tensor, values: torch.Tensor) -> torch.Tensor:
        width, frames = weights.shape[-1], values.shape[1]
        out = torch.zeros_like(values)
        for j in range(width):
            offset = j - width // 2
            lo, hi = _window(offset, frames)
            if lo < hi:
                out[:, lo:hi].addcmul_(weights[:, lo:hi, :, j : j + 1], values[:, lo + offset : hi + offset])
        ctx.save_for_backward(weights, values)
        return out

    @staticmethod
    @once_differentiable
    def backward(ctx: Any, grad_out: torch.Tensor) -> tuple[torch.Tensor | None, torch.Tensor | None]:
        weights, values = ctx.saved_tensors
        width, frames = weights.shape[-1], values.shape[1]
        grad_weights = torch.zeros_like(weights) if ctx.needs_input_grad[0] else None
        grad_values = torch.zeros_like(values) if ctx.needs_input_grad[1] else None
        for j in range(width):
            offset = j - width // 2
            lo, hi = _window(offset, frames)
            if lo >= hi:
                continue
            if grad_weights is not None:
                grad_weights[:, lo:hi, :, j] = torch.linalg.vecdot(
                    grad_out[:, lo:hi], values[:, lo + offset : hi + offset]
                )
            if grad_values is not None:
                grad_values[:, lo + offset : hi + offset].addcmul_(weights[:, lo:hi, :, j : j + 1], grad_out[:, lo:hi])
        return grad_weights, grad_values


def local_weighted_sum(weights: torch.Tensor, values: torch.Tensor) -> torch.Tensor:
    """``Y_t = sum_j W_{t,j} V_{t+j-floor(c/2)}`` per head: ``[B, T, h, c]``, ``[B, T, h, d_k]`` -> ``[B, T,
    h, d_k]``."""
    if weights.shape[:3] != values.shape[:3]:
        raise ValueError(
            f"local_weighted_sum: weights {tuple(weights.shape)} and values {tuple(values.shape)} must "
            "agree on "
            "[B, T, h]"
        )
    if weights.shape[-1] % 2 == 0:
        raise ValueError(f"local_weighted_sum: the context width must be odd, got {weights.shape[-1]}")
    return LocalWeightedSum.apply(weights.to(values.dtype), values)
