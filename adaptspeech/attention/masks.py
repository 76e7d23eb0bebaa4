"""Masks shared by every attention kind: key padding, chunk (streaming) masks, local windows, masked softmax,
rows with no allowed key.

Conventions: a *padding mask* is bool ``[B, T]`` with True on real frames (None = no padding); an *allowed*
mask is bool and broadcastable to the scores, True where a query may attend to a key.

Chunk masks follow WeNet's chunk attention: frames are grouped into chunks of ``chunk_size``; a query in
chunk ``q`` sees every key in chunks ``q - num_left_chunks .. q`` (all previous chunks when ``num_left_chunks
== -1``), so training with the mask equals decoding chunk by chunk with a cache of the previous chunks. Full
attention is the special case of one chunk as long as the sequence (``chunk_size == 0`` or ``>= T``).
"""

from __future__ import annotations

import torch

from ..shortcuts import known_true, maybe_true


def chunk_mask(
    num_frames: int, chunk_size: int, num_left_chunks: int = -1, device: torch.device | None = None
) -> torch.Tensor | None:
    """Bool ``[T, T]`` (query, key): True where the key's chunk is the query's or one of its allowed left
    chunks.

    Returns ``None`` for ``chunk_size <= 0`` (no chunks: full attention). One chunk at least as long as the
    sequence gives an all-True mask, i.e. full attention.
    """
    return chunk_mask_rows(0, num_frames, num_frames, chunk_size, num_left_chunks, device)


def chunk_mask_rows(
    start: int,
    stop: int,
    num_frames: int,
    chunk_size: int,
    num_left_chunks: int = -1,
    device: torch.device | None = None,
) -> torch.Tensor | None:
    """Rows ``start .. stop-1`` of :func:`chunk_mask`: bool ``[stop - start, T]``, built from the frame indices
    alone (``O((stop - start) T)`` memory, never the ``T x T`` mask); ``None`` for ``chunk_size <= 0``."""
    if chunk_size <= 0:
        return None
    query_chunk = torch.arange(start, stop, device=device) // chunk_size
    key_chunk = torch.arange(num_frames, device=device) // chunk_size
    diff = query_chunk[:, None] - key_chunk[None, :]  # query chunk - key chunk
    allowed = diff >= 0
    if num_left_chunks >= 0:
        allowed &= diff <= num_left_chunks
    return allowed


def attention_mask(
    padding_mask: torch.Tensor | None,
    num_frames: int,
    chunk_size: int = 0,
    num_left_chunks: int = -1,
    device: torch.device | None = None,
) -> torch.Tensor | None:
    """Combine key padding and chunk masks into bool ``[B or 1, 1, T, T]``; ``None`` when nothing is masked.

    Padding masks keys only (as transformers' bidirectional masks do): a padded query still attends to the
    real keys, so padded outputs are finite and real outputs never see padded frames. The mask is built on
    ``padding_mask``'s device, else on ``device`` (else the CPU).
    """
    device = padding_mask.device if padding_mask is not None else device
    return attention_mask_rows(
        key_padding_mask(padding_mask), 0, num_frames, num_frames, chunk_size, num_left_chunks, device
    )


def key_padding_mask(padding_mask: torch.Tensor | None) -> torch.Tensor | None:
    """``[B, T]`` padding mask (True = real frame) -> bool ``[B, 1, 1, T]`` key mask, or ``None`` when every frame
    is real (nothing to mask)."""
    if padding_mask is None or known_true(padding_mask.all()):
        return None
    return padding_mask[:, None, None, :].bool()


def attention_mask_rows(
    keys: torch.Tensor | None,
    start: int,
    stop: int,
    num_frames: int,
    chunk_size: int = 0,
    num_left_chunks: int = -1,
    device: torch.device | None = None,
) -> torch.Tensor | None:
    """Query rows ``start .. stop-1`` of :func:`attention_mask`: bool ``[B or 1, 1, stop - start, T]`` (or the key
    mask ``[B, 1, 1, T]`` itself when there are no chunks), ``None`` when nothing is masked.

    Args:
        keys: bool ``[B, 1, 1, T]`` from :func:`key_padding_mask`, or None.
        start, stop: the query rows (frame indices).
        num_frames: ``T``, the number of keys.
        chunk_size, num_left_chunks: the chunk mask's settings (see :func:`chunk_mask`).
        device: where to build the chunk rows (the key mask's device when it is given).

    The blockwise ``rel_pos`` path asks for one query block at a time, so no ``T x T`` mask ever exists (at
    ``T = 16000`` a bool ``T x T`` mask alone is 256 MB).
    """
    if keys is not None:
        device = keys.device
    # one chunk covering the sequence is full attention: skip building an all-True mask
    chunks = (
        chunk_mask_rows(start, stop, num_frames, chunk_size, num_left_chunks, device)
        if chunk_size < num_frames
        else None
    )
    if chunks is None:
        return keys
    chunks = chunks[None, None]  # [1, 1, C, T]
    return chunks if keys is None else chunks & keys


