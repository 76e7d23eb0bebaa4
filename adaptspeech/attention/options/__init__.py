"""The options of the attention kinds that have settings of their own, one module per kind (family); each kind
registers its class with itself (``@ATTENTION.register("ldsa", options=LDSAOptions)``). Kinds without options
(``mhsa``, ``shared_qk``) register none."""

from .base import KindOptions
from .ldsa import LDSAOptions
from .lsh import LSHOptions, SignALSHOptions
from .rel_pos import RelPosOptions
from .sparse import FixedSparseOptions, SparseOptions
from .synthesizer import SYNTHESIZER_INITS, DenseSynthesizerOptions, RandomSynthesizerOptions, SynthesizerOptions

__all__ = [
    "SYNTHESIZER_INITS",
    "DenseSynthesizerOptions",
    "FixedSparseOptions",
    "KindOptions",
    "LDSAOptions",
    "LSHOptions",
    "RandomSynthesizerOptions",
    "RelPosOptions",
    "SignALSHOptions",
    "SparseOptions",
    "SynthesizerOptions",
]
