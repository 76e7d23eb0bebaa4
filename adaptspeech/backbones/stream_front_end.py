"""A convolutional front end run on a stream: each strided convolution stage keeps the input frames its next outputs
still need, so the frames it emits, chunk after chunk, are exactly those of the whole-sequence convolution.

A stage with kernel ``k``, stride ``s`` and zero padding ``p`` on each side emits output ``o`` from padded input frames
``o s .. o s + k - 1``: it pads ``p`` zero frames at the start of the stream, emits every output whose window is
complete, keeps the input from the next output's window on, and at the end of the stream pads ``p`` zero frames and
emits the rest. The frames before the right padding are a stage's look-ahead: the fbank Conformer's two stride-2
convolutions of kernel 3 emit encoder frame ``u`` once filterbank frame ``4u + 3`` has arrived (30 ms after the frame's
own 40 ms), the wav2vec2 feature encoder once its receptive field (400 samples, 25 ms) is complete.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch


class ConvStage:
    """One strided stage ``fn`` (``[B, C, T] -> [B, C', (T - k) // s + 1]``, no padding of its own) on a stream.

    Args:
        fn: the stage on an unpadded window (convolution and whatever per-frame layers follow it).
        kernel_size, stride: the convolution's.
        padding: zero frames the whole-sequence convolution pads on each side.
    """

    def __init__(self, fn: Callable[[torch.Tensor], torch.Tensor], kernel_size: int, stride: int, padding: int = 0):
        self.fn, self.kernel_size, self.stride, self.padding = fn, kernel_size, stride, padding
        self.buffer: torch.Tensor | None = None

    def push(self, frames: torch.Tensor) -> torch.Tensor | None:
        """New input ``[B, C, n]`` -> the outputs now complete ``[B, C', m]`` (None when there are none)."""
        if self.buffer is None:
            self.buffer = frames.new_zeros(*frames.shape[:2], self.padding)
        self.buffer = torch.cat([self.buffer, frames], dim=-1)
        length = self.buffer.shape[-1]
        if length < self.kernel_size:
            return None
        count = (length - self.kernel_size) // self.stride + 1
        out = self.fn(self.buffer[..., : (count - 1) * self.stride + self.kernel_size])
        self.buffer = self.buffer[..., count * self.stride :]
        return out

    def flush(self) -> torch.Tensor | None:
        """The end of the stream: the right padding and the outputs it completes."""
        if self.buffer is None or not self.padding:
            return None
        return self.push(self.buffer.new_zeros(*self.buffer.shape[:2], self.padding))


class StreamFrontEnd:
    """A stack of :class:`ConvStage` (time last, ``[B, C, T]``) followed by a per-frame ``projection`` (``[B, T, C] ->
    [B, T, D]``): :meth:`push` input frames, :meth:`flush` at the end; each returns the new encoder-input frames
    ``[B, m, D]`` (``m`` may be 0)."""

    def __init__(self, stages: Sequence[ConvStage], projection: Callable[[torch.Tensor], torch.Tensor]) -> None:
        self.stages = list(stages)
        self.projection = projection

    def _run(self, frames: torch.Tensor | None, flush: bool) -> torch.Tensor | None:
        """Pass ``frames`` (or nothing) through every stage, flushing each after its input when ``flush``."""
        for stage in self.stages:
            parts = []
            if frames is not None:
                parts.append(stage.push(frames))
            if flush:
                parts.append(stage.flush())
            parts = [part for part in parts if part is not None]
            frames = torch.cat(parts, dim=-1) if parts else None
        return frames

    def push(self, inputs: torch.Tensor) -> torch.Tensor | None:
        """``[B, C, n]`` input -> new frames ``[B, m, D]`` or None."""
        return self._project(self._run(inputs, flush=False))

    def flush(self) -> torch.Tensor | None:
        """End of the stream -> the last frames ``[B, m, D]`` or None."""
        return self._project(self._run(None, flush=True))

    def _project(self, frames: torch.Tensor | None) -> torch.Tensor | None:
        return None if frames is None else self.projection(frames.transpose(1, 2))