def local_window_mask(
    padding_mask: torch.Tensor | None,
    num_frames: int,
    context_width: int,
    chunk_size: int = 0,
    num_left_chunks: int = -1,
    device: torch.device | None = None,
) -> torch.Tensor:
    """Bool ``[B or 1, T, c]``: True where the ``j``-th neighbour ``t + j - floor(c/2)`` of frame ``t``
    exists, is a real frame and lies in an allowed chunk. Memory ``O(T c)``: the window is indexed, never a
    ``T x T`` matrix."""
    if padding_mask is not None:
        device = padding_mask.device
    half = context_width // 2
    frames = torch.arange(num_frames, device=device)
    neighbours = frames[:, None] + torch.arange(-half, half + 1, device=device)[None, :]  # [T, c]
    allowed = (neighbours >= 0) & (neighbours < num_frames)
    if chunk_size > 0:
        diff = frames[:, None] // chunk_size - neighbours.clamp(min=0) // chunk_size
        ok = diff >= 0
        if num_left_chunks >= 0:
            ok &= diff <= num_left_chunks
        allowed &= ok
    allowed = allowed[None]  # [1, T, c]
    if padding_mask is not None and not known_true(padding_mask.all()):
        padded = torch.nn.functional.pad(padding_mask.bool(), (half, half), value=False)  # [B, T + c - 1]
        real = padded.unfold(1, context_width, 1)  # [B, T, c]: real[b, t, j] = padding_mask[b, t + j - half]
        allowed = allowed & real
    return allowed


def masked_softmax(scores: torch.Tensor, allowed: torch.Tensor | None, dim: int = -1) -> torch.Tensor:
    """Softmax over ``dim`` restricted to ``allowed`` (broadcastable bool); rows with nothing allowed give
    zeros.

    Masked entries get exactly zero weight (their logits are the dtype's minimum, whose ``exp`` underflows to
    0), so a masked value never leaks, and no row is ever NaN.
    """
    if allowed is None:
        return torch.softmax(scores, dim=dim)
    scores = scores.masked_fill(~allowed, torch.finfo(scores.dtype).min)
    probs = torch.softmax(scores, dim=dim)
    empty = ~allowed.any(dim=dim, keepdim=True)
    if maybe_true(empty.any()):
        probs = probs.masked_fill(empty, 0.0)
    return probs


def row_has_key(allowed: torch.Tensor) -> torch.Tensor:
    """Bool ``[..., Q, 1]``: True where row ``q`` of ``allowed`` (bool ``[..., Q, K]``) allows some key.

    Computed as the ``uint8`` maximum over the keys: ``Tensor.any`` over the last axis of a bool tensor is about
    8x slower on CPU (0.45 ms against 0.06 ms for ``500 x 500``, torch 2.13, one thread).
    """
    if torch.compiler.is_exporting():  # ONNX has no bit cast of bool to uint8; the same truth values
        return allowed.any(dim=-1, keepdim=True)
    return allowed.view(torch.uint8).amax(dim=-1, keepdim=True).bool()


def fill_empty_rows(allowed: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Give every query row of ``allowed`` that allows no key its first key, so no attention kernel sees an
    empty row.

    On CPU, ``scaled_dot_product_attention`` returns zeros for such a row, but some CUDA backends (the
    memory-efficient kernel, the math path with ``-inf`` masks) return NaN, which reaches the gradients
    (``NaN * 0 = NaN``) even when the row's output is discarded. The caller zeroes the ``empty`` rows of the
    result (:meth:`~.base.EncoderAttention.filled_attention`), so outputs do not depend on the backend; rows with
    a key are unchanged.

    Args:
        allowed: bool ``[..., Q or 1, K]`` (True = may attend), e.g. ``[B or 1, 1, T, T]`` or the key mask
            ``[B, 1, 1, T]``.

    Returns:
        ``safe``, a new bool tensor of ``allowed``'s shape (empty rows get key 0), and ``empty``, bool
        ``[..., Q or 1, 1]`` (True on the rows that had no key).
    """
    empty = ~row_has_key(allowed)
    safe = allowed.clone()
    safe[..., :1] |= empty
    return safe, empty
