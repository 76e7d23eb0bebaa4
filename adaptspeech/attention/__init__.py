"""Swappable encoder attention: one file per kind, all registered in ``ATTENTION`` and built from
``AttentionConfig``.

Kinds: ``mhsa`` (SDPA), ``rel_pos`` (Transformer-XL relative positions with chunk masks), ``ldsa`` (multi-head
local dense synthesizer attention, optionally followed by MHSA), ``synthesizer_dense`` and
``synthesizer_random`` (optionally initialised with the seed's fixed patterns). Every kind shares
``forward(hidden_states [B, T, D], padding_mask [B, T] bool or None) -> [B, T, D]``;
:func:`swap_encoder_attention` puts one into transformers' wav2vec2 / wav2vec2-conformer encoder layers.
"""

from __future__ import annotations

from . import ldsa, mhsa, rel_pos, synthesizer  # noqa: F401  (importing registers the kinds)
from .base import EncoderAttention
from .config import SYNTHESIZER_INITS, AttentionConfig
from .ldsa import LocalDenseSynthesizerAttention
from .mhsa import MultiHeadSelfAttention
from .registry import ATTENTION, DEFAULT_KIND
from .rel_pos import RelPositionSelfAttention
from .swap import hf_call_class, padding_mask_from_hf, swap_encoder_attention
from .synthesizer import DenseSynthesizerAttention, RandomSynthesizerAttention, SynthesizerAttention

__all__ = [
    "ATTENTION",
    "DEFAULT_KIND",
    "SYNTHESIZER_INITS",
    "AttentionConfig",
    "DenseSynthesizerAttention",
    "EncoderAttention",
    "LocalDenseSynthesizerAttention",
    "MultiHeadSelfAttention",
    "RandomSynthesizerAttention",
    "RelPositionSelfAttention",
    "SynthesizerAttention",
    "hf_call_class",
    "padding_mask_from_hf",
    "swap_encoder_attention",
]
