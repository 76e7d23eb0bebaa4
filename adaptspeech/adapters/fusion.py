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
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from ..registry import Registry

#: where the fused output's residual comes from (see the module docstring).
FUSION_RESIDUALS = ("ffn_input", "query", "none")

#: fusion types: name -> the per-layer fusion module.
FUSION_TYPES: Registry[type[nn.Module]] = Registry("fusion type")


@FUSION_TYPES.register("simadapter")
class SimAdapterFusion(nn.Module):
    """Attention over the outputs of N language adapters, one module per encoder layer.

    Args:
        hidden_size (`int`): width ``d``.
        num_entries (`int`): N, the number of fused entries (adapters, plus one if ``include_self``).
        temperature (`float`, defaults to 1.0): ``tau``.
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
        self.linear_q = nn.Linear(hidden_size, hidden_size)
        self.linear_k = nn.Linear(hidden_size, hidden_size)
        self.linear_v = nn.Linear(hidden_size, hidden_size, bias=False)
        self.reset_value_projection()

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

    def regularizer(self) -> torch.Tensor:
        """``sum_ij (I - W_V)_ij^2`` (a scalar; invariant to the transpose PyTorch stores)."""
        w = self.linear_v.weight
        eye = torch.eye(w.shape[0], dtype=w.dtype, device=w.device)
        return ((eye - w) ** 2).sum()


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
    residual = {"query": hidden_states, "none": None, "ffn_input": ffn_input}[settings.residual]
    if settings.residual == "ffn_input" and ffn_input is None:
        raise RuntimeError("SimAdapter residual 'ffn_input' was not captured from the encoder layer")
    return fusion(hidden_states, torch.stack(entries, dim=2), residual)
