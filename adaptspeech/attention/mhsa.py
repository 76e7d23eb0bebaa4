"""``mhsa``: standard multi-head scaled dot-product self-attention through PyTorch's fused SDPA kernel."""

from __future__ import annotations

from typing import ClassVar

import torch
from torch import nn

from .base import EncoderAttention, StreamCache
from .config import AttentionConfig
from .registry import ATTENTION


@ATTENTION.register("mhsa")
class MultiHeadSelfAttention(EncoderAttention):
    """``softmax(Q K^T / sqrt(d_k) + mask) V`` per head, heads concatenated, then ``W_O``.

    Computed by ``torch.nn.functional.scaled_dot_product_attention`` (flash / memory-efficient kernels where
    the device has them) through :meth:`~.base.EncoderAttention.fused_attention` (a row with no allowed key,
    e.g. a padded frame whose chunk has no real frame, gives zeros on every backend). Names match transformers'
    ``Wav2Vec2Attention`` (``q_proj``, ``k_proj``, ``v_proj``, ``out_proj``), so a wav2vec2 checkpoint's attention
    weights load unchanged; from a conformer layer the ``linear_q/k/v/out`` weights are copied by
    :meth:`init_from_hf`.

    Args:
        config (`AttentionConfig`): ``hidden_size``, ``num_heads``, ``dropout``, ``bias``, chunk settings.
    """

    roles: ClassVar[dict[str, str]] = {
        "query": "q_proj",
        "key": "k_proj",
        "value": "v_proj",
        "output": "out_proj",
    }
    streams: ClassVar[bool] = True

    def __init__(self, config: AttentionConfig) -> None:
        super().__init__(config)
        self.q_proj = nn.Linear(self.hidden_size, self.hidden_size, bias=config.bias)
        self.k_proj = nn.Linear(self.hidden_size, self.hidden_size, bias=config.bias)

    def forward(self, hidden_states: torch.Tensor, padding_mask: torch.Tensor | None = None) -> torch.Tensor:
        """``[B, T, D]``, ``[B, T]`` bool or None -> ``[B, T, D]``."""
        self.check_padding_mask(hidden_states, padding_mask)
        query = self.split_heads(self.q_proj(hidden_states))  # [B, h, T, d_k]
        key = self.split_heads(self.k_proj(hidden_states))
        value = self.split_heads(self.value_proj(hidden_states))
        mask = self.attention_mask(padding_mask, hidden_states.shape[1])  # [B|1, 1, T, T] bool or None
        context = self.fused_attention(query, key, value, mask)  # rows with no allowed key: zeros
        return self.output_proj(self.merge_heads(context))

    def forward_chunk(
        self, chunk: torch.Tensor, cache: StreamCache | None = None
    ) -> tuple[torch.Tensor, StreamCache]:
        """Streaming (WeNet's chunk attention): the ``C`` new frames ``[B, C, D]`` attend to the cached keys / values
        of the allowed previous chunks and to their own chunk.

        Args:
            chunk: ``[B, C, D]``, ``C`` at most the chunk size in force (only the last chunk may be shorter).
            cache: ``(key, value)``, each ``[B, h, M, d_k]``, from the previous call, or None at the start.

        Returns:
            ``([B, C, D], (key, value))``, the cache holding the last ``num_left_chunks`` chunks (all when -1).
        """
        query, key, value, new_cache = self.stream_keys_values(chunk, cache, self.q_proj, self.k_proj)
        context = self.fused_attention(query, key, value, None)
        return self.output_proj(self.merge_heads(context)), new_cache
