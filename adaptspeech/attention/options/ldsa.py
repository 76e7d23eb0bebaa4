"""Options of ``ldsa`` (multi-head local dense synthesizer attention, :mod:`adaptspeech.attention.ldsa`)."""

from __future__ import annotations

from dataclasses import dataclass

from ...settings import is_int
from .base import KindOptions, require_bool


@dataclass
class LDSAOptions(KindOptions):
    """Settings of ``ldsa`` (Xu et al. 2021, "Transformer-based end-to-end speech recognition with local dense
    synthesizer attention").

    Args:
        context_width (`int`, defaults to 15): context width ``c`` (odd: the window is centred on the frame; the
            paper uses 15).
        hybrid (`bool`, defaults to `False`): LDSA followed by multi-head self-attention in the same sub-layer (the
            paper's best combination).
    """

    context_width: int = 15
    hybrid: bool = False

    def __post_init__(self) -> None:
        if not is_int(self.context_width) or self.context_width < 1 or self.context_width % 2 == 0:
            raise ValueError(
                "attention.context_width must be a positive odd integer (the window is centred on the frame: "
                f"1, 3, 5, ..., e.g. 15), got {self.context_width!r}"
            )
        require_bool("hybrid", self.hybrid)
