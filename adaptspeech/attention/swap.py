"""Layer surgery: put a registered attention kind into transformers' encoder layers.

``swap_encoder_attention(layers, attr_name, config)`` replaces ``getattr(layer, attr_name)`` (``"attention"``
in both wav2vec2 layer variants, ``"self_attn"`` in wav2vec2-conformer layers, hence also in any encoder built
from transformers' ``Wav2Vec2ConformerEncoder``) with an instance of the kind's *HF-call class*: a subclass of
the kind that accepts transformers' call (``hidden_states, attention_mask=...,
relative_position_embeddings=..., **kwargs``) and returns the ``(output, None)`` tuple the layer unpacks.
Being a subclass (not a wrapper), the new module's state-dict keys are the kind's own
(``self_attn.linear_q.weight``, ...), so a swapped model saves and loads with stable keys, and a ``rel_pos``
swap into a rel-pos wav2vec2-conformer keeps the checkpoint's keys exactly.

Mask conversion. transformers' encoders pass the output of ``masking_utils.create_bidirectional_mask``:
``None`` (no padding), a bool ``[B, 1, T, T]`` mask (``sdpa``; True = attend), a float additive ``[B, 1, T,
T]`` mask (``eager``; 0 = attend, the dtype's minimum = masked), or the 2D ``[B, T]`` mask itself (flash
attention). All are reduced to our bool ``[B, T]`` key padding mask (True = real frame); flex attention's
``BlockMask`` is refused with a clear message.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from ..stream_state import current_stream
from .base import EncoderAttention
from .config import AttentionConfig
from .registry import ATTENTION

_HF_CALL_CLASSES: dict[type[EncoderAttention], type[EncoderAttention]] = {}


def padding_mask_from_hf(attention_mask: Any, hidden_states: torch.Tensor) -> torch.Tensor | None:
    """transformers' encoder attention mask -> bool ``[B, T]`` (True = real frame) or None.

    A key counts as real when at least one query may attend to it (for bidirectional masks every row is the
    same).
    """
    if attention_mask is None:
        return None
    if not isinstance(attention_mask, torch.Tensor):
        raise TypeError(
            f"swapped attention cannot read a {type(attention_mask).__name__} attention mask; load the "
            "backbone "
            "with attn_implementation='sdpa' or 'eager' (flex attention's BlockMask is not supported)"
        )
    batch, frames = hidden_states.shape[:2]
    if attention_mask.dim() == 2:
        mask = attention_mask.bool()
    elif attention_mask.dim() == 4:
        if attention_mask.dtype == torch.bool:
            allowed = attention_mask
        else:
            allowed = attention_mask > torch.finfo(attention_mask.dtype).min / 2
        mask = allowed.any(dim=1).any(dim=1)  # over heads and queries -> [B, T]
    else:
        raise ValueError(
            f"attention_mask must be 2D [B, T] or 4D [B, 1, T, T], got shape {tuple(attention_mask.shape)}"
        )
    if mask.shape[0] == 1 and batch > 1:
        mask = mask.expand(batch, -1)  # a mask broadcast over the batch
    if tuple(mask.shape) != (batch, frames):
        raise ValueError(
            f"attention_mask of shape {tuple(attention_mask.shape)} does not match hidden states [B, T] = "
            f"{(batch, frames)}"
        )
    return mask


class HFCallMixin:
    """Gives an ``EncoderAttention`` transformers' attention call signature and return value."""

    def forward(  # type: ignore[override]
        self,
        hidden_states: torch.Tensor,
        attention_mask: Any = None,
        relative_position_embeddings: torch.Tensor | None = None,
        **kwargs: Any,
    ) -> tuple[torch.Tensor, None]:
        """``hidden_states [B, T, D]``, transformers' mask -> ``(output [B, T, D], None)``.

        ``relative_position_embeddings`` (given by rel-pos / rotary conformer encoders) are ignored:
        ``rel_pos`` computes the same sinusoids itself, the other kinds use no positions. Inside a stream
        (:mod:`adaptspeech.stream_state`) the call is the stream's next chunk (:meth:`forward_chunk`).
        """
        if kwargs.get("key_value_states") is not None:
            raise ValueError("swapped encoder attention is self-attention only (key_value_states is not supported)")
        stream = current_stream()
        if stream is not None:  # the next chunk of a stream: continue from this layer's cache
            output, cache = self.forward_chunk(hidden_states, stream.get(self))  # type: ignore[attr-defined]
            stream.put(self, cache)  # type: ignore[arg-type]
            return output, None
        padding_mask = padding_mask_from_hf(attention_mask, hidden_states)
        return super().forward(hidden_states, padding_mask), None  # type: ignore[misc]


