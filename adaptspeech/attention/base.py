"""``EncoderAttention``: the shared parts of every attention kind and the one forward signature.

Every kind is built as ``Cls(config: AttentionConfig)`` and called as
``forward(hidden_states [B, T, D], padding_mask [B, T] bool (True = real frame) or None) -> [B, T, D]``.

Parameter names follow the transformers module whose checkpoints a kind can take over (``q_proj`` ...
``out_proj`` as in ``Wav2Vec2Attention``; ``linear_q`` ... ``linear_pos``, ``pos_bias_u/v`` as in
``Wav2Vec2ConformerSelfAttention``), so a swapped model's state dict has the same keys as the original
wherever the weights mean the same thing. :meth:`EncoderAttention.init_from_hf` copies by *role* (query, key,
value, output, position projection, position biases), whatever the source's naming.
"""

from __future__ import annotations

import math
from typing import ClassVar

import torch
from torch import nn
from torch.nn import functional as F

from .chunking import active_chunking
from .config import AttentionConfig
from .masks import attention_mask, fill_empty_rows

#: the streaming cache of one attention layer between chunks (each kind its own: keys / values, past frames).
StreamCache = tuple[torch.Tensor, ...]

#: attribute names that hold each role in transformers' attention modules (wav2vec2, wav2vec2-conformer).
HF_ROLE_NAMES: dict[str, tuple[str, ...]] = {
    "query": ("q_proj", "linear_q"),
    "key": ("k_proj", "linear_k"),
    "value": ("v_proj", "linear_v"),
    "output": ("out_proj", "linear_out"),
    "pos": ("linear_pos",),
    "pos_bias_u": ("pos_bias_u",),
    "pos_bias_v": ("pos_bias_v",),
}


