"""Swappable encoder attention: one file per kind, all registered in ``ATTENTION`` and built from
``AttentionConfig``.

Kinds: ``mhsa`` (SDPA), ``rel_pos`` (Transformer-XL relative positions with chunk masks), ``ldsa`` (multi-head
local dense synthesizer attention, optionally followed by MHSA), ``synthesizer_dense`` and
``synthesizer_random`` (optionally initialised with the fixed patterns of Wu et al. 2022); that paper's Table 1's other
algorithms: ``shared_qk`` (Baseline (Q)), ``sparse_strided`` / ``sparse_fixed`` (Sparse Transformer patterns),
``lsh_sign_alsh``, ``lsh_xbox``, ``lsh_xbox_qnf``, ``lsh_simple``, ``lsh_simple_alsh`` (LSH / ALSH) and
``synthesizer_dense_shared`` (SYN. (Dense); ``synthesizer_dense`` is SYN. (Dense+M)). Every kind shares
``forward(hidden_states [B, T, D], padding_mask [B, T] bool or None) -> [B, T, D]``;
:func:`swap_encoder_attention` puts one into transformers' wav2vec2 / wav2vec2-conformer encoder layers.
"""

from __future__ import annotations

from . import (  # noqa: F401  (importing registers the kinds)
    ldsa,
    lsh,
    mhsa,
    rel_pos,
    shared_qk,
    sparse,
    synthesizer,
    synthesizer_dense_shared,
)
from .base import EncoderAttention
from .config import AttentionConfig, settings_for_kind
from .ldsa import LocalDenseSynthesizerAttention
from .lsh import (
    LSHAttention,
    SignALSHAttention,
    SimpleALSHAttention,
    SimpleLSHAttention,
    XBOXAttention,
    XBOXQNFAttention,
)
from .mhsa import MultiHeadSelfAttention
from .options import SYNTHESIZER_INITS, KindOptions
from .registry import ATTENTION, DEFAULT_KIND
from .rel_pos import RelPositionSelfAttention
from .shared_qk import SharedQKAttention
from .sparse import FixedSparseAttention, SparseAttention, StridedSparseAttention
from .swap import hf_call_class, padding_mask_from_hf, swap_encoder_attention
from .synthesizer import DenseSynthesizerAttention, RandomSynthesizerAttention, SynthesizerAttention
from .synthesizer_dense_shared import SharedDenseSynthesizerAttention

__all__ = [
    "ATTENTION",
    "DEFAULT_KIND",
    "SYNTHESIZER_INITS",
    "AttentionConfig",
    "DenseSynthesizerAttention",
    "EncoderAttention",
    "FixedSparseAttention",
    "KindOptions",
    "LSHAttention",
    "LocalDenseSynthesizerAttention",
    "MultiHeadSelfAttention",
    "RandomSynthesizerAttention",
    "RelPositionSelfAttention",
    "SharedDenseSynthesizerAttention",
    "SharedQKAttention",
    "SignALSHAttention",
    "SimpleALSHAttention",
    "SimpleLSHAttention",
    "SparseAttention",
    "StridedSparseAttention",
    "SynthesizerAttention",
    "XBOXAttention",
    "XBOXQNFAttention",
    "hf_call_class",
    "padding_mask_from_hf",
    "settings_for_kind",
    "swap_encoder_attention",
]
