"""Blockwise Transformer-XL relative-position attention: memory linear in the sequence length.

The scores of Transformer-XL attention as WeNet computes them, per head, with the ``1/sqrt(d_k)`` scale folded into
the two query terms::

    A_ij = (q_i + u) . k_j / sqrt(d_k) + (q_i + v) . p_{i-j} / sqrt(d_k)        (terms (ac) + (bd))

are formed for one block of ``C <= B`` queries ``i in [s, s + C)`` at a time, against all ``T`` keys. The block's
``(bd)`` term needs the relative positions ``i - j in [s - T + 1, s + C - 1]`` only: ``C + T - 1`` rows of the
projected position table, one contiguous slice, multiplied in one matrix product to ``C x (C + T - 1)`` and
shifted by WeNet's ``rel_shift`` (its chunk form: ``C`` queries that are the last of ``C + M`` keys, here with
``M = T - C`` and the slice starting at the right offset). No ``T x T`` matrix exists, in forward or backward:

* **forward** keeps, per query row, only the output and the log-sum-exp of the masked scores (``[B, h, T]``);
* **backward** recomputes each block's scores from the saved ``q``, ``k``, ``v`` and position table, rebuilds the
  softmax from the saved log-sum-exp and forms that block's gradients (``dS = P * (dP - rowsum(dO * O))``,
  as flash attention does), accumulating the key, value and position-table gradients.

Peak memory is ``O(T D)`` for the saved tensors plus ``O(B T h)`` for the one block being computed; time is one
extra score computation per block in backward (the full path keeps its ``T x T`` matrices instead).

Deviations from the full path (:meth:`~.rel_pos.RelPositionSelfAttention._attend`), none changing the result:

* the position table given here has ``2T`` rows, relative positions ``T, T-1, ..., -(T-1)``: WeNet's padded
  ``rel_shift`` never reads the first column of its padded product, so instead of a zero row (which would cost a
  copy of the table) the row of position ``T`` stands in front; its gradient is zero;
* masks are built per block from frame indices (:func:`~.masks.attention_mask_rows`), never as ``T x T``;
* dropout on the attention weights (training only) draws each block's keep-mask from its own generator seeded
  from one number drawn from torch's global generator per call (so backward regenerates the same masks, and
  activation checkpointing, which restores the global generator, reproduces them too). The masks therefore
  differ from the full path's draws; their distribution is the same (keep with ``1 - p``, scale ``1/(1-p)``);
* no fused kernel: PyTorch's SDPA kernels take an additive float mask but give no gradient for it, and the
  ``(bd)`` term needs one (``v``, ``W_pos`` and the query all learn through it), so this pure-PyTorch path is
  the only one, on every device;
* under autocast the inputs are cast once to the autocast dtype and autocast is off inside the autograd function
  (autocast would otherwise cast some products and not others, mixing dtypes), so the block computes in that
  dtype throughout.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from ..shortcuts import maybe_true
from .masks import attention_mask_rows, key_padding_mask
from .positional import relative_scores_prepadded, relative_scores_prepadded_backward


def block_positions(positions: torch.Tensor, start: int, stop: int) -> torch.Tensor:
    """The rows of ``positions`` ``[h, 2T, d_k]`` (relative positions ``T .. -(T-1)``) that queries ``start ..
    stop-1`` need, with one unread row in front: ``[h, C + T, d_k]`` (a view), ``C = stop - start``.

    Row ``m`` of the slice is position ``stop - m``: after :func:`~.positional.relative_scores_prepadded` the
    block's score ``(a, j)`` reads row ``j + C - a``, i.e. position ``(start + a) - j``; row 0 is never read.
    """
    frames = positions.shape[1] // 2
    return positions[:, frames - stop : 2 * frames - start]


class Workspace:
    """Two (three with dropout) scratch buffers of ``B * h * C_max * (C_max + T)`` elements, reused by every block.

    Reusing them keeps the blockwise path fast on CPU: a fresh ``C x T`` matrix per block and step (tens of MB,
    above glibc's mmap threshold) would be a fresh ``mmap`` whose every page faults on first touch.

    Args:
        like: a tensor giving dtype and device.
        rows: ``B * h``.
        block: the largest block ``C_max``.
        frames: ``T``.
    """

    def __init__(self, like: torch.Tensor, rows: int, block: int, frames: int) -> None:
        self.numel = rows * block * (block + frames)
        self.like = like
        self.first = like.new_empty(self.numel)
        self.second = like.new_empty(self.numel)
        self._third: torch.Tensor | None = None

    @property
    def third(self) -> torch.Tensor:
        """The dropout buffer, allocated on first use."""
        if self._third is None:
            self._third = self.like.new_empty(self.numel)
        return self._third

    @staticmethod
    def view(buffer: torch.Tensor, *shape: int) -> torch.Tensor:
        """The first ``prod(shape)`` elements of ``buffer`` as a contiguous tensor of ``shape``."""
        return buffer[: math.prod(shape)].view(*shape)


def block_scores(
    query_u: torch.Tensor,
    query_v: torch.Tensor,
    key: torch.Tensor,
    positions: torch.Tensor,
    allowed: torch.Tensor | None,
    work: Workspace,
) -> torch.Tensor:
    """One query block's masked scores ``(q_i + u) . k_j + (q_i + v) . p_{i-j}`` (queries already scaled), written
    into ``work.second``; ``work.first`` holds the padded position product meanwhile.

    Args:
        query_u, query_v: ``[B, h, C, d_k]`` (rows contiguous, e.g. a slice of ``[B, h, T, d_k]``),
            ``(q + u) / sqrt(d_k)`` and ``(q + v) / sqrt(d_k)``.
        key: ``[B, h, T, d_k]`` contiguous, all keys.
        positions: ``[h, C + T, d_k]`` from :func:`block_positions`.
        allowed: bool broadcastable to ``[B, h, C, T]`` (True = may attend), or None.
        work: the scratch buffers.

    Returns:
        ``[B * h, C, T]`` (a view of ``work.second``); disallowed entries hold the dtype's minimum.
    """
    batch, heads, queries, head_dim = query_u.shape
    frames = key.shape[2]
    rows, width = batch * heads, queries + frames
    padded = work.view(work.first, batch, heads, queries, width)
    for item in range(batch):  # one product per utterance: the position table is shared, never copied per batch
        torch.bmm(query_v[item], positions.transpose(-1, -2), out=padded[item])
    bias = relative_scores_prepadded(padded.view(rows, queries, width), frames)  # [B*h, C, T], a view
    scores = torch.baddbmm(
        bias,
        query_u.reshape(rows, queries, head_dim),
        key.view(rows, frames, head_dim).transpose(1, 2),
        out=work.view(work.second, rows, queries, frames),
    )
    if allowed is not None:
        scores.view(batch, heads, queries, frames).masked_fill_(~allowed, torch.finfo(scores.dtype).min)
    return scores


def dropout_keep(out: torch.Tensor, p: float, seed: int) -> torch.Tensor:
    """Fill ``out`` with inverted-dropout factors: ``1/(1-p)`` with probability ``1-p``, else 0, drawn from a
    generator seeded with ``seed`` (the same seed gives the same factors). Returns ``out``."""
    generator = torch.Generator(device=out.device)
    generator.manual_seed(seed)
    return out.bernoulli_(1.0 - p, generator=generator).div_(1.0 - p)


class _Settings:
    """What the autograd function needs besides tensors: masks, block size, dropout (kept on ``ctx``)."""

    def __init__(self, chunk_size: int, num_left_chunks: int, block_size: int, dropout: float, seed: int) -> None:
        self.chunk_size = chunk_size
        self.num_left_chunks = num_left_chunks
        self.block_size = block_size
        self.dropout = dropout
        self.seed = seed

    def blocks(self, frames: int) -> list[tuple[int, int, int]]:
        """``(index, start, stop)`` of every query block."""
        starts = range(0, frames, self.block_size)
        return [(index, start, min(start + self.block_size, frames)) for index, start in enumerate(starts)]

    def workspace(self, like: torch.Tensor) -> Workspace:
        """Scratch buffers for blocks of ``like`` ``[B, h, T, d_k]``."""
        batch, heads, frames, _ = like.shape
        return Workspace(like, batch * heads, min(self.block_size, frames), frames)

    def allowed(
        self, keys: torch.Tensor | None, start: int, stop: int, frames: int, device: torch.device
    ) -> torch.Tensor | None:
        """Bool ``[B or 1, 1, C or 1, T]`` allowed mask of one block, or None."""
        return attention_mask_rows(keys, start, stop, frames, self.chunk_size, self.num_left_chunks, device)

    @staticmethod
    def queries(
        query: torch.Tensor, bias_u: torch.Tensor, bias_v: torch.Tensor, start: int, stop: int
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """``q + u`` and ``q + v`` of frames ``start .. stop-1`` (all pre-scaled by ``1/sqrt(d_k)``): two contiguous
        ``[B, h, C, d_k]``; backward forms them per block, so only ``q`` itself is kept for it."""
        block = query[:, :, start:stop]
        return block + bias_u[:, None, :], block + bias_v[:, None, :]


def _forward_blocks(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    bias_u: torch.Tensor,
    bias_v: torch.Tensor,
    positions: torch.Tensor,
    keys: torch.Tensor | None,
    settings: _Settings,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Forward of :class:`BlockwiseRelPositionFunction`: ``(out [B, h, T, d_k], lse [B, h, T, 1])``."""
    batch, heads, frames, head_dim = query.shape
    rows = batch * heads
    work = settings.workspace(query)
    out = value.new_empty(batch, heads, frames, head_dim)
    lse = query.new_empty(batch, heads, frames, 1)  # log-sum-exp of each query row's masked scores
    out_rows, lse_rows, value_rows = (
        out.view(rows, frames, head_dim),
        lse.view(rows, frames, 1),
        value.view(rows, frames, head_dim),
    )
    # q + u and q + v of the whole sequence, once (freed when forward returns; backward forms them per block)
    query_u_all, query_v_all = settings.queries(query, bias_u, bias_v, 0, frames)
    for index, start, stop in settings.blocks(frames):
        queries = stop - start
        allowed = settings.allowed(keys, start, stop, frames, query.device)
        query_u, query_v = query_u_all[:, :, start:stop], query_v_all[:, :, start:stop]
        weights = block_scores(query_u, query_v, key, block_positions(positions, start, stop), allowed, work)
        # softmax in place (no second C x T matrix): exp(S - max), its row sums divide the [C, d_k] output
        # rather than the [C, T] weights; the log-sum-exp is kept for backward
        peak = weights.amax(dim=-1, keepdim=True)
        total = weights.sub_(peak).exp_().sum(dim=-1, keepdim=True)
        block_lse = torch.add(peak, total.log(), out=lse_rows[:, start:stop])
        if allowed is not None:  # a row with no allowed key gets zero weights (as masked_softmax): exp(-inf)
            empty = ~allowed.any(dim=-1, keepdim=True)
            if maybe_true(empty.any()):
                block_lse.view(batch, heads, queries, 1).masked_fill_(empty, float("inf"))
                total.view(batch, heads, queries, 1).masked_fill_(empty, float("inf"))
        if settings.dropout > 0:
            weights.mul_(dropout_keep(work.view(work.first, *weights.shape), settings.dropout, settings.seed + index))
        # the product into a fresh tensor: written straight into the strided slice of ``out`` it would take a
        # slow non-BLAS kernel on CPU; the division writes the slice
        torch.div(torch.bmm(weights, value_rows), total, out=out_rows[:, start:stop])
    return out, lse


def _backward_blocks(
    saved: tuple[torch.Tensor, ...], grad_out: torch.Tensor, settings: _Settings, need_positions: bool
) -> tuple[torch.Tensor, ...]:
    """Backward of :class:`BlockwiseRelPositionFunction`: gradients of query, key, value, ``u``, ``v`` and (when
    ``need_positions``) the position table, recomputing each block's scores from the saved tensors."""
    query, key, value, bias_u, bias_v, positions, out, lse, keys = saved
    batch, heads, frames, head_dim = query.shape
    rows = batch * heads
    delta = (grad_out * out).sum(dim=-1, keepdim=True)  # rowsum(dO * O) = rowsum(P * dP), [B, h, T, 1]
    work = settings.workspace(query)
    # dL/d(q + u) and dL/d(q + v), each written block by block in place; summed at the end
    grad_query_u = torch.empty_like(query)
    grad_query_v = torch.empty_like(query)
    grad_key = torch.zeros_like(key)
    grad_value = torch.zeros_like(value)
    grad_positions = torch.zeros_like(positions) if need_positions else None
    key_rows, value_rows = key.view(rows, frames, head_dim), value.view(rows, frames, head_dim)
    for index, start, stop in settings.blocks(frames):
        queries = stop - start
        query_u, query_v = settings.queries(query, bias_u, bias_v, start, stop)
        block_pos = block_positions(positions, start, stop)
        allowed = settings.allowed(keys, start, stop, frames, query.device)
        weights = block_scores(query_u, query_v, key, block_pos, allowed, work)  # in work.second
        weights.sub_(lse[:, :, start:stop].reshape(rows, queries, 1)).exp_()  # P, recomputed
        grad_block = grad_out[:, :, start:stop].reshape(rows, queries, head_dim)
        keep = None
        if settings.dropout > 0:
            keep = dropout_keep(work.view(work.third, *weights.shape), settings.dropout, settings.seed + index)
            dropped = torch.mul(weights, keep, out=work.view(work.first, *weights.shape))
            grad_value.view(rows, frames, head_dim).baddbmm_(dropped.transpose(1, 2), grad_block)
        else:
            grad_value.view(rows, frames, head_dim).baddbmm_(weights.transpose(1, 2), grad_block)
        # dP = dO V^T, then dS = P * (dP - rowsum(dO * O)), in work.first
        grad_scores = torch.bmm(
            grad_block, value_rows.transpose(1, 2), out=work.view(work.first, rows, queries, frames)
        )
        if keep is not None:
            grad_scores.mul_(keep)
        grad_scores.sub_(delta[:, :, start:stop].reshape(rows, queries, 1)).mul_(weights)
        grad_query_u.view(rows, frames, head_dim)[:, start:stop] = torch.bmm(grad_scores, key_rows)
        grad_key.view(rows, frames, head_dim).baddbmm_(
            grad_scores.transpose(1, 2), query_u.view(rows, queries, head_dim)
        )
        # WeNet's rel_shift backwards: dS scattered into the padded [C, C + T] product it was read from
        grad_padded = relative_scores_prepadded_backward(
            grad_scores.view(batch, heads, queries, frames),
            work.view(work.second, batch, heads, queries, queries + frames),
        )
        block_grad = None
        for item in range(batch):
            grad_query_v[item, :, start:stop] = torch.bmm(grad_padded[item], block_pos)
            if grad_positions is not None:
                # into a contiguous temporary (an in-place product on the strided slice is a slow per-head loop)
                if block_grad is None:
                    block_grad = torch.bmm(grad_padded[item].transpose(-1, -2), query_v[item])
                else:
                    block_grad.baddbmm_(grad_padded[item].transpose(-1, -2), query_v[item])
        if block_grad is not None:
            block_positions(grad_positions, start, stop).add_(block_grad)  # type: ignore[arg-type]
    grad_u = grad_query_u.sum(dim=(0, 2))
    grad_v = grad_query_v.sum(dim=(0, 2))
    grad_query = grad_query_u.add_(grad_query_v)
    return grad_query, grad_key, grad_value, grad_u, grad_v, grad_positions


class BlockwiseRelPositionFunction(torch.autograd.Function):
    """``softmax(A) V`` of Transformer-XL attention in query blocks, with a backward that recomputes each block (see
    the module docstring).

    Inputs: ``query / sqrt(d_k)``, ``key``, ``value``, each ``[B, h, T, d_k]`` contiguous, ``u / sqrt(d_k)`` and
    ``v / sqrt(d_k)`` ``[h, d_k]``, ``positions`` ``[h, 2T, d_k]`` contiguous, all of one dtype, the key mask
    ``[B, 1, 1, T]`` or None, the settings. Output ``[B, h, T, d_k]``. Autocast is off inside (the caller casts the
    inputs to the autocast dtype), so forward and backward compute in the inputs' dtype.
    """

    @staticmethod
    def forward(  # type: ignore[override]
        ctx: Any,
        query: torch.Tensor,
        key: torch.Tensor,
        value: torch.Tensor,
        bias_u: torch.Tensor,
        bias_v: torch.Tensor,
        positions: torch.Tensor,
        keys: torch.Tensor | None,
        settings: _Settings,
    ) -> torch.Tensor:
        with torch.autocast(query.device.type, enabled=False):
            out, lse = _forward_blocks(query, key, value, bias_u, bias_v, positions, keys, settings)
        ctx.save_for_backward(query, key, value, bias_u, bias_v, positions, out, lse, keys)
        ctx.settings = settings
        return out

    @staticmethod
    def backward(ctx: Any, grad_out: torch.Tensor) -> tuple[torch.Tensor | None, ...]:  # type: ignore[override]
        with torch.autocast(grad_out.device.type, enabled=False):
            grads = _backward_blocks(ctx.saved_tensors, grad_out, ctx.settings, ctx.needs_input_grad[5])
        return (*grads, None, None)


def blockwise_relative_attention(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    pos_bias_u: torch.Tensor,
    pos_bias_v: torch.Tensor,
    positions: torch.Tensor,
    padding_mask: torch.Tensor | None,
    chunk_size: int = 0,
    num_left_chunks: int = -1,
    block_size: int = 256,
    dropout: float = 0.0,
) -> torch.Tensor:
    """``softmax_j(A_ij) V`` over the allowed keys, with ``A_ij = ((q_i + u) . k_j + (q_i + v) . p_{i-j}) /
    sqrt(d_k)``, computed ``block_size`` queries at a time.

    Args:
        query, key, value: ``[B, h, T, d_k]`` (projected, heads split).
        pos_bias_u, pos_bias_v: ``[h, d_k]``, the biases ``u`` and ``v``.
        positions: ``[h, 2T, d_k]``, the projected position embeddings ``p_r = W_pos R_r`` of ``r = T, T-1, ...,
            -(T-1)`` (row 0, position ``T``, is never read).
        padding_mask: bool ``[B, T]`` (True = real frame) or None; padded keys get no weight.
        chunk_size, num_left_chunks: chunk (streaming) mask, as :func:`~.masks.chunk_mask`.
        block_size: queries per block ``B``.
        dropout: dropout probability on the attention weights (0 = none; pass 0 in eval mode).

    Returns:
        ``[B, h, T, d_k]``, equal (to float rounding) to the full computation; rows with no allowed key are 0.
    """
    seed = int(torch.randint(0, 2**62, ()).item()) if dropout > 0 else 0
    scale = query.shape[-1] ** -0.5
    settings = _Settings(chunk_size, num_left_chunks, block_size, float(dropout), seed)
    device = query.device.type
    # one compute dtype: autocast's where it is on (as the full path's products would run), else the query's
    dtype = torch.get_autocast_dtype(device) if torch.is_autocast_enabled(device) else query.dtype
    return BlockwiseRelPositionFunction.apply(
        (query * scale)
        .to(dtype)
        .contiguous(),  # the scale folded into q, u, v: (q + u) . k / sqrt(d_k) = (q' + u') . k
        key.to(dtype).contiguous(),
        value.to(dtype).contiguous(),
        (pos_bias_u * scale).to(dtype),
        (pos_bias_v * scale).to(dtype),
        positions.to(dtype).contiguous(),
        key_padding_mask(padding_mask),
        settings,
    )
