"""Which chunk mask the encoder attention uses for the running call: the configured one, one chosen at decoding time,
or one drawn per batch by dynamic chunk training.

Dynamic chunk training (the U2 rule of Zhang et al. 2020, "Unified streaming and non-streaming two-pass end-to-end
model for speech recognition", as WeNet's ``add_optional_chunk_mask`` draws it): per batch of ``T`` encoder frames,
``n ~ U{1, .., T-1}``; ``n > T // 2`` (about half of the batches) trains with full context, otherwise with chunks of
``n mod max_chunk_size + 1`` frames (1 .. 25 by default: up to 1 s of 40 ms frames), and, with
``dynamic_left_chunks``, ``U{0, .., (T-1) // chunk - 1}`` left chunks (else all of them). One model then serves
full-context and streaming decoding, the chunk size chosen at decoding time (:func:`chunk_attention`).

The choice lives in a :class:`contextvars.ContextVar` (per call and per thread, never on a module), so every layer of
one forward sees the same chunks, and activation checkpointing, which recomputes a layer inside a copy of its
forward's context, recomputes it with the same chunks.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from contextvars import ContextVar
from typing import TYPE_CHECKING

import torch

from .registry import ATTENTION

if TYPE_CHECKING:
    from .config import AttentionConfig

#: ``(chunk_size, num_left_chunks)`` of the running call, or None (the attention config's own settings).
_CHUNKING: ContextVar[tuple[int, int] | None] = ContextVar("adaptspeech_chunking", default=None)


def streaming_kinds() -> list[str]:
    """The registered attention kinds that can be trained with dynamic chunks and decoded chunk by chunk with a
    cache (their class sets ``streams = True`` and implements ``forward_chunk``), sorted."""
    return sorted(name for name in ATTENTION.names() if getattr(ATTENTION.get(name), "streams", False))


def require_streaming_kind(kind: str, setting: str) -> None:
    """ValueError naming ``setting`` and the kinds that stream unless ``kind`` is one of them."""
    kinds = streaming_kinds()
    if kind not in kinds:
        raise ValueError(
            f"{setting} needs an attention kind that can stream, got attention.kind={kind!r}; kinds that can: "
            f"{', '.join(kinds)}"
        )


@contextlib.contextmanager
def chunk_attention(chunk_size: int, num_left_chunks: int = -1) -> Iterator[None]:
    """Every swapped attention inside the block uses chunks of ``chunk_size`` encoder frames and ``num_left_chunks``
    previous chunks (-1: all), whatever its config says; ``chunk_size = 0`` is full context.

    This is how the chunk size of a dynamic-chunk model is chosen at decoding time::

        with chunk_attention(16):  # 16 frames of 40 ms: 640 ms chunks
            logits = model(**inputs).logits
    """
    if chunk_size < 0 or num_left_chunks < -1:
        raise ValueError(
            f"chunk_attention: chunk_size must be >= 0 (0 = full context) and num_left_chunks >= -1, got "
            f"{chunk_size} and {num_left_chunks}"
        )
    token = _CHUNKING.set((int(chunk_size), int(num_left_chunks)))
    try:
        yield
    finally:
        _CHUNKING.reset(token)


def active_chunking(config: AttentionConfig) -> tuple[int, int]:
    """``(chunk_size, num_left_chunks)`` for an attention with ``config``: the running call's choice
    (:func:`chunk_attention`, dynamic chunk training) if any, else the config's ``chunk_size`` / ``num_left_chunks``."""
    chosen = _CHUNKING.get()
    return chosen if chosen is not None else (config.chunk_size, config.num_left_chunks)


def draw_dynamic_chunk(
    num_frames: int,
    max_chunk_size: int = 25,
    dynamic_left_chunks: bool = False,
    generator: torch.Generator | None = None,
) -> tuple[int, int]:
    """One draw of the U2 rule (see the module docstring) for a batch of ``num_frames`` encoder frames:
    ``(chunk_size, num_left_chunks)``, ``chunk_size = 0`` meaning full context.

    The same arithmetic as WeNet's ``add_optional_chunk_mask`` (``torch.randint(1, max_len)``, full context above
    ``max_len // 2``, else ``chunk % max_chunk_size + 1``), with the edge cases that would make ``torch.randint``
    fail (one frame, no room for a left chunk) answered with full context and zero left chunks."""
    if num_frames <= 1:
        return 0, -1
    drawn = int(torch.randint(1, num_frames, (1,), generator=generator))
    if drawn > num_frames // 2:
        return 0, -1
    chunk = drawn % max_chunk_size + 1
    left = -1
    if dynamic_left_chunks:
        max_left = (num_frames - 1) // chunk
        left = int(torch.randint(0, max_left, (1,), generator=generator)) if max_left > 0 else 0
    return chunk, left


@contextlib.contextmanager
def dynamic_chunk_training(config: AttentionConfig, num_frames: int, training: bool) -> Iterator[tuple[int, int]]:
    """Around one training forward of ``num_frames`` encoder frames: draws the batch's chunks when ``training`` and
    ``config.dynamic_chunks`` and no outer :func:`chunk_attention` has chosen them; yields the chunking in force.

    In evaluation a dynamic-chunk model decodes with full context unless a chunk size is chosen
    (:func:`chunk_attention`), as U2 does (``decoding_chunk_size < 0``)."""
    if not (training and getattr(config, "dynamic_chunks", False)) or _CHUNKING.get() is not None:
        yield active_chunking(config)
        return
    chosen = draw_dynamic_chunk(num_frames, config.max_chunk_size, config.dynamic_left_chunks)
    with chunk_attention(*chosen):
        yield chosen
