"""Sparse Transformer attention patterns (Child et al. 2019), Wu et al. 2022, section 3.3, Fig. 1b/1c, eq. 15.

Shared-QK queries and keys (Wu et al. 2022, section 4, see :mod:`.shared_qk`); with stride / block length ``l =
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
(block-sparse): each pattern is a set of groups of queries that share their keys (:class:`Groups`), the queries
and keys of every group are gathered (``index_select`` along the frames, no ``T x T`` tensor) and one call of
PyTorch's fused ``scaled_dot_product_attention`` scores all groups as one batch, the pattern within a group
given as its boolean mask over the group's ``Q x K`` scores (rows with no allowed key give zeros):

* local: blocks of ``l`` queries against the ``3l`` keys of their block and its two neighbours (``3 T l``
  scores);
* strided: the ``l`` residue classes ``i mod l``, each ``ceil(T / l)`` queries against the same frames
  (``T^2 / l`` scores);
* block: blocks of ``l`` against themselves (``T l``); summary: every query against the ``c ceil(T / l)``
  summary frames.

So time and memory grow as ``T (l + T / l)``, i.e. ``T sqrt(T)`` for ``l ~ sqrt(T)``. The merged head (one head)
takes, per query, the union of its keys in both patterns (``T`` groups of one query each, a key both patterns
contain counted once), ``T (3l + T / l)`` scores for the strided kind. The groups, masks and slot maps depend
only on ``T`` (and the device), so a module keeps them for its last few lengths (:meth:`SparseAttention.layouts`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from ..shortcuts import known_true, maybe_true
from .config import AttentionConfig
from .masks import fill_empty_rows
from .options.sparse import FixedSparseOptions, SparseOptions
from .registry import ATTENTION
from .shared_qk import SharedQKAttention, exclude_self


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

    def slots(self, frames: int) -> torch.Tensor:
        """Long ``[T]``: the flat slot (``g * Q + q``) that holds frame ``t``'s query."""
        flat = self.queries.reshape(-1)
        real = flat < frames
        slots = torch.empty(frames, dtype=torch.long, device=flat.device)
        slots[flat[real]] = torch.arange(flat.numel(), device=flat.device)[real]
        return slots


@dataclass
class Layout:
    """One head group's pattern prepared for a length ``T`` (built once per length, see
    :meth:`SparseAttention.layouts`).

    Attributes:
        heads: the heads that take this pattern.
        queries: long ``[G Q]`` query positions, flat, empty slots sent to ``T - 1``.
        keys: long ``[G, K]`` key positions, clamped into ``0 .. T-1``.
        allowed: bool ``[1, G, Q, K]``: key in range, in the pattern and in an allowed chunk.
        own: bool ``[G, Q, K]``: the key is the query's own frame.
        mask: ``allowed`` after the own-key rule (the mask without padding), every row with a key
            (:func:`~.masks.fill_empty_rows`).
        empty: bool ``[1, G, Q, 1]``, the rows of ``mask`` that had no key (their outputs are zeroed), or None.
        slots: long ``[T]``: the flat slot holding each frame's query; None where frame ``t`` is in slot ``t``
            (blocks in frame order: the output needs no reordering).
    """

    heads: slice
    queries: torch.Tensor
    keys: torch.Tensor
    allowed: torch.Tensor
    own: torch.Tensor
    mask: torch.Tensor
    empty: torch.Tensor | None
    slots: torch.Tensor | None


