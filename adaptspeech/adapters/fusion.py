"""SimAdapter fusion (Hou et al. 2021, "Exploiting adapters for cross-lingual low-resource speech recognition").

``SimAdapter(z, a_(S_1..S_N)) = sum_i Attn(z, a_i) (a_i W_V)`` with
``Attn(z, a) = softmax((z W_Q)(a W_K)^T / tau)`` over the N fused adapters at each frame, ``W_V`` initialised
to the identity plus 1e-6 off the diagonal, and ``L_reg = sum_ij (I - W_V)_ij^2``.

Choices where the paper is silent (following the official ESPnet-based implementation):

* the query ``z`` is the encoder layer's output (the language-agnostic representation the adapters read);
  keys and values are the outputs of the fused adapters applied to that same ``z``;
* ``W_Q`` and ``W_K`` are ``Linear(d, d)`` with bias and PyTorch's default (random) init; ``W_V`` is
  ``Linear(d, d, bias=False)``; there is no output projection and no ``1/sqrt(d)`` scaling (only ``tau``);
* ``include_self=True`` adds ``z`` itself as one more entry (the official code's ``"self"`` name); off by default;
* the output gets a residual: by default the layer's pre-FFN LayerNorm output (``residual="ffn_input"``, the
  official code), alternatively the query ``z`` (``"query"``) or none (``"none"``); the block that owns this module
  captures the residual (see :mod:`adaptspeech.adapters.block`);
* the optional guide loss (off by default) is cross-entropy between the time- and batch-averaged attention and
  the target language's index, computed by :func:`guide_loss`.

Two paths compute the same function. :func:`simadapter_output` runs every fused adapter's own forward and attends
over their stacked outputs (:meth:`SimAdapterFusion.forward`): the reference, and the path for any adapter.
:func:`stacked_simadapter_output` computes bottleneck adapters and fusion together without forming the adapter
outputs (:meth:`SimAdapterFusion.forward_stacked`): one LayerNorm statistics pass for all adapters, their
down-projections as one product over the concatenated weights, the scores and the weighted sum as one product each
through the concatenated up weights, and optionally the whole block recomputed in backward.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch import nn
from torch.nn import functional as F
from torch.utils.checkpoint import checkpoint

from ..registry import Registry
from .bottleneck import BottleneckAdapter, BottleneckStack, shared_layer_norm_eps, stack_bottlenecks

#: where the fused output's residual comes from (see the module docstring).
FUSION_RESIDUALS = ("ffn_input", "query", "none")

#: how a fusion over bottleneck adapters is computed (the same function): ``stacked`` (the default), ``reference`` (each
#: adapter's own forward and the fusion over their stacked outputs, as before the stacked path) or ``recompute`` (the
#: stacked path with the block recomputed in backward); see :meth:`SimAdapterFusion.set_path`.
FUSION_PATHS = ("stacked", "reference", "recompute")

#: fusion types: name -> the per-layer fusion module.
FUSION_TYPES: Registry[type[nn.Module]] = Registry("fusion type")


@FUSION_TYPES.register("simadapter")
class SimAdapterFusion(nn.Module):
    """Attention over the outputs of N language adapters, one module per encoder layer.

    Args:
        hidden_size (`int`): width ``d``.
        num_entries (`int`): N, the number of fused entries (adapters, plus one if ``include_self``).
        temperature (`float`, defaults to 1.0): ``tau``.

    Attributes:
        recompute (`bool`, defaults to `False`): on the stacked path, keep only the block's inputs for backward and
            compute the adapters and the fusion again there (activation checkpointing of the fusion block alone: less
            memory, one more forward of the block). A training-time choice, not saved with the weights.
        reference (`bool`, defaults to `False`): compute every call on the reference path (each adapter's own
            forward and the fusion over their stacked outputs), as inside
            :func:`~adaptspeech.adapters.layer_forward.reference_path`; for before / after measurements. Not saved.
    """

    def __init__(self, hidden_size: int, num_entries: int, temperature: float = 1.0) -> None:
        super().__init__()
        if num_entries < 1:
            raise ValueError(f"SimAdapter needs at least one fused entry, got {num_entries}")
        if temperature <= 0:
            raise ValueError(f"fusion temperature must be > 0, got {temperature}")
        self.hidden_size = hidden_size
        self.num_entries = num_entries
        self.temperature = temperature
        self.recompute = False
        self.reference = False
        self.linear_q = nn.Linear(hidden_size, hidden_size)
        self.linear_k = nn.Linear(hidden_size, hidden_size)
        self.linear_v = nn.Linear(hidden_size, hidden_size, bias=False)
        self.reset_value_projection()

    def set_path(self, path: str) -> None:
        """Compute this fusion on ``path``, one of :data:`FUSION_PATHS` (sets :attr:`recompute` and :attr:`reference`).

        Raises:
            ValueError: another name, naming the allowed ones.
        """
        if path not in FUSION_PATHS:
            raise ValueError(f"fusion path {path!r} unknown; allowed values: {', '.join(FUSION_PATHS)}")
        self.recompute = path == "recompute"
        self.reference = path == "reference"

    def reset_value_projection(self) -> None:
        """``W_V``: ones on the diagonal, 1e-6 elsewhere (Hou et al. 2021)."""
        with torch.no_grad():
            self.linear_v.weight.fill_(1e-6)
            self.linear_v.weight.fill_diagonal_(1.0)

    def forward(
        self,
        query: torch.Tensor,
        entries: torch.Tensor,
        residual: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Fuse the adapter outputs.

        Args:
            query: ``z`` [B, T, D].
            entries: the fused adapters' outputs ``a_i`` stacked [B, T, N, D].
            residual: added to the output when given [B, T, D].

        Returns:
            ``(output [B, T, D], weights [B, T, N])`` where the weights are non-negative and sum to 1 over N.
        """
        # Computed in the cheaper order (the same function): (z W_Q)(a_i W_K)^T = ((z W_Q) W_K^T) a_i^T (+ the
        # key bias term, the same for every i, kept so that its gradient (zero in exact arithmetic) exists as
        # before), and sum_i p_i (a_i W_V) = (sum_i p_i a_i) W_V. Per frame that is 3 d^2 multiply-adds instead of
        # (1 + 2N) d^2, and no [B, T, N, D] key and value stacks are kept for backward.
        q = self.linear_q(query)  # [B, T, D]
        q_k = q @ self.linear_k.weight  # [B, T, D]: q W_K^T in the row-vector convention
        scores = torch.einsum("btd,btnd->btn", q_k, entries)
        if self.linear_k.bias is not None:
            scores = scores + (q * self.linear_k.bias).sum(-1, keepdim=True)
        weights = torch.softmax((scores / self.temperature).float(), dim=-1).to(query.dtype)
        output = self.linear_v(torch.einsum("btn,btnd->btd", weights, entries))
        if residual is not None:
            output = output + residual
        return output, weights

    def forward_stacked(
        self,
        query: torch.Tensor,
        normalized: torch.Tensor,
        stacks: Sequence[BottleneckStack],
        residual: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """:meth:`forward` on the entries ``a_i = z + U_i h_i (+ c_i)`` of bottleneck adapters reading ``z``, without
        forming them (``h_i``: adapter i's bottleneck activations, ``U_i``: its up weight, ``c_i``: its up bias).

        * Scores: ``q_k . a_i = q_k . z + (U_i^T q_k) . h_i (+ q_k . c_i)``. The first term is the same for every entry
          (``z`` itself included) and the softmax over entries does not depend on it: it is left out, and ``U^T q_k``
          is one product through the up weights side by side.
        * Weighted sum: ``sum_i p_i a_i = z + sum_i p_i U_i h_i (+ sum_i p_i c_i)`` (the ``p_i`` sum to one): one
          product of the p-weighted activations with the same weights.

        No ``[B, T, N, D]`` tensor is formed or kept for backward. When ``num_entries`` exceeds the stacked adapters
        by one, ``z`` itself is the last entry (``include_self``; its score is the left-out common term).

        Args:
            query: ``z`` [B, T, D], the adapters' input and the query.
            normalized: ``z`` normalised by its LayerNorm statistics without scale and shift [B, T, D] (``z`` itself
                for adapters without LayerNorm).
            stacks: the fused adapters (:func:`~adaptspeech.adapters.bottleneck.stack_bottlenecks`); their indices
                are entry positions.
            residual: added to the output when given [B, T, D].

        Returns:
            ``(output [B, T, D], weights [B, T, N])`` as :meth:`forward` returns them.
        """
        shape = query.shape
        z = query.reshape(-1, shape[-1])  # [M, D]
        x = normalized.reshape(-1, shape[-1])
        rows = z.shape[0]
        q = self.linear_q(z)
        q_k = q @ self.linear_k.weight  # [M, D]
        hidden, columns = [], []
        for stack in stacks:
            h = stack.hidden(x)  # [M, n r]
            scores = (h * (q_k @ stack.up_weight)).view(rows, stack.count, stack.bottleneck).sum(-1)  # [M, n]
            if stack.up_bias is not None:
                scores = scores + q_k @ stack.up_bias.t()
            hidden.append(h)
            columns.append(scores)
        scores = _in_entry_order(columns, stacks, self.num_entries)
        if self.linear_k.bias is not None:  # the same for every entry: kept so that b_K's gradient is as before
            scores = scores + (q @ self.linear_k.bias).unsqueeze(-1)
        weights = torch.softmax((scores / self.temperature).float(), dim=-1).to(query.dtype)  # [M, N]
        combined = z
        for stack, h in zip(stacks, hidden, strict=True):
            p = _entry_columns(weights, stack.indices)  # [M, n]
            weighted = (h.view(rows, stack.count, stack.bottleneck) * p.unsqueeze(-1)).view(h.shape)
            combined = torch.addmm(combined, weighted, stack.up_weight.t())
            if stack.up_bias is not None:
                combined = combined + p @ stack.up_bias
        output = self.linear_v(combined).view(shape)
        if residual is not None:
            output = output + residual
        return output, weights.view(*shape[:-1], self.num_entries)

    def regularizer(self) -> torch.Tensor:
        """``sum_ij (I - W_V)_ij^2`` (a scalar; invariant to the transpose PyTorch stores)."""
        w = self.linear_v.weight
        eye = torch.eye(w.shape[0], dtype=w.dtype, device=w.device)
        return ((eye - w) ** 2).sum()


def _in_entry_order(columns: list[torch.Tensor], stacks: Sequence[BottleneckStack], entries: int) -> torch.Tensor:
    """The stacks' score columns ``[M, n]`` as one ``[M, entries]`` tensor in entry order; an entry no stack holds
    (``z`` itself, the last) scores 0."""
    positions = [i for stack in stacks for i in stack.indices]
    if len(positions) < entries:
        columns = [*columns, columns[0].new_zeros(columns[0].shape[0], entries - len(positions))]
        positions += range(len(positions), entries)
    if positions == sorted(positions):
        return torch.cat(columns, dim=-1) if len(columns) > 1 else columns[0]
    split = [column for block in columns for column in block.split(1, dim=-1)]
    return torch.cat([split[positions.index(i)] for i in range(entries)], dim=-1)


def _entry_columns(weights: torch.Tensor, indices: list[int]) -> torch.Tensor:
    """``weights[:, indices]``: a view when the indices are consecutive."""
    if indices == list(range(indices[0], indices[0] + len(indices))):
        return weights[:, indices[0] : indices[0] + len(indices)]
    return weights[:, indices]


def guide_loss(weights: torch.Tensor, target_index: int, frame_mask: torch.Tensor | None = None) -> torch.Tensor:
    """Cross-entropy pulling the averaged fusion attention toward the target language (official "guide loss").

    Args:
        weights: fusion weights of one layer [B, T, N].
        target_index: index of the target language among the N entries.
        frame_mask: [B, T] bool, True on real frames; padded frames are left out of the average.

    Returns:
        ``-log(mean_{b,t} weights[b, t, target_index])`` as a scalar.
    """
    if frame_mask is None:
        mean = weights.reshape(-1, weights.shape[-1]).mean(0)
    else:
        m = frame_mask.to(weights.dtype).unsqueeze(-1)
        mean = (weights * m).sum((0, 1)) / m.sum().clamp_min(1.0)
    return -torch.log(mean[target_index].clamp_min(1e-12))


def simadapter_output(
    fusion: SimAdapterFusion,
    settings: Any,
    adapters: list[nn.Module],
    hidden_states: torch.Tensor,
    ffn_input: torch.Tensor | None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """One SimAdapter step over the outputs of ``adapters`` on the layer output.

    Args:
        fusion: the layer's fusion module.
        settings: its settings (``include_self``, ``residual``).
        adapters: the fused adapters, in the fusion's entry order.
        hidden_states: the layer output ``z`` [B, T, D].
        ffn_input: the layer's pre-FFN LayerNorm output [B, T, D] (needed for ``residual="ffn_input"``).

    Returns:
        ``(output [B, T, D], weights [B, T, N])``.
    """
    entries = [adapter(hidden_states) for adapter in adapters]
    if settings.include_self:
        entries.append(hidden_states)
    return fusion(hidden_states, torch.stack(entries, dim=2), _residual(settings, hidden_states, ffn_input))


def stacked_simadapter_output(
    fusion: SimAdapterFusion,
    settings: Any,
    adapters: list[BottleneckAdapter],
    hidden_states: torch.Tensor,
    ffn_input: torch.Tensor | None,
    recompute: bool = False,
) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`simadapter_output` for bottleneck adapters that
    :func:`~adaptspeech.adapters.bottleneck.stackable` accepts, computed by :meth:`SimAdapterFusion.forward_stacked`
    (see the module docstring).

    Args:
        fusion, settings, adapters, hidden_states, ffn_input: as for :func:`simadapter_output`.
        recompute: keep only the block's inputs for backward and compute the block again there (activation
            checkpointing of the adapters and the fusion alone); a no-op without gradients.

    Returns:
        ``(output [B, T, D], weights [B, T, N])``.
    """
    residual = _residual(settings, hidden_states, ffn_input)
    eps = shared_layer_norm_eps(adapters)

    def block(z: torch.Tensor, residual: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
        normalized = z if eps is None else F.layer_norm(z, z.shape[-1:], eps=eps)  # one statistics pass for all
        return fusion.forward_stacked(z, normalized, stack_bottlenecks(adapters), residual)

    if recompute and torch.is_grad_enabled():
        return checkpoint(block, hidden_states, residual, use_reentrant=False)
    return block(hidden_states, residual)


def _residual(settings: Any, hidden_states: torch.Tensor, ffn_input: torch.Tensor | None) -> torch.Tensor | None:
    """The tensor ``settings.residual`` names (see the module docstring)."""
    if settings.residual == "ffn_input" and ffn_input is None:
        raise RuntimeError("SimAdapter residual 'ffn_input' was not captured from the encoder layer")
    return {"query": hidden_states, "none": None, "ffn_input": ffn_input}[settings.residual]
