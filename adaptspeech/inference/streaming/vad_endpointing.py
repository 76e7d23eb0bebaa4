"""Endpointing a stream on a voice activity detector instead of the best path's blanks.

The rule is :class:`~adaptspeech.decoding.ctc_streaming.Endpointer`'s (an utterance with text ends after
``silence_frames`` silent frames; before that, ``leading_frames`` of them are dropped), with the silence measured on the
audio: the detector (a streaming entry of :data:`~adaptspeech.inference.long_form.speech_finders.SPEECH_FINDERS`,
silero-vad) scores the samples as they arrive, and after each decoded chunk the trailing silence is the frames since the
end of the last speech window that lies within the decoded audio (encoder frame ``t`` reads samples
``[t s, (t + 1) s)``, ``s`` samples per frame), counted from the last event at the earliest. An utterance ends only when
the detector heard speech in it and the CTC search has text; text decoded where the detector heard none (noise) is
dropped with the leading silence.
"""

from __future__ import annotations

from typing import Protocol

import numpy as np
import torch

from ...decoding.ctc_streaming import Endpointer


class StreamVAD(Protocol):
    """A voice activity detector over a stream (:class:`~adaptspeech.inference.long_form.silero.StreamingSileroVAD`)."""

    def reset(self) -> None: ...

    def accept(self, samples: np.ndarray) -> None: ...

    def last_speech(self, sample: int) -> int | None: ...


class VADEndpointer(Endpointer):
    """The endpointing rule on a detector's silence.

    Args:
        vad: the stream's detector (reset here).
        samples_per_frame: input samples per encoder frame (``inputs_to_logits_ratio``, 640 for 40 ms frames).
        silence_frames: trailing silent frames that end an utterance with text.
        leading_frames: silent frames before any text after which the silence so far is dropped.
    """

    def __init__(self, vad: StreamVAD, samples_per_frame: int, silence_frames: int, leading_frames: int) -> None:
        super().__init__(-1, silence_frames, leading_frames)
        self.vad, self.samples_per_frame = vad, samples_per_frame
        vad.reset()
        self.frames = 0  # encoder frames decoded
        self.since = 0  # the frame of the last event: silence before it does not count

    def accept_waveform(self, samples: np.ndarray) -> None:
        """The stream's next samples ``[n]`` (16 kHz), as the recogniser accepts them."""
        self.vad.accept(samples)

    def update(self, log_probs: torch.Tensor, has_text: bool) -> str | None:
        """The next decoded frames ``[T, V]`` (only their number is read) -> ``"end"``, ``"silence"`` or None."""
        self.frames += int(log_probs.shape[-2])
        last = self.vad.last_speech(self.frames * self.samples_per_frame)
        spoken = 0 if last is None else -(-last // self.samples_per_frame)
        self.trailing = self.frames - max(spoken, self.since)
        return self.decide(has_text and spoken > self.since)

    def restart(self) -> None:
        super().restart()
        self.since = self.frames