#: lengths whose :class:`Layout` a module keeps.
LAYOUT_CACHE = 8


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
        self._layouts: dict[tuple[int, str, tuple[int, int]], list[Layout]] = {}

    def groups(self, frames: int, device: torch.device) -> tuple[Groups, Groups]:
        """The first and the second pattern for ``T = frames``."""
        raise NotImplementedError(f"{type(self).__name__} must implement groups")

    def in_first(self, queries: torch.Tensor, keys: torch.Tensor) -> torch.Tensor:
        """Bool, broadcast of ``queries`` and ``keys`` (positions): True where the key is in the query's first
        pattern (a merged head counts such keys of the second pattern once)."""
        raise NotImplementedError(f"{type(self).__name__} must implement in_first")

    def head_groups(self, frames: int, device: torch.device) -> list[tuple[slice, Groups]]:
        """``(heads, pattern)``: the first ``ceil(h/2)`` heads take the first pattern, the others the second;
        one head takes the union of both (:meth:`merged`)."""
        first, second = self.groups(frames, device)
        if self.num_heads == 1:
            return [(slice(0, 1), self.merged(first, second, frames))]
        split = math.ceil(self.num_heads / 2)
        return [(slice(0, split), first), (slice(split, self.num_heads), second)]

    def merged(self, first: Groups, second: Groups, frames: int) -> Groups:
        """The union of both patterns per query: ``T`` groups of one query, ``K1 + K2`` keys each (the second
        pattern's keys that are also in the first are masked, so each key counts once)."""
        keys, patterns = [], []
        for index, groups in enumerate((first, second)):
            slot = groups.slots(frames)
            group, row = slot // groups.queries.shape[1], slot % groups.queries.shape[1]
            own_keys = groups.keys[group]  # [T, K]
            pattern = (
                torch.ones_like(own_keys, dtype=torch.bool) if groups.pattern is None else groups.pattern[group, row]
            )
            if index == 1:
                pattern = pattern & ~self.in_first(torch.arange(frames, device=own_keys.device)[:, None], own_keys)
            keys.append(own_keys)
            patterns.append(pattern)
        queries = torch.arange(frames, device=first.queries.device)[:, None]
        return Groups(queries, torch.cat(keys, dim=-1), torch.cat(patterns, dim=-1)[:, None, :])

    def layouts(self, frames: int, device: torch.device) -> list[Layout]:
        """The head groups' :class:`Layout` for ``T = frames``, cached for the last :data:`LAYOUT_CACHE`
        lengths (they depend only on ``T``, the device and the fixed settings)."""
        cache_key = (frames, str(device), self.chunking())  # the chunks may be chosen per call
        if cache_key not in self._layouts:
            while len(self._layouts) >= LAYOUT_CACHE:
                self._layouts.pop(next(iter(self._layouts)))
            self._layouts[cache_key] = [
                self.layout(heads, groups, frames) for heads, groups in self.head_groups(frames, device)
            ]
        return self._layouts[cache_key]

    def layout(self, heads: slice, groups: Groups, frames: int) -> Layout:
        """One head group's pattern prepared for attention (everything but the padding)."""
        queries, keys = groups.queries, groups.keys
        allowed = ((keys >= 0) & (keys < frames))[:, None, :]  # [G, 1, K]
        if groups.pattern is not None:
            allowed = allowed & groups.pattern
        allowed = allowed.expand(-1, queries.shape[1], -1)[None]  # [1, G, Q, K]
        chunk_size, num_left_chunks = self.chunking()
        if chunk_size > 0:
            diff = queries[:, :, None] // chunk_size - keys[:, None, :] // chunk_size
            ok = diff >= 0
            if num_left_chunks >= 0:
                ok &= diff <= num_left_chunks
            allowed = allowed & ok
        own = queries[:, :, None] == keys[:, None, :]
        slots = groups.slots(frames)
        mask, empty = fill_empty_rows(exclude_self(allowed, own))  # e.g. a summary pattern past a short T
        return Layout(
            heads=heads,
            queries=queries.clamp(max=frames - 1).reshape(-1),
            keys=keys.clamp(0, frames - 1),
            allowed=allowed,
            own=own,
            mask=mask,
            empty=empty if maybe_true(empty.any()) else None,
            slots=None if known_true((slots == torch.arange(frames, device=slots.device)).all()) else slots,
        )

    def forward(self, hidden_states: torch.Tensor, padding_mask: torch.Tensor | None = None) -> torch.Tensor:
        """``[B, T, D]``, ``[B, T]`` bool or None -> ``[B, T, D]``."""
        self.check_padding_mask(hidden_states, padding_mask)
        batch, frames, _ = hidden_states.shape
        query, key = self.queries_and_keys(hidden_states)  # [B, h, T, d_k]
        value = self.split_heads(self.value_proj(hidden_states))
        if padding_mask is not None and known_true(padding_mask.all()):
            padding_mask = None
        contexts = [
            self.attend(query[:, layout.heads], key[:, layout.heads], value[:, layout.heads], layout, padding_mask)
            for layout in self.layouts(frames, hidden_states.device)
        ]  # each [B, T, h', d_k]
        return self.output_proj(torch.cat(contexts, dim=2).reshape(batch, frames, self.hidden_size))

    def attend(
        self,
        query: torch.Tensor,
        key: torch.Tensor,
        value: torch.Tensor,
        layout: Layout,
        padding_mask: torch.Tensor | None,
    ) -> torch.Tensor:
        """Attention of ``query [B, h', T, d]`` over its pattern's keys -> ``[B, T, h', d]`` (frame-major, so the
        head groups concatenate into ``[B, T, D]`` without a transpose).

        The ``G`` groups become the batch of one fused attention call: queries ``[B G, h', Q, d]``, keys and
        values ``[B G, h', K, d]``, mask ``[B G, 1, Q, K]`` (rows with no key give zeros, on every backend:
        :meth:`~.base.EncoderAttention.filled_attention`).
        """
        batch, heads, frames, dim = query.shape
        count, per_group = layout.own.shape[:2]
        mask, empty = layout.mask, layout.empty
        if padding_mask is not None:  # keys on padding out, then the own-key rule again
            real = padding_mask.bool()[:, layout.keys]  # [B, G, K]
            mask, empty = fill_empty_rows(exclude_self(layout.allowed & real[:, :, None, :], layout.own))

        def by_group(x: torch.Tensor) -> torch.Tensor:
            """``[B or 1, G, Q, K or 1]`` -> ``[B G, 1, Q, K or 1]``."""
            return x.expand(batch, -1, -1, -1).reshape(batch * count, 1, per_group, -1)

        def gather(x: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
            """``[B, h', T, d]`` at flat ``positions [G P]`` -> ``[B G, h', P, d]``."""
            rows = x.transpose(1, 2).index_select(1, positions)  # [B, G P, h', d]
            return rows.view(batch * count, -1, heads, dim).transpose(1, 2)

        flat_keys = layout.keys.reshape(-1)
        context = self.filled_attention(
            gather(query, layout.queries),
            gather(key, flat_keys),
            gather(value, flat_keys),
            by_group(mask),
            None if empty is None else by_group(empty),
        )  # [B G, h', Q, d]
        context = context.transpose(1, 2).reshape(batch, count * per_group, heads, dim)
        return context[:, :frames] if layout.slots is None else context.index_select(1, layout.slots)

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, block_size={self.block_size}"


@ATTENTION.register("sparse_strided", options=SparseOptions)
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


@ATTENTION.register("sparse_fixed", options=FixedSparseOptions)
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
