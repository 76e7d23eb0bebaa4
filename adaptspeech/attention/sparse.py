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
left out unless nothing else is left (Reformer's rule for shared QK). Only the pattern's blocks are computed
(block-sparse): each pattern is a set of groups of queries that share their keys, and one batched matmul per
pattern scores each group's queries against its keys:

* local: blocks of ``l`` queries against the ``3l`` keys of their block and its two neighbours (``3 T l``
  scores);
* strided: the ``l`` residue classes ``i mod l``, each ``ceil(T / l)`` queries against the same frames
  (``T^2 / l`` scores);
* block: blocks of ``l`` against themselves (``T l``); summary: every query against the ``c ceil(T / l)``
  summary frames.

So time and memory grow as ``T (l + T / l)``, i.e. ``T sqrt(T)`` for ``l ~ sqrt(T)``; no ``T x T`` mask is built.
A merged head combines its two patterns' partial softmaxes through their log-sum-exps (as flash attention
combines blocks), counting a key both patterns contain once.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from .config import AttentionConfig
from .registry import ATTENTION
from .shared_qk import SharedQKAttention


@dataclass
class Groups:
    """One pattern as groups of queries that share their keys.

    Attributes:
        queries: long ``[G, Q]`` query positions; every frame ``0 .. T-1`` appears exactly once, slots ``>= T``
            are empty.
        keys: long ``[G, K]`` key positions of each group (outside ``0 .. T-1``: no key).
        pattern: bool ``[G, Q, K]``, the pattern within the group (None: every key of the group).
    """

    queries: torch.Tensor
    keys: torch.Tensor
    pattern: torch.Tensor | None = None


def blocks(frames: int, size: int, device: torch.device) -> torch.Tensor:
    """Long ``[ceil(T / size), size]``: frame positions ``0 .. ceil(T / size) * size - 1`` in blocks."""
    return torch.arange(math.ceil(frames / size) * size, device=device).view(-1, size)


