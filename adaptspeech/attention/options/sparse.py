"""Options of the Sparse Transformer kinds (:mod:`adaptspeech.attention.sparse`): ``sparse_strided`` and
``sparse_fixed``."""

from __future__ import annotations

from dataclasses import dataclass

from .base import KindOptions, require_positive_int


@dataclass
class SparseOptions(KindOptions):
    """Settings of ``sparse_strided`` (and, with :class:`FixedSparseOptions`, ``sparse_fixed``).

    Args:
        sparse_block_size (`int`, defaults to 16): the Sparse Transformer's stride / block length ``l`` (about
            ``sqrt(T)`` of typical inputs gives ``T sqrt(T)`` time). A fixed setting, not derived from ``T``, so
            padding never changes the pattern.
    """

    sparse_block_size: int = 16

    def __post_init__(self) -> None:
        require_positive_int("sparse_block_size", self.sparse_block_size)


@dataclass
class FixedSparseOptions(SparseOptions):
    """Settings of ``sparse_fixed``.

    Args:
        sparse_summary (`int`, defaults to 1): summary positions ``c`` per block (the last ``c`` frames of each
            block); at most ``sparse_block_size``.
    """

    sparse_summary: int = 1

    def __post_init__(self) -> None:
        super().__post_init__()
        require_positive_int("sparse_summary", self.sparse_summary)
        if self.sparse_summary > self.sparse_block_size:
            raise ValueError(
                f"attention.sparse_summary ({self.sparse_summary}) must be at most attention.sparse_block_size "
                f"({self.sparse_block_size})"
            )
