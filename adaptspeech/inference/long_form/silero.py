"""silero-vad (Silero Team 2024), the learned voice activity detector: its speech probability per 32 ms of audio.

The ``silero-vad`` wheel ships the model files (TorchScript and ONNX) and needs only torch; it is an optional extra
(``pip install 'adaptspeech[vad]'``), imported on first use, and its absence is one line
(:class:`MissingSileroError`). The TorchScript model reads windows of ``WINDOW_SAMPLES`` (512) samples at 16 kHz in
order, carrying its recurrent state (and the last 64 samples) from one window to the next, and gives the probability
that each window holds speech. :func:`speech_probabilities` runs it over a whole recording (the loop of silero's
``get_speech_timestamps``); :class:`StreamingSileroVAD` runs it over a stream, block by block, with the hysteresis of
silero's ``VADIterator`` (speech from a window at ``threshold`` or above, until one below ``threshold - 0.15``).
"""

from __future__ import annotations

import functools
import importlib.util
import warnings
from collections import deque
from typing import Any

import numpy as np

SAMPLING_RATE = 16000
"""The rate the finder reads (recordings are at 16 kHz here)."""
WINDOW_SAMPLES = 512
"""Samples per speech probability at 16 kHz (32 ms): what the model is trained on."""
DEFAULT_THRESHOLD = 0.5
"""silero-vad's default speech threshold (a window at or above it starts speech)."""
NEG_THRESHOLD_GAP = 0.15
"""Speech continues until a window falls below ``threshold - 0.15`` (silero-vad's ``neg_threshold``)."""
INSTALL_HINT = "pip install 'adaptspeech[vad]' (or pip install silero-vad)"


class MissingSileroError(ImportError):
    """The ``silero-vad`` package is not installed; its message is the one line to show."""


def silero_available() -> bool:
    """Whether the ``silero-vad`` package can be imported (without importing it)."""
    return importlib.util.find_spec("silero_vad") is not None


def check_silero() -> None:
    """Raise :class:`MissingSileroError` unless ``silero-vad`` is installed."""
    if not silero_available():
        raise MissingSileroError(f"speech finder 'silero' needs the silero-vad package, which is not installed: "
                                 f"{INSTALL_HINT}")


def check_threshold(threshold: float) -> None:
    """Refuse a speech threshold outside ``(0.15, 1)`` (``ValueError``): the end of speech is ``threshold - 0.15``."""
    if not NEG_THRESHOLD_GAP < threshold < 1:
        raise ValueError(f"vad_threshold {threshold:g}: a speech probability between {NEG_THRESHOLD_GAP:g} and 1 "
                         f"(exclusive; speech ends below threshold - {NEG_THRESHOLD_GAP:g}), "
                         f"e.g. {DEFAULT_THRESHOLD:g}")


def load_silero() -> Any:
    """A fresh TorchScript silero-vad model (its own recurrent state), in eval mode.

    Importing ``silero_vad`` sets torch's thread count to 1; the caller's setting is restored.

    Raises:
        MissingSileroError: ``silero-vad`` is not installed.
    """
    check_silero()
    import torch

    threads = torch.get_num_threads()
    try:
        from silero_vad import load_silero_vad
    finally:
        torch.set_num_threads(threads)
    with warnings.catch_warnings():  # torch.jit.load's and importlib.resources.path's deprecations: not the user's
        warnings.simplefilter("ignore", DeprecationWarning)
        return load_silero_vad(onnx=False)


@functools.lru_cache(maxsize=1)
def shared_silero() -> Any:
    """One model per process for whole recordings (:func:`speech_probabilities` resets its state before each)."""
    return load_silero()


def speech_probabilities(waveform: np.ndarray, model: Any | None = None) -> np.ndarray:
    """``[ceil(S / 512)]`` speech probability of each 512-sample window of a 16 kHz recording ``[S]`` (the last
    window zero-padded), the model's state carried across windows from a reset (``model``: the shared one by
    default)."""
    model = shared_silero() if model is None else model
    import torch

    audio = torch.as_tensor(np.asarray(waveform, dtype=np.float32))
    count = -(-len(audio) // WINDOW_SAMPLES)
    audio = torch.nn.functional.pad(audio, (0, count * WINDOW_SAMPLES - len(audio)))
    model.reset_states()
    with torch.no_grad():
        return np.array([model(window, SAMPLING_RATE).item() for window in audio.view(count, WINDOW_SAMPLES)],
                        dtype=np.float64)


class StreamingSileroVAD:
    """silero-vad over a stream: samples in blocks of any size, where speech last sounded.

    Args:
        threshold: speech starts at a window whose probability is at least this and continues until one falls below
            ``threshold - 0.15``.
    """

    def __init__(self, threshold: float = DEFAULT_THRESHOLD) -> None:
        check_threshold(threshold)
        self.threshold = threshold
        self.model = load_silero()
        self.reset()

    def reset(self) -> None:
        """Forget the stream."""
        self.model.reset_states()
        self.pending = np.zeros(0, dtype=np.float32)
        self.samples = 0  # samples read into whole windows
        self.speaking = False
        self.speech_ends: deque[int] = deque()  # end sample of each speech window not yet asked about
        self.last_speech_end: int | None = None  # the last speech window's end at or before the last question

    def accept(self, samples: np.ndarray) -> None:
        """More samples ``[n]`` at 16 kHz: every whole window is scored now."""
        import torch

        self.pending = np.concatenate([self.pending, np.asarray(samples, dtype=np.float32)])
        while len(self.pending) >= WINDOW_SAMPLES:
            window, self.pending = self.pending[:WINDOW_SAMPLES], self.pending[WINDOW_SAMPLES:]
            with torch.no_grad():
                probability = self.model(torch.from_numpy(window.copy()), SAMPLING_RATE).item()
            if probability >= self.threshold:
                self.speaking = True
            elif probability < self.threshold - NEG_THRESHOLD_GAP:
                self.speaking = False
            self.samples += WINDOW_SAMPLES
            if self.speaking:
                self.speech_ends.append(self.samples)

    def last_speech(self, sample: int) -> int | None:
        """The end sample of the last speech window that ends at or before ``sample`` (None: no speech yet). Asked with
        a growing ``sample``: memory stays bounded by the windows scored ahead of it."""
        while self.speech_ends and self.speech_ends[0] <= sample:
            self.last_speech_end = self.speech_ends.popleft()
        return self.last_speech_end
