"""Options of ``rel_pos`` (Transformer-XL relative-position attention, :mod:`adaptspeech.attention.rel_pos`)."""

from __future__ import annotations

from dataclasses import dataclass

from ...settings import is_int
from .base import KindOptions, require_positive_int


@dataclass
class RelPosOptions(KindOptions):
    """Settings of ``rel_pos``.

    Args:
        max_relative_positions (`int`, defaults to 5000): length of the initially cached sinusoid table (as
            transformers' ``max_source_positions``); longer inputs extend it.
        memory_efficient (`bool`, *optional*): ``True`` always computes in query blocks (memory linear in ``T``: only
            ``query_block_size x T`` scores exist at a time, and backward recomputes them block by block), ``False``
            always forms the full ``T x T`` scores (faster for short inputs, memory quadratic in ``T``); ``None`` (the
            default) picks the blockwise path for inputs longer than ``memory_efficient_threshold`` frames. Outputs
            and gradients are the same either way (to float rounding).
        memory_efficient_threshold (`int`, defaults to 2048): with ``memory_efficient=None``, inputs of more frames
            than this use the blockwise path (0 = always).
        query_block_size (`int`, defaults to 256): queries per block ``B`` of the blockwise path; its transient memory
            is ``O(B T h)`` (a few ``[B, T]`` score matrices per head).
    """

    max_relative_positions: int = 5000
    memory_efficient: bool | None = None
    memory_efficient_threshold: int = 2048
    query_block_size: int = 256

    def __post_init__(self) -> None:
        require_positive_int("max_relative_positions", self.max_relative_positions)
        if self.memory_efficient is not None and not isinstance(self.memory_efficient, bool):
            raise ValueError(
                "attention.memory_efficient must be true (blockwise), false (full T x T scores) or null (blockwise "
                f"above attention.memory_efficient_threshold frames), got {self.memory_efficient!r}"
            )
        if not is_int(self.memory_efficient_threshold) or self.memory_efficient_threshold < 0:
            raise ValueError(
                "attention.memory_efficient_threshold must be an integer >= 0 (frames; longer inputs use the "
                f"blockwise path, 0 = always), got {self.memory_efficient_threshold!r}"
            )
        require_positive_int("query_block_size", self.query_block_size, " (queries per block, e.g. 256)")
