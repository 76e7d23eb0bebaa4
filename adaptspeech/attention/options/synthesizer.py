"""Options of the synthesizer kinds (:mod:`adaptspeech.attention.synthesizer`): ``synthesizer_dense``,
``synthesizer_dense_shared`` and ``synthesizer_random``."""

from __future__ import annotations

from dataclasses import dataclass

from .base import KindOptions, require_bool, require_positive_int

#: initialisations of the random synthesizer's attention logits.
SYNTHESIZER_INITS = ("random", "fixed_patterns")


@dataclass
class SynthesizerOptions(KindOptions):
    """Settings every synthesizer reads.

    Args:
        synthesizer_max_len (`int`, defaults to 1000): the longest sequence ``L`` (frames); the learned matrices are
            ``L`` wide and cropped to the input length. Longer inputs are refused.
    """

    synthesizer_max_len: int = 1000

    def __post_init__(self) -> None:
        require_positive_int("synthesizer_max_len", self.synthesizer_max_len)


@dataclass
class DenseSynthesizerOptions(SynthesizerOptions):
    """Settings of ``synthesizer_dense`` and ``synthesizer_dense_shared``.

    Args:
        synthesizer_hidden (`int`, defaults to 16): hidden size ``N`` of ``F`` (Wu et al. 2022 use 16).
    """

    synthesizer_hidden: int = 16

    def __post_init__(self) -> None:
        super().__post_init__()
        require_positive_int("synthesizer_hidden", self.synthesizer_hidden)


@dataclass
class RandomSynthesizerOptions(SynthesizerOptions):
    """Settings of ``synthesizer_random``.

    Args:
        synthesizer_init (`str`, defaults to ``"random"``): ``"random"`` (small random logits) or ``"fixed_patterns"``
            (the diagonal / shifted / increasing / decreasing / random heads of Fig. 2a of Wu et al. 2022,
            "Input-independent attention weights are expressive enough").
        synthesizer_freeze (`bool`, defaults to `False`): keep the attention logits fixed (stored as a buffer, so no
            optimizer can move them).
    """

    synthesizer_init: str = "random"
    synthesizer_freeze: bool = False

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.synthesizer_init not in SYNTHESIZER_INITS:
            raise ValueError(
                f"attention.synthesizer_init {self.synthesizer_init!r} unknown; allowed values: "
                f"{', '.join(SYNTHESIZER_INITS)}"
            )
        require_bool("synthesizer_freeze", self.synthesizer_freeze)