class SparseAttention(SharedQKAttention):
    """Base of the two Sparse Transformer kinds: subclasses give their two patterns as :class:`Groups`
    (:meth:`groups`) and say which keys of the second are already in the first (:meth:`in_first`).

    Args:
        config (`AttentionConfig`): ``hidden_size``, ``num_heads``, ``dropout``, ``bias``, chunk settings,
            ``sparse_block_size`` (``l``).
    """

    def __init__(self, config: AttentionConfig) -> None:
        super().__init__(config)
        self.block_size = config.sparse_block_size

    def groups(self, frames: int, device: torch.device) -> tuple[Groups, Groups]:
        """The first and the second pattern for ``T = frames``."""
        raise NotImplementedError(f"{type(self).__name__} must implement groups")

    def in_first(self, queries: torch.Tensor, keys: torch.Tensor) -> torch.Tensor:
        """Bool, broadcast of ``queries`` and ``keys`` (positions): True where the key is in the query's first
        pattern (a merged head counts such keys of the second pattern once)."""
        raise NotImplementedError(f"{type(self).__name__} must implement in_first")

    def head_groups(self, frames: int, device: torch.device) -> list[tuple[slice, list[Groups]]]:
        """``(heads, patterns)``: the first ``ceil(h/2)`` heads take the first pattern, the others the second;
        one head takes both (the second without the keys the first has)."""
        first, second = self.groups(frames, device)
        if self.num_heads == 1:
            distinct = ~self.in_first(second.queries[:, :, None], second.keys[:, None, :])
            pattern = distinct if second.pattern is None else second.pattern & distinct
            return [(slice(0, 1), [first, Groups(second.queries, second.keys, pattern)])]
        split = math.ceil(self.num_heads / 2)
        return [(slice(0, split), [first]), (slice(split, self.num_heads), [second])]

    def allowed(self, groups: Groups, frames: int, padding_mask: torch.Tensor | None) -> torch.Tensor:
        """Bool ``[B or 1, 1, G, Q, K]``: key in range, in the pattern, real, in an allowed chunk (before the
        own-key rule)."""
        keys = groups.keys
        allowed = ((keys >= 0) & (keys < frames))[:, None, :].expand(-1, groups.queries.shape[1], -1)
        if groups.pattern is not None:
            allowed = allowed & groups.pattern
        allowed = allowed[None, None]
        if padding_mask is not None and not bool(padding_mask.all()):
            real = padding_mask.bool()[:, keys.clamp(0, frames - 1)]  # [B, G, K]
            allowed = allowed & real[:, None, :, None, :]
        chunk_size, num_left_chunks = self.config.chunk_size, self.config.num_left_chunks
        if chunk_size > 0:
            diff = groups.queries[:, :, None] // chunk_size - keys[:, None, :] // chunk_size
            ok = diff >= 0
            if num_left_chunks >= 0:
                ok &= diff <= num_left_chunks
            allowed = allowed & ok
        return allowed

    def forward(self, hidden_states: torch.Tensor, padding_mask: torch.Tensor | None = None) -> torch.Tensor:
        """``[B, T, D]``, ``[B, T]`` bool or None -> ``[B, T, D]``."""
        self.check_padding_mask(hidden_states, padding_mask)
        frames, device = hidden_states.shape[1], hidden_states.device
        query, key = self.queries_and_keys(hidden_states)
        value = self.split_heads(self.value_proj(hidden_states))
        contexts = []
        for heads, patterns in self.head_groups(frames, device):
            contexts.append(
                self.attend(query[:, heads], key[:, heads], value[:, heads], patterns, padding_mask, frames)
            )
        return self.output_proj(self.merge_heads(torch.cat(contexts, dim=1)))

    def attend(
        self,
        query: torch.Tensor,
        key: torch.Tensor,
        value: torch.Tensor,
        patterns: list[Groups],
        padding_mask: torch.Tensor | None,
        frames: int,
    ) -> torch.Tensor:
        """Softmax attention of ``query [B, h', T, d]`` over the union of ``patterns``' keys -> ``[B, h', T, d]``.

        Each pattern gives, per query, its running maximum, its sum of exponentials and its unnormalised
        weighted values; the patterns are combined through their maxima (log-sum-exp), so the result is one
        softmax over the union.
        """
        device = query.device
        allowed = [self.allowed(groups, frames, padding_mask) for groups in patterns]
        is_self = [groups.queries[:, :, None] == groups.keys[:, None, :] for groups in patterns]  # [G, Q, K]
        # Reformer's rule over the union: the own key only for queries with no other allowed key.
        has_others = torch.zeros(allowed[0].shape[0], 1, frames + 1, dtype=torch.bool, device=device)
        for groups, ok, own in zip(patterns, allowed, is_self):
            others = (ok & ~own).any(dim=-1)  # [B|1, 1, G, Q]
            has_others = has_others | self.to_frames(others, groups, frames)
        partials = []
        for groups, ok, own in zip(patterns, allowed, is_self):
            query_others = has_others[:, :, self.slot_positions(groups, frames)]  # [B|1, 1, G, Q]
            ok = ok & ~(own & query_others[..., None])
            partials.append(self.partial(query, key, value, groups, ok, frames))
        peak = torch.stack([p[0] for p in partials]).amax(dim=0)  # [B, h', T]; -inf: no key at all
        peak = torch.where(torch.isfinite(peak), peak, torch.zeros_like(peak))
        total = sum(p[1] * torch.exp(p[0] - peak) for p in partials)
        summed = sum(p[2] * torch.exp(p[0] - peak)[..., None] for p in partials)
        return (summed / total.clamp_min(torch.finfo(total.dtype).tiny)[..., None]).to(value.dtype)

    @staticmethod
    def slot_positions(groups: Groups, frames: int) -> torch.Tensor:
        """``[G, Q]`` query positions with empty slots sent to the spare position ``T``."""
        return groups.queries.clamp(max=frames)

    def to_frames(self, per_slot: torch.Tensor, groups: Groups, frames: int) -> torch.Tensor:
        """``[..., G, Q]`` (one entry per query slot) -> ``[..., T + 1]`` in frame order (position ``T`` collects
        the empty slots)."""
        positions = self.slot_positions(groups, frames).reshape(-1)
        flat = per_slot.reshape(*per_slot.shape[:-2], -1)
        inverse = torch.full((frames + 1,), flat.shape[-1], dtype=torch.long, device=flat.device)
        inverse[positions] = torch.arange(positions.numel(), device=flat.device)
        padded = torch.cat([flat, torch.zeros_like(flat[..., :1])], dim=-1)  # slot index G*Q: nothing
        return padded[..., inverse]

    def partial(
        self,
        query: torch.Tensor,
        key: torch.Tensor,
        value: torch.Tensor,
        groups: Groups,
        allowed: torch.Tensor,
        frames: int,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """One pattern's block-sparse scores: per query (``[B, h', T]``) the maximum allowed score, the sum of
        ``exp(score - maximum)``, and ``[B, h', T, d]`` the values weighted by those exponentials (dropout
        applied to the weights, not to the sum)."""
        positions = groups.queries.clamp(max=frames - 1)
        keys_at = groups.keys.clamp(0, frames - 1)
        group_query = query[:, :, positions]  # [B, h', G, Q, d]
        group_key, group_value = key[:, :, keys_at], value[:, :, keys_at]  # [B, h', G, K, d]
        scores = torch.matmul(group_query, group_key.transpose(-1, -2)) / math.sqrt(query.shape[-1])
        scores = scores.float().masked_fill(~allowed, float("-inf"))  # [B, h', G, Q, K]
        peak = scores.amax(dim=-1)
        peak = torch.where(torch.isfinite(peak), peak, torch.zeros_like(peak)).detach()
        weights = torch.exp(scores - peak[..., None])  # masked: exactly 0
        total = weights.sum(dim=-1)
        weighted = torch.matmul(self.attention_dropout(weights).to(value.dtype), group_value)  # [B, h', G, Q, d]
        no_key = torch.full_like(peak, float("-inf"))
        peak = torch.where(allowed.any(dim=-1), peak, no_key)
        return (
            self.to_frames(peak, groups, frames)[..., :frames],
            self.to_frames(total, groups, frames)[..., :frames],
            self.to_frames(weighted.movedim(-1, 2), groups, frames)[..., :frames].movedim(2, -1),
        )

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, block_size={self.block_size}"


@ATTENTION.register("sparse_strided")
class StridedSparseAttention(SparseAttention):
    """Strided pattern (Fig. 1b), bidirectional: local ``|i - j| < l``, strided ``(i - j) mod l = 0``."""

    def groups(self, frames: int, device: torch.device) -> tuple[Groups, Groups]:
        block = self.block_size
        local = blocks(frames, block, device)  # [G, l]
        neighbourhood = torch.cat([local - block, local, local + block], dim=-1)  # [G, 3l]
        near = (local[:, :, None] - neighbourhood[:, None, :]).abs() < block
        residues = local.T.contiguous()  # [l, G]: the frames i with the same i mod l
        return Groups(local, neighbourhood, near), Groups(residues, residues)

    def in_first(self, queries: torch.Tensor, keys: torch.Tensor) -> torch.Tensor:
        return (queries - keys).abs() < self.block_size


@ATTENTION.register("sparse_fixed")
class FixedSparseAttention(SparseAttention):
    """Fixed pattern (Fig. 1c), bidirectional: own block, and the last ``c = sparse_summary`` frames of every
    block."""

    def __init__(self, config: AttentionConfig) -> None:
        super().__init__(config)
        self.summary = config.sparse_summary

    def groups(self, frames: int, device: torch.device) -> tuple[Groups, Groups]:
        own = blocks(frames, self.block_size, device)  # [G, l]
        summary = own[:, self.block_size - self.summary :].reshape(1, -1)  # [1, c G]
        return Groups(own, own), Groups(own.reshape(1, -1), summary)

    def in_first(self, queries: torch.Tensor, keys: torch.Tensor) -> torch.Tensor:
        return queries // self.block_size == keys // self.block_size

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, summary={self.summary}"