class EncoderAttention(nn.Module):
    """Base class: value / output projections, head split / merge, masks, and weight copying from
    transformers.

    Subclasses set :attr:`roles` (role -> own attribute name; ``value`` and ``output`` are built here) and
    implement :meth:`forward`.

    Args:
        config (`AttentionConfig`): needs ``hidden_size`` and ``num_heads`` set.
    """

    #: role -> attribute name in this module; ``init_from_hf`` copies these roles.
    roles: ClassVar[dict[str, str]] = {"value": "v_proj", "output": "out_proj"}
    #: whether the kind can stream: dynamic chunk training and :meth:`forward_chunk` (decoding chunk by chunk with a
    #: cache equals :meth:`forward` under the chunk mask).
    streams: ClassVar[bool] = False

    def __init__(self, config: AttentionConfig) -> None:
        super().__init__()
        config.require_dims()
        self.config = config
        self.hidden_size = config.hidden_size
        self.num_heads = config.num_heads
        self.head_dim = config.head_dim
        self.dropout = float(config.dropout or 0.0)  # None (not filled in from a backbone): no dropout
        self.add_module(self.roles["value"], nn.Linear(self.hidden_size, self.hidden_size, bias=config.bias))
        self.add_module(self.roles["output"], nn.Linear(self.hidden_size, self.hidden_size, bias=config.bias))

    # --- shared parts ---------------------------------------------------------------------------------------
    @property
    def value_proj(self) -> nn.Linear:
        """``W_V``: ``[B, T, D] -> [B, T, D]``."""
        return getattr(self, self.roles["value"])

    @property
    def output_proj(self) -> nn.Linear:
        """``W_O``: ``[B, T, D] -> [B, T, D]``."""
        return getattr(self, self.roles["output"])

    def split_heads(self, x: torch.Tensor) -> torch.Tensor:
        """``[B, T, D] -> [B, h, T, d_k]``."""
        batch, frames, _ = x.shape
        return x.view(batch, frames, self.num_heads, self.head_dim).transpose(1, 2)

    def merge_heads(self, x: torch.Tensor) -> torch.Tensor:
        """``[B, h, T, d_k] -> [B, T, D]`` (heads concatenated)."""
        batch, _, frames, _ = x.shape
        return x.transpose(1, 2).reshape(batch, frames, self.hidden_size)

    def chunking(self) -> tuple[int, int]:
        """``(chunk_size, num_left_chunks)`` in force for this call: chosen at decoding time or drawn by dynamic chunk
        training (:mod:`.chunking`), else the config's."""
        return active_chunking(self.config)

    def attention_mask(self, padding_mask: torch.Tensor | None, num_frames: int) -> torch.Tensor | None:
        """Bool ``[B or 1, 1, T, T]`` (True = may attend): key padding and the chunk mask in force
        (:meth:`chunking`); ``None`` if nothing is masked. Built on the padding mask's device, else on this module's
        (a chunk mask without padding must not land on the CPU under a GPU model)."""
        device = padding_mask.device if padding_mask is not None else next(self.parameters()).device
        return attention_mask(padding_mask, num_frames, *self.chunking(), device)

    # --- streaming ------------------------------------------------------------------------------------------
    def stream_chunking(self, num_queries: int) -> tuple[int, int]:
        """The chunking of a streaming call with ``num_queries`` new frames: refused unless a chunk size is in
        force and the new frames fit in one chunk."""
        chunk_size, num_left_chunks = self.chunking()
        if chunk_size <= 0:
            raise ValueError(
                "forward_chunk needs a chunk size: attention.chunk_size > 0, or one chosen with chunk_attention(n)"
            )
        if num_queries > chunk_size:
            raise ValueError(
                f"chunk of {num_queries} frames is longer than attention.chunk_size={chunk_size} (the chunk size in "
                "force)"
            )
        return chunk_size, num_left_chunks

    @staticmethod
    def trim_cache(frames: torch.Tensor, chunk_size: int, num_left_chunks: int, dim: int = 2) -> torch.Tensor:
        """The last ``num_left_chunks * chunk_size`` frames of ``frames`` along ``dim`` (all of them when -1): what a
        later chunk may still see."""
        if num_left_chunks < 0:
            return frames
        keep = num_left_chunks * chunk_size
        return frames.narrow(dim, max(frames.shape[dim] - keep, 0), min(keep, frames.shape[dim]))

    def stream_keys_values(
        self, chunk: torch.Tensor, cache: StreamCache | None, query_proj: nn.Linear, key_proj: nn.Linear
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, StreamCache]:
        """The projections of a streaming chunk ``[B, C, D]`` and the keys / values it attends to.

        Returns:
            ``(query [B, h, C, d_k], key, value [B, h, M + C, d_k], new cache)``: the cached keys / values of the
            previous chunks (``cache``, None at the start) followed by the chunk's own; the new cache keeps the last
            ``num_left_chunks`` chunks of them (all when -1).
        """
        chunk_size, num_left_chunks = self.stream_chunking(chunk.shape[1])
        query = self.split_heads(query_proj(chunk))
        key = self.split_heads(key_proj(chunk))
        value = self.split_heads(self.value_proj(chunk))
        if cache is not None:
            key = torch.cat([cache[0], key], dim=2)
            value = torch.cat([cache[1], value], dim=2)
        kept = (self.trim_cache(key, chunk_size, num_left_chunks), self.trim_cache(value, chunk_size, num_left_chunks))
        return query, key, value, kept

    def forward_chunk(
        self, chunk: torch.Tensor, cache: StreamCache | None = None
    ) -> tuple[torch.Tensor, StreamCache]:
        """Streaming: the next ``C`` frames ``[B, C, D]`` (one chunk, or the end of one) and the cache of the previous
        call (None at the start) -> ``([B, C, D], new cache)``; equals :meth:`forward` on the whole sequence under the
        chunk mask (kinds with ``streams = True``)."""
        raise NotImplementedError(f"{type(self).__name__} cannot stream (streams = False)")

    def fused_attention(
        self, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, allowed: torch.Tensor | None
    ) -> torch.Tensor:
        """``softmax(Q K^T / sqrt(d)) V`` over the allowed keys through PyTorch's fused
        ``scaled_dot_product_attention`` (attention dropout in training).

        Args:
            query: ``[..., Q, d]``; key, value: ``[..., K, d]``.
            allowed: bool broadcastable to ``[..., Q, K]`` (True = may attend), or None (every key).

        Returns:
            ``[..., Q, d]``; a row with no allowed key is zero on every backend, never NaN
            (:func:`~.masks.fill_empty_rows`, :meth:`filled_attention`).
        """
        if allowed is None:
            return self.filled_attention(query, key, value, None, None)
        return self.filled_attention(query, key, value, *fill_empty_rows(allowed))

    def filled_attention(
        self,
        query: torch.Tensor,
        key: torch.Tensor,
        value: torch.Tensor,
        safe: torch.Tensor | None,
        empty: torch.Tensor | None,
    ) -> torch.Tensor:
        """:meth:`fused_attention` on a mask already passed through :func:`~.masks.fill_empty_rows` (a caller that
        reuses one mask fills it once).

        Args:
            query: ``[..., Q, d]``; key, value: ``[..., K, d]``.
            safe: bool broadcastable to ``[..., Q, K]`` with a key in every row, or None (every key).
            empty: bool ``[..., Q or 1, 1]``: the rows whose output is zeroed (they had no allowed key), or None
                (no such row).

        Returns:
            ``[..., Q, d]``.
        """
        dropout = self.dropout if self.training else 0.0
        context = F.scaled_dot_product_attention(query, key, value, attn_mask=safe, dropout_p=dropout)
        return context if empty is None else context.masked_fill(empty, 0.0)

    def attention_dropout(self, weights: torch.Tensor) -> torch.Tensor:
        """Dropout on attention weights (identity in eval mode or with ``dropout == 0``)."""
        return nn.functional.dropout(weights, p=self.dropout, training=self.training)

    @staticmethod
    def check_padding_mask(hidden_states: torch.Tensor, padding_mask: torch.Tensor | None) -> None:
        """Refuse a padding mask whose shape is not ``[B, T]`` of the hidden states."""
        if padding_mask is not None and tuple(padding_mask.shape) != tuple(hidden_states.shape[:2]):
            raise ValueError(
                f"padding_mask must be [B, T] = {tuple(hidden_states.shape[:2])} (True on real frames), "
                f"got {tuple(padding_mask.shape)}"
            )

    def forward(self, hidden_states: torch.Tensor, padding_mask: torch.Tensor | None = None) -> torch.Tensor:
        """``hidden_states [B, T, D]``, ``padding_mask [B, T]`` (True = real frame) or None -> ``[B, T,
        D]``."""
        raise NotImplementedError(f"{type(self).__name__} must implement forward")

    # --- initialisation -------------------------------------------------------------------------------------
    def reset_parameters(self) -> None:
        """Re-initialise the parameters that are not plain ``nn.Linear`` (subclasses with such parameters
        override).

        Model code calling transformers' ``_init_weights`` should call this for ``EncoderAttention`` modules.
        """

    @torch.no_grad()
    def init_from_hf(self, hf_attention: nn.Module) -> list[str]:
        """Copy the weights whose role and shape match from a transformers attention module.

        Args:
            hf_attention: ``Wav2Vec2Attention`` (``q_proj/k_proj/v_proj/out_proj``) or
                ``Wav2Vec2ConformerSelfAttention`` (``linear_q/k/v/out``, ``linear_pos``, ``pos_bias_u/v``),
                or any module using those names.

        Returns:
            The names (in this module) of the tensors copied, e.g. ``["v_proj.weight", "v_proj.bias", ...]``.
        """
        copied: list[str] = []
        for role, own_name in self.roles.items():
            source = find_role(hf_attention, role)
            if source is None:
                continue
            copied += copy_weights(getattr(self, own_name), source, own_name)
        return copied

    def extra_repr(self) -> str:
        return f"hidden_size={self.hidden_size}, num_heads={self.num_heads}, dropout={self.dropout}"


