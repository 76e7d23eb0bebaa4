"""Attention of the LAS speller: content attention and its multi-head / location-aware variants.

Seed (``004``), for decoder state s_i and listener frames h_u:

    z_iu = <phi(s_i), psi(h_u)>,  phi = W s_i,  psi = U h_u     (W: K x A, U: K x B, no bias)
    alpha_i = softmax_u(z_i)                                     (padded frames masked out)
    c_i = sum_u alpha_iu h_u

:class:`ContentAttention` is exactly this (no 1/sqrt(K) scaling, as in the seed). The variants change
one hook each and share the scoring, masking and softmax:

- :class:`MultiHeadContentAttention` splits the K dimension into ``attention_heads`` heads, each with its
  own softmax, and gives each head a slice of a value projection ``V h_u`` (``V``: B x B, no bias); the
  per-head contexts are concatenated, so ``c_i`` keeps width B.
- :class:`LocationAwareAttention` adds location features of the previous weights to the keys,
  ``z_iu = <phi(s_i), psi(h_u) + L f_iu>`` with ``f_i = F * alpha_(i-1)`` (a 1-D convolution); this is
  Chorowski et al.'s location term written in the seed's dot-product form.
- :class:`LocationAwareMultiHeadAttention` combines both by multiple inheritance.

``masked_softmax`` gives weights that are exactly 0 on padded frames and sum to 1 over real frames.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
from torch import nn

from .las_config import LASConfig


def masked_softmax(scores: torch.Tensor, padding_mask: torch.Tensor) -> torch.Tensor:
    """Softmax over the last axis restricted to real frames.

    Args:
        scores: ``[..., T]`` attention energies z.
        padding_mask: bool, broadcastable to ``scores``, True on real frames.

    Returns:
        ``[..., T]`` weights: exactly 0 where the mask is False, summing to 1 over the real frames
        (a row without any real frame gets all zeros instead of NaN).
    """
    padding_mask = padding_mask.expand_as(scores)
    scores = scores.masked_fill(~padding_mask, float("-inf"))
    scores = scores.masked_fill(~padding_mask.any(dim=-1, keepdim=True), 0.0)
    return torch.softmax(scores, dim=-1).masked_fill(~padding_mask, 0.0)


class AttentionMemory(NamedTuple):
    """What the attention precomputes once per utterance (rows can be re-indexed for beams).

    keys ``[N, T, K]`` = psi(h) = U h, values ``[N, T, B]`` (h itself, or V h with several heads),
    padding_mask ``[N, T]`` bool.
    """

    keys: torch.Tensor
    values: torch.Tensor
    padding_mask: torch.Tensor

    def select(self, indices: torch.Tensor) -> AttentionMemory:
        """Rows ``indices`` ``[N']`` of every tensor."""
        return AttentionMemory(*(t.index_select(0, indices) for t in self))


class ContentAttention(nn.Module):
    """The seed's single-head dot-product content attention.

    Args:
        config (`LASConfig`): reads ``decoder_hidden`` (A), ``attention_dim`` (K) and the variant settings.
        memory_size (`int`): width B of the frames h_u attended over.
    """

    def __init__(self, config: LASConfig, memory_size: int) -> None:
        super().__init__()
        self.heads = 1
        self.phi = nn.Linear(config.decoder_hidden, config.attention_dim, bias=False)  # W
        self.psi = nn.Linear(memory_size, config.attention_dim, bias=False)  # U

    def values(self, memory: torch.Tensor) -> torch.Tensor:
        """What the weights average: ``[N, T, B] -> [N, T, B]`` (h itself for the seed)."""
        return memory

    def location_term(self, previous_weights: torch.Tensor) -> torch.Tensor | None:
        """Added to the keys: ``[N, T] -> [N, T, K]``, or None without location awareness."""
        return None

    def prepare(self, memory: torch.Tensor, padding_mask: torch.Tensor) -> AttentionMemory:
        """Precompute psi(h_u) and the values.

        Args:
            memory: ``[N, T, B]`` listener output h.
            padding_mask: ``[N, T]`` bool, True on real frames.
        """
        return AttentionMemory(self.psi(memory), self.values(memory), padding_mask)

    def forward(
        self, query: torch.Tensor, memory: AttentionMemory, previous_weights: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """One decoder step.

        Args:
            query: ``[N, A]`` decoder state s_i.
            memory: from :meth:`prepare`.
            previous_weights: ``[N, T]`` alpha_(i-1) (used by location-aware variants only).

        Returns:
            context ``[N, B]`` c_i and weights ``[N, T]`` alpha_i (the mean over heads for several heads,
            which still sums to 1 and is 0 on padded frames).
        """
        keys = memory.keys
        location = self.location_term(previous_weights)
        if location is not None:
            keys = keys + location
        n, frames, _ = keys.shape
        heads = self.heads
        phi = self.phi(query).view(n, heads, -1)  # [N, H, K/H]
        keys = keys.view(n, frames, heads, -1)  # [N, T, H, K/H]
        scores = torch.einsum("nhk,nthk->nht", phi, keys)  # z: [N, H, T]
        weights = masked_softmax(scores, memory.padding_mask[:, None, :])
        values = memory.values.view(n, frames, heads, -1)  # [N, T, H, B/H]
        context = torch.einsum("nht,nthd->nhd", weights, values).reshape(n, -1)
        return context, weights.mean(dim=1)


class MultiHeadContentAttention(ContentAttention):
    """``attention_heads`` content heads over slices of K, each reading a slice of ``V h``."""

    def __init__(self, config: LASConfig, memory_size: int) -> None:
        super().__init__(config, memory_size)
        self.heads = config.attention_heads
        self.value_proj = nn.Linear(memory_size, memory_size, bias=False)

    def values(self, memory: torch.Tensor) -> torch.Tensor:
        return self.value_proj(memory)


class LocationAwareAttention(ContentAttention):
    """Content attention whose keys get ``L (F * alpha_(i-1))`` added (convolutional location features)."""

    def __init__(self, config: LASConfig, memory_size: int) -> None:
        super().__init__(config, memory_size)
        kernel = config.location_kernel_size
        self.location_conv = nn.Conv1d(1, config.location_channels, kernel, padding=kernel // 2, bias=False)
        self.location_proj = nn.Linear(config.location_channels, config.attention_dim, bias=False)

    def location_term(self, previous_weights: torch.Tensor) -> torch.Tensor:
        features = self.location_conv(previous_weights[:, None, :])  # [N, C, T]
        return self.location_proj(features.transpose(1, 2))


class LocationAwareMultiHeadAttention(LocationAwareAttention, MultiHeadContentAttention):
    """Several heads and location features (the two hooks combine through the MRO)."""


def build_las_attention(config: LASConfig, memory_size: int) -> ContentAttention:
    """The attention variant the config asks for (heads x location awareness)."""
    multi_head = config.attention_heads > 1
    if config.location_aware:
        cls = LocationAwareMultiHeadAttention if multi_head else LocationAwareAttention
    else:
        cls = MultiHeadContentAttention if multi_head else ContentAttention
    return cls(config, memory_size)
