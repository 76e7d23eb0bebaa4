"""Padded frames must not leak into real ones through a conformer layer's depthwise convolution.

transformers' ``Wav2Vec2ConformerConvolutionModule`` convolves along time over whatever the padded frames hold by
then (the feed-forward and attention outputs of padding, not zeros), so the last real frames of an utterance padded in
a batch get other values than the same utterance alone: a batch-dependent, silently wrong result (wenet and ESPnet
zero the padded frames before the convolution; ``masked_fill(~mask_pad, 0)`` in their ``ConvolutionModule``).

:func:`mask_convolution_padding` registers a forward hook on every layer's ``conv_module.glu`` (the depthwise
convolution's input, ``[B, D, T]``) that zeroes the frames marked as padding by :func:`frame_padding` for the running
call: the depthwise convolution then sees zeros past an utterance's end, as it pads an utterance alone. (Zeroing the
module's input instead, before its LayerNorm, is not enough: LayerNorm maps a zero frame to its bias, zero only at
initialisation, and the pointwise convolution and GLU carry that into the depthwise convolution.) The mask lives in a
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


def _zero_padding(module: nn.Module, args: tuple[Any, ...], output: torch.Tensor) -> torch.Tensor | None:
    """Forward hook of the GLU: its output ``[B, D, T]`` with the padded frames of the running call zeroed."""
    mask = _FRAME_MASK.get()
    if mask is None or output.dim() != 3 or tuple(mask.shape) != (output.shape[0], output.shape[2]):
        return None
    if known_true(mask.all()):  # a graph being exported masks always (x * 1 == x)
        return None
    return output * mask.unsqueeze(1).to(output.dtype)


def mask_convolution_padding(encoder_layers: nn.ModuleList) -> int:
    """Hook the GLU (the depthwise convolution's input) of every conformer layer's ``conv_module`` in
    ``encoder_layers`` (once); returns how many were hooked. Layers without a ``conv_module`` (wav2vec2's) are left
    alone."""
    count = 0
    for layer in encoder_layers:
        glu = getattr(getattr(layer, "conv_module", None), "glu", None)
        if glu is None or getattr(glu, _HOOKED, False):
            continue
        glu.register_forward_hook(_zero_padding)
        setattr(glu, _HOOKED, True)
        count += 1
    return count
