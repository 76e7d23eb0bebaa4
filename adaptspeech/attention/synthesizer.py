"""Synthesizer attention (Wu et al. 2022, section 3.4, after Tay et al. 2021): attention weights synthesised without
query-key products.

``synthesizer_dense`` (eq. 16), per head ``i``: ``A^i = F^i(X) = W2^i(ReLU(W1^i X + b1^i)) + b2^i`` with
``W1^i: D -> N`` and ``W2^i: N -> L`` (``L = synthesizer_max_len``), so each frame produces its own row of
logits over up to ``L`` key positions: the paper's "SYN. (Dense+M)". ``synthesizer_dense_shared``
(:mod:`.synthesizer_dense_shared`) is "SYN. (Dense)": one ``F`` whose weights all heads share.

``synthesizer_random``: ``A`` is a learnable ``[h, L, L]`` matrix, independent of the input and shared by the
batch (the paper's "SYN. (Random)"). With ``synthesizer_init="fixed_patterns"`` it starts from the paper's Fig.
    2a
patterns (see :mod:`.patterns`), the paper's own proposal, and ``synthesizer_freeze=True`` keeps those weights
fixed (a buffer, not a parameter).

Both: the logits are cropped to the sequence (``[h, T, T]``), masked (padded keys, chunk masks), softmaxed
over the keys and applied to the values (no ``1/sqrt(d_k)``: there is no dot product to scale), heads
concatenated, then ``W_O``. Sequences longer than ``L`` are refused: the weights have no columns for them.
"""

from __future__ import annotations

from typing import ClassVar

import torch
from torch import nn

from .base import EncoderAttention, linear_uniform_
from .config import AttentionConfig
from .masks import masked_softmax
from .options.synthesizer import DenseSynthesizerOptions, RandomSynthesizerOptions
from .patterns import RANDOM_STD, fixed_pattern_logits
from .registry import ATTENTION


class SynthesizerAttention(EncoderAttention):
    """Shared part of the synthesizers: crop, mask, softmax, weighted sum of values, output projection.

    Subclasses implement :meth:`attention_logits`.

    Args:
        config (`AttentionConfig`): ``hidden_size``, ``num_heads``, ``synthesizer_max_len``, ``dropout``,
            ``bias``, chunk settings.
    """

    def __init__(self, config: AttentionConfig) -> None:
        super().__init__(config)
        self.max_len = config.synthesizer_max_len

    def attention_logits(self, hidden_states: torch.Tensor) -> torch.Tensor:
        """Logits ``[B or 1, h, T, T]`` for the ``T`` frames of ``hidden_states [B, T, D]``."""
        raise NotImplementedError(f"{type(self).__name__} must implement attention_logits")

    def attention_weights(self, hidden_states: torch.Tensor, padding_mask: torch.Tensor | None) -> torch.Tensor:
        """Masked softmax of the logits: ``[B or 1, h, T, T]`` (rows of padded keys get zero weight)."""
        frames = hidden_states.shape[1]
        if frames > self.max_len:
            raise ValueError(
                f"{type(self).__name__}: sequence of {frames} frames is longer than "
                f"attention.synthesizer_max_len={self.max_len}; raise synthesizer_max_len (the learned "
                "matrices are that wide) or split the input"
            )
        logits = self.attention_logits(hidden_states)
        return masked_softmax(logits, self.attention_mask(padding_mask, frames))

    def forward(self, hidden_states: torch.Tensor, padding_mask: torch.Tensor | None = None) -> torch.Tensor:
        """``[B, T, D]``, ``[B, T]`` bool or None -> ``[B, T, D]``."""
        self.check_padding_mask(hidden_states, padding_mask)
        weights = self.attention_dropout(self.attention_weights(hidden_states, padding_mask))
        values = self.split_heads(self.value_proj(hidden_states))  # [B, h, T, d_k]
        context = torch.matmul(weights.to(values.dtype), values)  # weights broadcast over the batch if shared
        return self.output_proj(self.merge_heads(context))

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, max_len={self.max_len}"


@ATTENTION.register("synthesizer_dense", options=DenseSynthesizerOptions)
class DenseSynthesizerAttention(SynthesizerAttention):
    """Dense synthesizer, eq. (16) per head: ``dense1`` is ``W1`` of all heads (``D -> h N``),
    ``dense2_weight`` ``[h, N, L]`` and ``dense2_bias`` ``[h, L]`` are ``W2``, ``b2``; only the first ``T``
    columns are computed.

    This per-head version is the paper's "SYN. (Dense+M)" (Table 1: ``2HLN + 2HL^2``); the subclass with
    :attr:`shared_logits` set (``synthesizer_dense_shared``) is "SYN. (Dense)" (``2LN + 2L^2``).
    """

    #: True: one ``F`` whose ``[B, 1, T, T]`` weights every head shares (``W1: D -> N``, ``W2: N -> L``).
    shared_logits: ClassVar[bool] = False

    def __init__(self, config: AttentionConfig) -> None:
        super().__init__(config)
        self.synthesizer_hidden = config.synthesizer_hidden
        self.logit_heads = 1 if self.shared_logits else self.num_heads
        self.dense1 = nn.Linear(self.hidden_size, self.logit_heads * self.synthesizer_hidden)
        self.dense2_weight = nn.Parameter(torch.empty(self.logit_heads, self.synthesizer_hidden, self.max_len))
        self.dense2_bias = nn.Parameter(torch.empty(self.logit_heads, self.max_len))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """``W2``, ``b2`` as ``nn.Linear(N, L)`` would be initialised, per head."""
        linear_uniform_(self.dense2_weight, self.synthesizer_hidden)
        linear_uniform_(self.dense2_bias, self.synthesizer_hidden)

    def attention_logits(self, hidden_states: torch.Tensor) -> torch.Tensor:
        batch, frames, _ = hidden_states.shape
        hidden = torch.relu(self.dense1(hidden_states)).view(batch, frames, self.logit_heads, -1)  # [B, T, h, N]
        logits = torch.einsum("bthn,hnl->bhtl", hidden, self.dense2_weight[:, :, :frames])
        return logits + self.dense2_bias[None, :, None, :frames]  # [B, h or 1, T, T]


@ATTENTION.register("synthesizer_random", options=RandomSynthesizerOptions)
class RandomSynthesizerAttention(SynthesizerAttention):
    """Random synthesizer: input-independent logits ``attention_logits`` ``[h, L, L]`` (a buffer when
    frozen)."""

    def __init__(self, config: AttentionConfig) -> None:
        super().__init__(config)
        self.pattern_init = config.synthesizer_init
        logits = torch.empty(self.num_heads, self.max_len, self.max_len)
        if config.synthesizer_freeze:
            self.register_buffer("logits", logits)
        else:
            self.logits = nn.Parameter(logits)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Small random logits, or the paper's fixed patterns (``synthesizer_init="fixed_patterns"``)."""
        with torch.no_grad():
            if self.pattern_init == "fixed_patterns":
                self.logits.copy_(fixed_pattern_logits(self.num_heads, self.max_len))
            else:
                self.logits.normal_(0.0, RANDOM_STD)

    @property
    def frozen(self) -> bool:
        """True when the logits are a fixed buffer."""
        return not isinstance(self.logits, nn.Parameter)

    def attention_logits(self, hidden_states: torch.Tensor) -> torch.Tensor:
        frames = hidden_states.shape[1]
        return self.logits[None, :, :frames, :frames]  # [1, h, T, T], shared by the batch

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, init={self.pattern_init}, frozen={self.frozen}"
