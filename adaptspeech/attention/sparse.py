"""Sparse Transformer attention patterns (Child et al. 2019), seeds/002 section 3.3, Fig. 1b/1c, eq. 15.

Shared-QK queries and keys (seeds/002 section 4, see :mod:`.shared_qk`); with stride / block length ``l =
sparse_block_size``, the heads are split between two patterns (the first ``ceil(h/2)`` heads take the first,
the others the second; Sparse Transformer's "one head per pattern" arrangement):

* ``sparse_strided`` (Fig. 1b): local ``A1(i) = {j : |i - j| < l}`` and strided
  ``A2(i) = {j : (i - j) mod l = 0}``.
* ``sparse_fixed`` (Fig. 1c): block ``A1(i) = {j : floor(j / l) = floor(i / l)}`` and summary
  ``A2(i) = {j : j mod l >= l - c}`` (``c = sparse_summary``, the last ``c`` frames of every block).

Bidirectional (encoder) adaptation: the paper's patterns are causal (``j <= i``); an encoder frame may look both
ways, so each pattern is mirrored: the local window extends ``l - 1`` frames on both sides, the stride runs in
both directions, the block is the whole block, and every block's summary frames are visible (not only earlier
blocks'). With one head, that head attends to the union of both patterns (the paper's "merged" head).

Within the pattern, keys are further restricted to real frames and allowed chunks, and the query's own key is
left out unless nothing else is left (Reformer's rule for shared QK). Only the pattern's keys are computed: each
query gathers its ``K`` key positions (``2l - 1`` local, ``2 ceil(T / l) + 1`` strided, ``l`` block, ``c
ceil(T / l)`` summary), so time and memory are ``O(h T K d_k)``, i.e. ``O(T sqrt(T))`` for ``l ~ sqrt(T)``,
never a ``T x T`` mask.
"""

from __future__ import annotations

import math

import torch

from .config import AttentionConfig
from .registry import ATTENTION
from .shared_qk import SharedQKAttention, exclude_self, gathered_allowed, gathered_attention

#: ``index [T, K]`` (unclamped key positions, possibly outside ``0 .. T-1``) of one pattern.
Pattern = torch.Tensor


class SparseAttention(SharedQKAttention):
    """Base of the two Sparse Transformer kinds: subclasses give the two patterns' key positions
    (:meth:`patterns`) and say which positions of the second are already in the first (:meth:`in_first`).

    Args:
        config (`AttentionConfig`): ``hidden_size``, ``num_heads``, ``dropout``, ``bias``, chunk settings,
            ``sparse_block_size`` (``l``).
    """

    def __init__(self, config: AttentionConfig) -> None:
        super().__init__(config)
        self.block_size = config.sparse_block_size

    def patterns(self, frames: int, device: torch.device) -> tuple[Pattern, Pattern]:
        """Key positions ``[T, K1]`` and ``[T, K2]`` of the first and second pattern, for each query."""
        raise NotImplementedError(f"{type(self).__name__} must implement patterns")

    def in_first(self, queries: torch.Tensor, keys: torch.Tensor) -> torch.Tensor:
        """Bool, broadcast of ``queries`` and ``keys`` (positions): True where the key is in the query's first
        pattern (used to drop duplicates from a merged head)."""
        raise NotImplementedError(f"{type(self).__name__} must implement in_first")

    def head_patterns(self, frames: int, device: torch.device) -> list[tuple[slice, Pattern, torch.Tensor]]:
        """``(heads, index [T, K], distinct [T, K])`` per head group; ``distinct`` is False on duplicated slots."""
        first, second = self.patterns(frames, device)
        if self.num_heads == 1:
            positions = torch.arange(frames, device=device)[:, None]
            merged = torch.cat([first, second], dim=-1)
            distinct = torch.cat([torch.ones_like(first, dtype=torch.bool), ~self.in_first(positions, second)], -1)
            return [(slice(0, 1), merged, distinct)]
        split = math.ceil(self.num_heads / 2)
        return [
            (slice(0, split), first, torch.ones_like(first, dtype=torch.bool)),
            (slice(split, self.num_heads), second, torch.ones_like(second, dtype=torch.bool)),
        ]

    def forward(self, hidden_states: torch.Tensor, padding_mask: torch.Tensor | None = None) -> torch.Tensor:
        """``[B, T, D]``, ``[B, T]`` bool or None -> ``[B, T, D]``."""
        self.check_padding_mask(hidden_states, padding_mask)
        frames, device = hidden_states.shape[1], hidden_states.device
        query, key = self.queries_and_keys(hidden_states)
        value = self.split_heads(self.value_proj(hidden_states))
        positions = torch.arange(frames, device=device)[:, None]
        contexts = []
        for heads, raw_index, distinct in self.head_patterns(frames, device):
            in_range = (raw_index >= 0) & (raw_index < frames) & distinct
            index = raw_index.clamp(0, frames - 1)[None, None]  # [1, 1, T, K]
            allowed = gathered_allowed(
                padding_mask, index, in_range[None, None], self.config.chunk_size, self.config.num_left_chunks
            )
            allowed = exclude_self(allowed, (index == positions) & in_range)
            contexts.append(
                gathered_attention(
                    query[:, heads], key[:, heads], value[:, heads], index, allowed, self.attention_dropout
                )
            )
        return self.output_proj(self.merge_heads(torch.cat(contexts, dim=1)))

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, block_size={self.block_size}"


@ATTENTION.register("sparse_strided")
class StridedSparseAttention(SparseAttention):
    """Strided pattern (Fig. 1b), bidirectional: local ``|i - j| < l``, strided ``(i - j) mod l = 0``."""

    def patterns(self, frames: int, device: torch.device) -> tuple[Pattern, Pattern]:
        block = self.block_size
        positions = torch.arange(frames, device=device)[:, None]
        local = positions + torch.arange(-(block - 1), block, device=device)[None, :]
        reach = math.ceil(frames / block)
        strided = positions + block * torch.arange(-reach, reach + 1, device=device)[None, :]
        return local, strided

    def in_first(self, queries: torch.Tensor, keys: torch.Tensor) -> torch.Tensor:
        return (queries - keys).abs() < self.block_size


@ATTENTION.register("sparse_fixed")
class FixedSparseAttention(SparseAttention):
    """Fixed pattern (Fig. 1c), bidirectional: own block, and the last ``c = sparse_summary`` frames of every
    block."""

    def __init__(self, config: AttentionConfig) -> None:
        super().__init__(config)
        self.summary = config.sparse_summary

    def patterns(self, frames: int, device: torch.device) -> tuple[Pattern, Pattern]:
        block = self.block_size
        positions = torch.arange(frames, device=device)[:, None]
        own_block = (positions // block) * block + torch.arange(block, device=device)[None, :]
        starts = torch.arange(math.ceil(frames / block), device=device)[:, None] * block
        summary = (starts + torch.arange(block - self.summary, block, device=device)[None, :]).reshape(1, -1)
        return own_block, summary.expand(frames, -1)

    def in_first(self, queries: torch.Tensor, keys: torch.Tensor) -> torch.Tensor:
        return queries // self.block_size == keys // self.block_size

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, summary={self.summary}"