def hf_call_class(cls: type[EncoderAttention]) -> type[EncoderAttention]:
    """The HF-call subclass of an attention kind (one per kind, cached and importable from this module)."""
    if cls not in _HF_CALL_CLASSES:
        name = f"HF{cls.__name__}"
        new_cls = type(name, (HFCallMixin, cls), {"__module__": __name__, "__qualname__": name})
        new_cls.__doc__ = f"{cls.__name__} with transformers' attention call signature (see ``HFCallMixin``)."
        globals()[name] = new_cls  # so pickle / copy find the class by its qualified name
        _HF_CALL_CLASSES[cls] = new_cls
    return _HF_CALL_CLASSES[cls]


def _infer_dropout(module: nn.Module) -> float:
    """The attention-weight dropout of a transformers attention module (a float ``dropout`` in wav2vec2's, an
    ``nn.Dropout`` in the conformer's, ``dropout`` in ours)."""
    dropout = getattr(module, "dropout", 0.0)
    if isinstance(dropout, nn.Dropout):
        return float(dropout.p)
    return float(dropout) if isinstance(dropout, (int, float)) else 0.0


def _infer_dims(module: nn.Module) -> tuple[int, int]:
    """``(hidden_size, num_heads)`` of a transformers attention module."""
    heads = getattr(module, "num_heads", None)
    hidden = getattr(module, "embed_dim", None) or getattr(module, "hidden_size", None)  # ours: re-swapping
    if hidden is None and heads is not None and hasattr(module, "head_size"):
        hidden = heads * module.head_size
    if hidden is None or heads is None:
        raise ValueError(
            f"cannot read hidden_size / num_heads from {type(module).__name__}; set attention.hidden_size "
            "and "
            "attention.num_heads"
        )
    return int(hidden), int(heads)


def swap_encoder_attention(encoder_layers: nn.ModuleList, attr_name: str, config: AttentionConfig) -> list[int]:
    """Replace the attention of the configured encoder layers by ``config.kind``.

    Args:
        encoder_layers: the encoder's layers (e.g. ``model.encoder.layers``).
        attr_name: the attribute of each layer holding its attention (``"attention"`` for wav2vec2,
            ``"self_attn"`` for wav2vec2-conformer).
        config: the attention settings; ``hidden_size`` / ``num_heads`` left at 0 and ``dropout`` left at None are
            read from the replaced module. With ``init_from_pretrained`` the new module starts from the old one's
            weights (:meth:`EncoderAttention.init_from_hf`); refused (ValueError) where the old one holds a learned
            relative-key distance embedding (w2v-BERT's ``relative_key`` attention), which no kind can take over.

    Returns:
        The swapped layer indices (empty for ``kind="default"``).
    """
    if config.is_default:
        return []
    if len(encoder_layers) == 0 or not all(hasattr(layer, attr_name) for layer in encoder_layers):
        kind = type(encoder_layers[0]).__name__ if len(encoder_layers) else "(no layers)"
        raise ValueError(
            f"encoder layers ({kind}) have no attribute {attr_name!r}; use 'attention' for wav2vec2 "
            "layers or "
            "'self_attn' for wav2vec2-conformer layers"
        )
    first = getattr(encoder_layers[0], attr_name)
    if config.init_from_pretrained and getattr(first, "distance_embedding", None) is not None:
        table = first.distance_embedding
        raise ValueError(
            f"attention.kind={config.kind!r} with init_from_pretrained: the replaced attention's learned relative-key "
            f"distance embedding ({attr_name}.distance_embedding, {table.num_embeddings} distances x "
            f"{table.embedding_dim}, w2v-BERT's) has no counterpart in any adaptspeech kind and would be dropped; "
            "set attention.init_from_pretrained: false to train the swapped layers from scratch"
        )
    hidden, heads = _infer_dims(first)
    config = config.for_model(hidden, heads, len(encoder_layers), dropout=_infer_dropout(first))
    indices = config.layer_indices(len(encoder_layers))
    cls = hf_call_class(ATTENTION.get(config.kind))
    for index in indices:
        layer = encoder_layers[index]
        old = getattr(layer, attr_name)
        new = cls(config)
        reference = next(old.parameters(), None)
        if reference is not None:
            new.to(device=reference.device, dtype=reference.dtype)
        if config.init_from_pretrained:
            new.init_from_hf(old)
        new.train(old.training)
        setattr(layer, attr_name, new)
    return indices
