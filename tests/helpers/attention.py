"""Helpers of the attention tests: loop references (a linear layer on one vector, a softmax over a list) and which
output frames an input frame reaches."""

from __future__ import annotations

import math

import torch

from adaptspeech.attention import EncoderAttention


def linear(layer: torch.nn.Linear, x: torch.Tensor) -> torch.Tensor:
    """``layer`` on one vector ``[D_in] -> [D_out]``, written out."""
    out = layer.weight @ x
    return out + layer.bias if layer.bias is not None else out


def softmax(scores: list[float]) -> list[float]:
    """The softmax of a list of scores, in Python floats (max subtracted first)."""
    peak = max(scores)
    exps = [math.exp(s - peak) for s in scores]
    return [e / sum(exps) for e in exps]


def influence(module: EncoderAttention, frames: int, hidden: int) -> torch.Tensor:
    """Bool ``[T, T]``: entry (i, j) is True when changing input frame j changes output frame i (by more than
    1e-6: a frame the attention cannot reach changes nothing at all)."""
    torch.manual_seed(1)
    x = torch.randn(1, frames, hidden)
    base = module(x)
    changed = torch.zeros(frames, frames, dtype=torch.bool)
    for j in range(frames):
        x2 = x.clone()
        x2[0, j] += torch.randn(hidden)
        changed[:, j] = (module(x2) - base).abs().amax(-1)[0] > 1e-6
    return changed
