"""``ldsa``: multi-head local dense synthesizer attention, eqs. (1)-(4) of the multi-head LDSA (Xu et al. 2021).

Per head ``i`` (``d_k = D / h``, context width ``c`` odd)::

    B^i   = softmax(ReLU(X W1^i) W2^i)                           W1^i: D x d_k,  W2^i: d_k x c     (1)
    V^i   = X W3^i                                               W3^i: D x d_k                     (2)
    Y^i_t = sum_{j=0}^{c-1} B^i_{t,j} V^i_{t + j - floor(c/2)}                                     (3)
    MH-LDSA(X) = Concat(Y^1, ..., Y^h) W_O                                                          (4)

``W1`` for all heads is one ``D x D`` linear map (``w1``), ``W2`` a ``[h, d_k, c]`` tensor (``w2``), ``W3``
the value projection (``v_proj``) and ``W_O`` the output projection (``out_proj``); with ``bias=True`` each
carries the affine bias the LDSA code's ``nn.Linear`` layers have (the equations omit them; ``bias=False``
gives them literally). Time and memory are ``O(T c)``: the weights are ``[B, T, h, c]`` and eq. (3) is
:func:`~.local_sum.local_weighted_sum`.

Masking (a deliberate deviation from the official LDSA code, which ignores its mask and lets the softmax give
weight to the zero padding at the sequence edges): the softmax of eq. (1) runs over the *valid* neighbours
only: those inside the sequence, on real (not padded) frames and in an allowed chunk. Padded frames thus
neither receive weight nor leak into real frames, and appending padding never changes a real frame's output.
At the edges the weights renormalise over the neighbours that exist instead of sending mass to zeros.

``hybrid=True``: LDSA followed by multi-head self-attention (``mhsa``) inside the same sub-layer,
``MHSA(MH-LDSA(X))``, the LDSA paper's best combination (local context first, then global).
"""

from __future__ import annotations

from typing import ClassVar

import torch
from torch import nn

from .base import EncoderAttention, StreamCache, linear_uniform_
from .config import AttentionConfig
from .local_sum import local_weighted_sum
from .masks import local_window_mask, masked_softmax
from .mhsa import MultiHeadSelfAttention
from .options.ldsa import LDSAOptions
from .registry import ATTENTION