def find_role(module: nn.Module, role: str) -> nn.Module | nn.Parameter | None:
    """The sub-module or parameter of ``module`` that plays ``role`` in transformers' naming, or None."""
    for name in HF_ROLE_NAMES[role]:
        found = getattr(module, name, None)
        if found is not None:
            return found
    return None


def copy_weights(target: nn.Module | nn.Parameter, source: nn.Module | nn.Parameter, prefix: str) -> list[str]:
    """Copy ``source`` into ``target`` where shapes match; return the copied names (``prefix.weight`` ...).

    For two ``nn.Linear`` the weight is copied when shapes match; the bias is copied when both have one, and
    zeroed when only the target has one (so the copied map is the same function).
    """
    if isinstance(target, nn.Parameter) or isinstance(source, nn.Parameter):
        if isinstance(target, torch.Tensor) and isinstance(source, torch.Tensor) and target.shape == source.shape:
            target.copy_(source)
            return [prefix]
        return []
    weight, source_weight = getattr(target, "weight", None), getattr(source, "weight", None)
    if weight is None or source_weight is None or weight.shape != source_weight.shape:
        return []
    weight.copy_(source_weight)
    copied = [f"{prefix}.weight"]
    bias, source_bias = getattr(target, "bias", None), getattr(source, "bias", None)
    if bias is not None:
        if source_bias is not None and source_bias.shape == bias.shape:
            bias.copy_(source_bias)
            copied.append(f"{prefix}.bias")
        else:
            bias.zero_()
    return copied


def linear_uniform_(tensor: torch.Tensor, fan_in: int) -> None:
    """``nn.Linear``'s default initialisation (uniform in ``+-1/sqrt(fan_in)``) for a hand-made parameter."""
    bound = 1.0 / math.sqrt(fan_in) if fan_in > 0 else 0.0
    nn.init.uniform_(tensor, -bound, bound)
