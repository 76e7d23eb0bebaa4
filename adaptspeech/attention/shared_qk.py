"""Shared-QK attention, "Baseline (Q)" of Wu et al. 2022, Table 1 (Reformer, Kitaev et al. 2020, section 2.2).

One projection ``W_Q`` gives the queries; the keys are the same vectors normalised per head,
``k_j = q_j / ||q_j||``, so ``A_ij = q_i . k_j / sqrt(d_k)`` (the paper's eq. 1 with tied ``Q`` and ``K``). As in
Reformer, a token does not attend to itself (``q_i . k_i`` would dominate its row) unless it must: when no other
key is allowed (padding, chunk masks, or for the sparse / LSH kinds their patterns), the token attends to itself.

The attention is one call of PyTorch's fused ``scaled_dot_product_attention`` with the boolean mask "every allowed
key but the own one, unless it is the only one" (:func:`exclude_self`), so it runs on the same fused kernels as
``mhsa`` instead of materialising the ``T x T`` scores and weights itself.

Wu et al. 2022, section 4, uses shared-QK attention for every LSH (section 3.2) and sparse (section 3.3) kind, so
:class:`SharedQKAttention` is also their base class (its :meth:`~SharedQKAttention.queries_and_keys`,
:func:`exclude_self` and :func:`self_mask` serve them).
"""

from __future__ import annotations

from typing import ClassVar

import torch
from torch import nn

from .base import EncoderAttention
from .config import AttentionConfig
from .masks import row_has_key
from .registry import ATTENTION


def exclude_self(allowed: torch.Tensor, is_self: torch.Tensor) -> torch.Tensor:
    """Reformer's rule: drop the query's own key from ``allowed`` unless nothing else is allowed in its row.

    Args:
        allowed: bool ``[..., T, K]`` (True = may attend).
        is_self: bool, broadcastable to ``allowed``: True where the key is the query's own frame.

    Returns:
        bool, the broadcast shape of ``allowed`` and ``is_self``.
    """
    others = allowed & ~is_self
    alone = ~row_has_key(others)  # [..., T, 1]: rows with no key but (perhaps) the own one
    # in uint8: bool ops broadcasting ``alone`` over the keys take a slow CPU path (this function with
    # torch.where took 1.2 ms against 0.24 ms for a [2, 1, 500, 500] mask, torch 2.13, one thread)
    if torch.compiler.is_exporting():  # ONNX has no bit cast of bool to uint8; the same truth values
        return others | (allowed & is_self & alone)
    own = (allowed & is_self).view(torch.uint8) * alone.view(torch.uint8)
    return (others.view(torch.uint8) | own).view(torch.bool)


@ATTENTION.register("shared_qk")
class SharedQKAttention(EncoderAttention):
    """Shared-QK attention ("Baseline (Q)"): ``W_Q`` only, keys ``q / ||q||`` per head, no self-attention unless
    it must (see the module docstring). Time ``O(T^2 D)``; memory: the ``O(B T^2)`` boolean mask and what the
    fused kernel keeps.

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
        allowed = self.attention_mask(padding_mask, frames)  # [B|1, 1, T|1, T] bool or None
        is_self = self_mask(frames, hidden_states.device)
        if allowed is None:  # every key but the own one (for T > 1): no row is empty
            context = self.filled_attention(query, key, value, ~is_self if frames > 1 else None, None)
        else:
            mask = exclude_self(allowed.expand(*allowed.shape[:-2], frames, frames), is_self)
            context = self.fused_attention(query, key, value, mask)  # rows with no key: zeros
        return self.output_proj(self.merge_heads(context))  # context [B, h, T, d_k]


def self_mask(frames: int, device: torch.device | None = None) -> torch.Tensor:
    """Bool ``[T, T]`` identity: True where the key is the query's own frame."""
    return torch.eye(frames, dtype=torch.bool, device=device)
