"""Padded frames must not leak into real ones through a conformer layer's depthwise convolution.

transformers' ``Wav2Vec2ConformerConvolutionModule`` convolves along time over whatever the padded frames hold by
then (the feed-forward and attention outputs of padding, not zeros), so the last real frames of an utterance padded in
a batch get other values than the same utterance alone: a batch-dependent, silently wrong result (wenet and ESPnet
zero the padded frames before the convolution; ``masked_fill(~mask_pad, 0)`` in their ``ConvolutionModule``).

:func:`mask_convolution_padding` registers a forward pre-hook on every layer's ``conv_module`` that zeroes the frames
marked as padding by :func:`frame_padding` for the running call. The mask lives in a
:class:`contextvars.ContextVar` (per call and per thread, never on a module); activation checkpointing recomputes a
layer inside a copy of its forward's context (:func:`adaptspeech.adapters.routing.checkpoint_with_routing`), so the
recomputation masks the same frames. Outside :func:`frame_padding` the convolution runs as in transformers.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from contextvars import ContextVar
from typing import Any

import torch
from torch import nn

from ..shortcuts import known_true

_FRAME_MASK: ContextVar[torch.Tensor | None] = ContextVar("adaptspeech_frame_mask", default=None)
_HOOKED = "_adaptspeech_masks_padding"


@contextlib.contextmanager
def frame_padding(frame_mask: torch.Tensor | None) -> Iterator[None]:
    """Mark the encoder frames of this call: ``frame_mask`` [B, T] bool, True on real frames (None: no padding)."""
    token = _FRAME_MASK.set(frame_mask)
    try:
        yield
    finally:
        _FRAME_MASK.reset(token)


def _zero_padding(module: nn.Module, args: tuple[Any, ...]) -> tuple[Any, ...] | None:
    mask = _FRAME_MASK.get()
    if mask is None or not args:
        return None
    hidden = args[0]  # [B, T, D]
    if hidden.dim() != 3 or tuple(mask.shape) != tuple(hidden.shape[:2]):
        return None
    if known_true(mask.all()):  # a graph being exported masks always (x * 1 == x)
        return None
    return (hidden * mask.unsqueeze(-1).to(hidden.dtype), *args[1:])


def mask_convolution_padding(encoder_layers: nn.ModuleList) -> int:
    """Hook the ``conv_module`` of every conformer layer in ``encoder_layers`` (once); returns how many were hooked.
    Layers without a ``conv_module`` (wav2vec2's) are left alone."""
    count = 0
    for layer in encoder_layers:
        conv = getattr(layer, "conv_module", None)
        if conv is None or getattr(conv, _HOOKED, False):
            continue
        conv.register_forward_pre_hook(_zero_padding)
        setattr(conv, _HOOKED, True)
        count += 1
    return count
