"""``synthesizer_dense_shared``: "SYN. (Dense)" of Wu et al. 2022, Table 1, the dense synthesizer with one ``F`` for
all heads.

Eq. (16) once: ``A = F(X) = W2(ReLU(W1 X + b1)) + b2`` with ``W1: D -> N``, ``W2: N -> L``; the ``[B, 1, T, T]``
weights (after the key mask and softmax) are applied to every head's values (Table 1: ``2LN + 2L^2``). The
per-head version (``synthesizer_dense``) is "SYN. (Dense+M)" (``2HLN + 2HL^2``).
"""

from __future__ import annotations

from typing import ClassVar

from .options.synthesizer import DenseSynthesizerOptions
from .registry import ATTENTION
from .synthesizer import DenseSynthesizerAttention


@ATTENTION.register("synthesizer_dense_shared", options=DenseSynthesizerOptions)
class SharedDenseSynthesizerAttention(DenseSynthesizerAttention):
    """Dense synthesizer with one set of logits shared by the heads: ``dense1`` ``D -> N``, ``dense2_weight``
    ``[1, N, L]``, ``dense2_bias`` ``[1, L]``; values and output projection as every synthesizer."""

    shared_logits: ClassVar[bool] = True