@ATTENTION.register("ldsa", options=LDSAOptions)
class LocalDenseSynthesizerAttention(EncoderAttention):
    """Multi-head LDSA (optionally followed by MHSA).

    Args:
        config (`AttentionConfig`): ``hidden_size``, ``num_heads``, ``context_width`` (``c``), ``dropout``,
            ``bias``, ``hybrid``, chunk settings.
    """

    streams: ClassVar[bool] = True

    def __init__(self, config: AttentionConfig) -> None:
        super().__init__(config)
        self.context_width = config.context_width
        self.w1 = nn.Linear(self.hidden_size, self.hidden_size, bias=config.bias)
        self.w2 = nn.Parameter(torch.empty(self.num_heads, self.head_dim, self.context_width))
        self.w2_bias = nn.Parameter(torch.empty(self.num_heads, self.context_width)) if config.bias else None
        self.mhsa = MultiHeadSelfAttention(config) if config.hybrid else None
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """``w2`` (and its bias) as ``nn.Linear(d_k, c)`` would be initialised, per head."""
        linear_uniform_(self.w2, self.head_dim)
        if self.w2_bias is not None:
            linear_uniform_(self.w2_bias, self.head_dim)

    @torch.no_grad()
    def init_from_hf(self, hf_attention: nn.Module) -> list[str]:
        """Value and output projections; with ``hybrid`` also q/k/v/out into the MHSA stage (``mhsa.*``)."""
        copied = super().init_from_hf(hf_attention)
        if self.mhsa is not None:
            copied += [f"mhsa.{name}" for name in self.mhsa.init_from_hf(hf_attention)]
        return copied

    def local_logits(self, hidden_states: torch.Tensor) -> torch.Tensor:
        """Eq. (1) before the softmax: ``[B, T, D] -> [B, T, h, c]``."""
        batch, frames, _ = hidden_states.shape
        hidden = torch.relu(self.w1(hidden_states))  # [B, T, D] = the h heads' [B, T, d_k] side by side
        # all heads' W2^i at once as one block-diagonal [D, h c] matrix: a single matmul on the contiguous
        # hidden states (a per-head einsum would first copy them into a head-major layout)
        w2 = torch.block_diag(*self.w2)  # [h d_k, h c]
        bias = self.w2_bias.reshape(-1) if self.w2_bias is not None else None
        logits = nn.functional.linear(hidden, w2.t(), bias)  # [B, T, h c]
        return logits.view(batch, frames, self.num_heads, self.context_width)

    def local_weights(self, hidden_states: torch.Tensor, padding_mask: torch.Tensor | None) -> torch.Tensor:
        """Eq. (1) with the valid-neighbour softmax: ``[B, T, D] -> [B, T, h, c]``."""
        frames = hidden_states.shape[1]
        allowed = local_window_mask(
            padding_mask, frames, self.context_width, *self.chunking(), device=hidden_states.device
        )  # [B|1, T, c]
        return masked_softmax(self.local_logits(hidden_states), allowed[:, :, None, :])

    def forward(self, hidden_states: torch.Tensor, padding_mask: torch.Tensor | None = None) -> torch.Tensor:
        """``[B, T, D]``, ``[B, T]`` bool or None -> ``[B, T, D]``."""
        self.check_padding_mask(hidden_states, padding_mask)
        batch, frames, _ = hidden_states.shape
        weights = self.attention_dropout(self.local_weights(hidden_states, padding_mask))  # [B, T, h, c]
        values = self.value_proj(hidden_states).view(batch, frames, self.num_heads, self.head_dim)
        context = local_weighted_sum(weights, values).reshape(batch, frames, self.hidden_size)  # eq. (3), concat
        out = self.output_proj(context)  # eq. (4)
        if self.mhsa is not None:
            out = self.mhsa(out, padding_mask)
        return out

    def forward_chunk(
        self, chunk: torch.Tensor, cache: StreamCache | None = None
    ) -> tuple[torch.Tensor, StreamCache]:
        """Streaming: the ``C`` new frames ``[B, C, D]`` of one chunk (calls aligned on chunk boundaries) see their
        left neighbours in the cached values of the last ``floor(c/2)`` frames (where their chunk is allowed) and
        their right neighbours inside their own chunk, as :meth:`forward` under the chunk mask.

        Args:
            chunk: ``[B, C, D]``.
            cache: ``(values [B, M, h, d_k], *mhsa cache)`` from the previous call, or None at the start.

        Returns:
            ``([B, C, D], (values of the last floor(c/2) frames, *the hybrid MHSA's key / value cache))``.
        """
        chunk_size, num_left_chunks = self.stream_chunking(chunk.shape[1])
        batch, frames, _ = chunk.shape
        half = self.context_width // 2
        new_values = self.value_proj(chunk).view(batch, frames, self.num_heads, self.head_dim)
        past = cache[0] if cache is not None else new_values[:, :0]
        memory = past.shape[1]
        values = torch.cat([past, new_values], dim=1)  # [B, M + C, h, d_k]
        rows = torch.arange(frames, device=chunk.device)[:, None]
        neighbour = memory + rows + torch.arange(self.context_width, device=chunk.device)[None, :] - half  # [C, c]
        allowed = (neighbour >= 0) & (neighbour < memory + frames)
        if num_left_chunks >= 0:
            chunks_back = (memory - neighbour + chunk_size - 1).clamp(min=0) // chunk_size  # 0 inside the own chunk
            allowed &= chunks_back <= num_left_chunks
        weights = masked_softmax(self.local_logits(chunk), allowed[None, :, None, :])  # [B, C, h, c]
        weights = nn.functional.pad(weights, (0, 0, 0, 0, memory, 0))  # cached rows get no output
        context = local_weighted_sum(weights, values)[:, memory:].reshape(batch, frames, self.hidden_size)
        out = self.output_proj(context)
        kept = values[:, max(values.shape[1] - half, 0) :] if half else values[:, :0]
        if self.mhsa is None:
            return out, (kept,)
        out, mhsa_cache = self.mhsa.forward_chunk(out, cache[1:] if cache is not None else None)
        return out, (kept, *mhsa_cache)

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, context_width={self.context_width}, hybrid={self.mhsa is not None}"
