"""Shared-QK attention, seeds/002 Table 1 "Baseline (Q)" (Reformer, Kitaev et al. 2020, section 2.2).

One projection ``W_Q`` gives the queries; the keys are the same vectors normalised per head,
``k_j = q_j / ||q_j||``, so ``A_ij = q_i . k_j / sqrt(d_k)`` (seeds/002 eq. 1 with tied ``Q`` and ``K``). As in
Reformer, a token does not attend to itself (``q_i . k_i`` would dominate its row) unless it must: when no other
key is allowed (padding, chunk masks, or for the sparse / LSH kinds their patterns), the token attends to itself.

seeds/002 section 4 uses shared-QK attention for every LSH (section 3.2) and sparse (section 3.3) kind, so
:class:`SharedQKAttention` is also their base class. :func:`gathered_attention` (attention of each query over its
own gathered set of ``K`` key positions, ``O(T K d)`` instead of ``O(T^2 d)``) serves the LSH kinds, whose keys
differ per query; the sparse kinds, whose queries share keys in blocks, use block matmuls instead.
"""

from __future__ import annotations

import math
from typing import ClassVar

import torch
from torch import nn

from .base import EncoderAttention
from .config import AttentionConfig
from .masks import masked_softmax
from .registry import ATTENTION


def exclude_self(allowed: torch.Tensor, is_self: torch.Tensor) -> torch.Tensor:
    """Reformer's rule: drop the query's own key from ``allowed`` unless nothing else is allowed in its row.

    Args:
        allowed: bool ``[..., T, K]`` (True = may attend).
        is_self: bool, broadcastable to ``allowed``: True where the key is the query's own frame.

    Returns:
        bool of ``allowed``'s shape.
    """
    others = allowed & ~is_self
    return torch.where(others.any(dim=-1, keepdim=True), others, allowed)


def gather_frames(x: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """``x [B, h, T, d]`` at ``index [B or 1, h or 1, T', K]`` (values in ``0 .. T-1``) -> ``[B, h, T', K, d]``."""
    batch, heads, _, dim = x.shape
    index = index.expand(batch, heads, *index.shape[2:])
    flat = index.reshape(batch, heads, -1, 1).expand(-1, -1, -1, dim)
    return torch.gather(x, 2, flat).view(batch, heads, *index.shape[2:], dim)


def gathered_attention(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    index: torch.Tensor,
    allowed: torch.Tensor,
    dropout: nn.Module | None = None,
) -> torch.Tensor:
    """Attention of each query over its own ``K`` gathered keys: ``softmax_k(q_t . key_{index[t, k]} / sqrt(d))``
    over the allowed slots, applied to the gathered values.

    Args:
        query, key, value: ``[B, h, T, d]``.
        index: long ``[B or 1, h or 1, T, K]`` key positions (within ``0 .. T-1``).
        allowed: bool broadcastable to ``[B, h, T, K]``: slots that take part (rows with none give zeros).
        dropout: applied to the weights (a callable such as ``EncoderAttention.attention_dropout``).

    Returns:
        ``[B, h, T, d]``. Time and memory ``O(B h T K d)``.
    """
    keys = gather_frames(key, index)  # [B, h, T, K, d]
    values = gather_frames(value, index)
    scores = torch.einsum("bhtd,bhtkd->bhtk", query, keys) / math.sqrt(query.shape[-1])
    weights = masked_softmax(scores, allowed)
    if dropout is not None:
        weights = dropout(weights)
    return torch.einsum("bhtk,bhtkd->bhtd", weights.to(values.dtype), values)


@ATTENTION.register("shared_qk")
class SharedQKAttention(EncoderAttention):
    """Shared-QK attention ("Baseline (Q)"): ``W_Q`` only, keys ``q / ||q||`` per head, no self-attention unless
    it must (see the module docstring). Time ``O(T^2 D)``, memory ``O(h T^2)``.

    Args:
        config (`AttentionConfig`): ``hidden_size``, ``num_heads``, ``dropout``, ``bias``, chunk settings.
    """

    roles: ClassVar[dict[str, str]] = {"query": "q_proj", "value": "v_proj", "output": "out_proj"}

    def __init__(self, config: AttentionConfig) -> None:
        super().__init__(config)
        self.q_proj = nn.Linear(self.hidden_size, self.hidden_size, bias=config.bias)

    def queries_and_keys(self, hidden_states: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``[B, T, D]`` -> queries ``[B, h, T, d_k]`` and keys ``q / ||q||`` (per head, ``[B, h, T, d_k]``)."""
        query = self.split_heads(self.q_proj(hidden_states))
        key = query / query.norm(dim=-1, keepdim=True).clamp_min(torch.finfo(query.dtype).tiny)
        return query, key

    def forward(self, hidden_states: torch.Tensor, padding_mask: torch.Tensor | None = None) -> torch.Tensor:
        """``[B, T, D]``, ``[B, T]`` bool or None -> ``[B, T, D]``."""
        self.check_padding_mask(hidden_states, padding_mask)
        frames = hidden_states.shape[1]
        query, key = self.queries_and_keys(hidden_states)
        value = self.split_heads(self.value_proj(hidden_states))
        allowed = self.attention_mask(padding_mask, frames)
        if allowed is None:
            allowed = torch.ones(1, 1, frames, frames, dtype=torch.bool, device=hidden_states.device)
        allowed = exclude_self(allowed.expand(*allowed.shape[:2], frames, frames), self_mask(frames, allowed.device))
        scores = torch.matmul(query, key.transpose(-1, -2)) / math.sqrt(self.head_dim)  # [B, h, T, T]
        weights = self.attention_dropout(masked_softmax(scores, allowed))
        return self.output_proj(self.merge_heads(torch.matmul(weights.to(value.dtype), value)))


def self_mask(frames: int, device: torch.device | None = None) -> torch.Tensor:
    """Bool ``[T, T]`` identity: True where the key is the query's own frame."""
    return torch.eye(frames, dtype=torch.bool, device=device)
