"""The numeric front end without torch: framing, the mel filterbank's weights, log-mel energies in numpy, and the
per-utterance normalisation every feature type applies, and the global normalisation with a training set's statistics
(:class:`GlobalCmvn`, WeNet's global CMVN).

:func:`frame_params`, :func:`num_frames`, :func:`mel_weights` and :func:`normalize_utterance` are the very functions the
torch path uses (:mod:`adaptspeech.data.audio` and :mod:`adaptspeech.data.feature_types` re-export them).
:func:`log_mel_numpy` is the numpy twin of the torch :func:`adaptspeech.data.audio.log_mel` the training features come
from: the same frames, window, filterbank and floor, computed with numpy's FFT in float64 instead of torch's in
float32, so the two agree to float32 rounding (tested), not bit for bit. The torch-free ONNX runtime
(:class:`~adaptspeech.runtime.OnnxRecognizer`) computes the fbank models' input with it.

:func:`stacked_fbank_numpy` is w2v-BERT 2.0's input (transformers' ``SeamlessM4TFeatureExtractor``: Kaldi log-mel
bins normalised over the utterance and stacked by 2), the one implementation the torch path
(:class:`adaptspeech.data.feature_types.StackedFbankFeatures`) and the runtime share: bit-identical to transformers'
extractor (tested). :data:`FRONT_ENDS` says which of these computes each feature type's graph input.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import numpy as np

NORMALIZATIONS = ("utterance", "global")
"""The feature extractor's ``normalization`` values: over each utterance itself (what every model trained before this
setting existed reads), or with a training set's statistics (:class:`GlobalCmvn`)."""


def frame_params(sr: int = 16000, win_ms: float = 25.0, hop_ms: float = 10.0) -> tuple[int, int, int]:
    """Window length, hop and FFT size in samples for :func:`log_mel`: ``(400, 160, 512)`` at 16 kHz."""
    win = round(sr * win_ms / 1000)
    hop = round(sr * hop_ms / 1000)
    n_fft = 1 << (win - 1).bit_length()
    return win, hop, n_fft


def num_frames(num_samples: int, sr: int = 16000, win_ms: float = 25.0, hop_ms: float = 10.0) -> int:
    """Number of :func:`log_mel` frames for a waveform of ``num_samples``: ``1 + (S - win) // hop``, at least 1."""
    win, hop, _ = frame_params(sr, win_ms, hop_ms)
    return 1 + max(num_samples - win, 0) // hop



@lru_cache(maxsize=16)
def mel_weights(
    n_mels: int = 80, sr: int = 16000, n_fft: int = 512, f_min: float = 20.0, f_max: float | None = None
) -> np.ndarray:
    """Triangular filters on the HTK mel scale, ``mel(f) = 2595 log10(1 + f / 700)``, without area norm.

    ``n_mels + 2`` points equally spaced in mel between ``f_min`` and ``f_max`` (default ``sr / 2``) give
    the feet and peaks of the triangles; each FFT bin ``k`` (frequency ``k sr / n_fft``) gets the weight of
    its position on each triangle.

    Returns:
        float32 ``[n_fft // 2 + 1, n_mels]`` (read-only: cached).
    """
    f_max = sr / 2 if f_max is None else f_max
    if not 0 <= f_min < f_max <= sr / 2:
        raise ValueError(f"mel filterbank needs 0 <= f_min < f_max <= sr/2, got f_min={f_min}, f_max={f_max}")
    to_mel = lambda f: 2595.0 * np.log10(1.0 + f / 700.0)  # noqa: E731
    mel_points = np.linspace(to_mel(f_min), to_mel(f_max), n_mels + 2)
    hz_points = 700.0 * (10.0 ** (mel_points / 2595.0) - 1.0)
    bins = np.arange(n_fft // 2 + 1) * sr / n_fft
    lower, centre, upper = hz_points[:-2], hz_points[1:-1], hz_points[2:]
    rising = (bins[:, None] - lower) / (centre - lower)
    falling = (upper - bins[:, None]) / (upper - centre)
    weights = np.clip(np.minimum(rising, falling), 0.0, None).astype(np.float32)
    weights.flags.writeable = False
    return weights


def log_mel_numpy(
    waveform: np.ndarray,
    sr: int = 16000,
    n_mels: int = 80,
    *,
    win_ms: float = 25.0,
    hop_ms: float = 10.0,
    f_min: float = 20.0,
    eps: float = 1e-10,
) -> np.ndarray:
    """Log mel filterbank energies of ``waveform`` ``[S]``: ``[T, n_mels]`` float32, as
    :func:`adaptspeech.data.audio.log_mel` computes them (frames of ``win_ms`` every ``hop_ms`` without centre
    padding, ``T = 1 + (S - win) // hop``, a clip shorter than one window zero-padded to one frame; a periodic Hann
    window; the power spectrum of an ``n_fft``-point real FFT; :func:`mel_weights`; ``log(max(energy, eps))``), in
    numpy (float64 FFT, the product with the filterbank in float32 as torch does it)."""
    x = np.asarray(waveform, dtype=np.float32)
    if x.ndim != 1:
        raise ValueError(f"log_mel_numpy expects a waveform of shape [S], got {x.shape}")
    win, hop, n_fft = frame_params(sr, win_ms, hop_ms)
    if x.shape[0] < win:
        x = np.pad(x, (0, win - x.shape[0]))
    frames = np.lib.stride_tricks.sliding_window_view(x, win)[::hop]  # [T, win]
    window = (0.5 - 0.5 * np.cos(2.0 * np.pi * np.arange(win) / win)).astype(np.float32)  # periodic Hann
    spectrum = np.fft.rfft(frames * window, n=n_fft)  # [T, n_fft // 2 + 1]
    power = (spectrum.real**2 + spectrum.imag**2).astype(np.float32)
    return np.log(np.maximum(power @ mel_weights(n_mels, sr, n_fft, f_min), eps)).astype(np.float32)


# --- SeamlessM4T's Kaldi filterbank, stacked by 2 (w2v-BERT 2.0's ``stacked_fbank``) ---------------------------------
KALDI_WINDOW, KALDI_HOP, KALDI_FFT = 400, 160, 512
"""``SeamlessM4TFeatureExtractor``'s frame length, hop and FFT size in samples (25 ms / 10 ms at 16 kHz; fixed in
transformers' code)."""
KALDI_MEL_FLOOR = 1.192092955078125e-07
"""Its ``mel_floor``: the log-mel value of digital silence is ``log(KALDI_MEL_FLOOR)``."""
KALDI_PREEMPHASIS = 0.97
STACK = 2
"""Filterbank frames per stacked unit (the extractor's ``stride``)."""


@lru_cache(maxsize=8)
def kaldi_mel_weights(n_mels: int = 80, sr: int = 16000, n_fft: int = KALDI_FFT, f_min: float = 20.0) -> np.ndarray:
    """Kaldi's mel filterbank as transformers' ``mel_filter_bank(..., mel_scale="kaldi",
    triangularize_in_mel_space=True, norm=None)`` builds it: ``mel(f) = 1127 ln(1 + f / 700)``, ``n_mels + 2`` points
    equally spaced in mel between ``f_min`` and ``sr / 2``, each FFT bin weighted by its *mel* position on each
    triangle.

    Returns:
        float64 ``[n_fft // 2 + 1, n_mels]`` (read-only: cached).
    """
    to_mel = lambda f: 1127.0 * np.log(1.0 + f / 700.0)  # noqa: E731
    points = np.linspace(to_mel(f_min), to_mel(sr // 2), n_mels + 2)
    bins = to_mel(sr / n_fft * np.arange(n_fft // 2 + 1))
    slopes = points[None, :] - bins[:, None]
    widths = np.diff(points)
    weights = np.maximum(np.zeros(1), np.minimum(-slopes[:, :-2] / widths[:-1], slopes[:, 2:] / widths[1:]))
    weights.flags.writeable = False
    return weights


@lru_cache(maxsize=4)
def povey_window(length: int = KALDI_WINDOW) -> np.ndarray:
    """Kaldi's Povey window: a symmetric Hann window to the power 0.85, float64 ``[length]`` (read-only)."""
    window = np.power(np.hanning(length), 0.85)
    window.flags.writeable = False
    return window


def kaldi_log_mel_numpy(waveform: np.ndarray, sr: int = 16000, n_mels: int = 80) -> np.ndarray:
    """``SeamlessM4TFeatureExtractor._extract_fbank_features`` in vectorised numpy: ``[S]`` -> ``[N, n_mels]``
    float32 log-mel frames, ``N = 1 + (S - 400) // 160`` (none for a clip shorter than one window).

    The samples scaled to 16-bit integers; frames of 400 samples every 160 without centre padding; each frame's
    mean removed, pre-emphasis 0.97 (the first sample scaled by 0.03), the Povey window; the power spectrum of a
    512-point real FFT (float64, its complex values rounded to complex64 as transformers stores them); Kaldi's mel
    filters (:func:`kaldi_mel_weights`); ``log(max(energy, KALDI_MEL_FLOOR))``. Agrees with transformers to float32
    rounding (tested).

    Raises:
        ValueError: not a ``[S]`` waveform, or a rate other than 16 kHz (the frame sizes are fixed in samples).
    """
    x = np.asarray(waveform, dtype=np.float32)
    if x.ndim != 1:
        raise ValueError(f"kaldi_log_mel_numpy expects a waveform of shape [S], got {x.shape}")
    if sr != 16000:
        raise ValueError(f"the stacked_fbank front end frames 400 / 160 samples: it needs 16 kHz audio, got {sr}")
    if x.shape[0] < KALDI_WINDOW:
        return np.zeros((0, n_mels), np.float32)
    scaled = (x * 2**15).astype(np.float64)
    frames = np.lib.stride_tricks.sliding_window_view(scaled, KALDI_WINDOW)[::KALDI_HOP]  # [N, 400]
    frames = frames - frames.mean(axis=1, keepdims=True)
    emphasised = np.concatenate([frames[:, :1] * (1 - KALDI_PREEMPHASIS),
                                 frames[:, 1:] - KALDI_PREEMPHASIS * frames[:, :-1]], axis=1)
    spectrum = np.fft.rfft(emphasised * povey_window(), n=KALDI_FFT).astype(np.complex64)  # [N, 257]
    power = np.abs(spectrum, dtype=np.float64) ** 2
    energies = np.maximum(KALDI_MEL_FLOOR, np.dot(kaldi_mel_weights(n_mels, sr).T, power.T))  # [n_mels, N]
    return np.asarray(np.log(energies).T, dtype=np.float32)


def stack_frames(frames: np.ndarray, stack: int = STACK) -> np.ndarray:
    """``[N, F]`` -> ``[N // stack, stack F]``: frames ``stack u .. stack u + stack - 1`` concatenated into unit ``u``
    (a last incomplete group dropped)."""
    usable = frames.shape[0] - frames.shape[0] % stack
    return np.ascontiguousarray(frames[:usable].reshape(usable // stack, stack * frames.shape[1]))


def normalize_mel_bins(frames: np.ndarray, eps: float = 1e-7) -> np.ndarray:
    """Each bin of ``[N, F]`` frames to zero mean and unit *sample* variance (``ddof=1``) over the frames, in float32
    as ``SeamlessM4TFeatureExtractor`` computes it (``N < 2``: the frames unchanged)."""
    if frames.shape[0] < 2:
        return frames
    mean = np.expand_dims(frames.mean(0), 0)
    return ((frames - mean) / np.sqrt(np.expand_dims(frames.var(0, ddof=1), 0) + eps)).astype(np.float32)


def stacked_fbank_numpy(waveform: np.ndarray, sr: int = 16000, n_mels: int = 80, normalize: bool = True) -> np.ndarray:
    """w2v-BERT 2.0's input of one utterance ``[S]``: :func:`kaldi_log_mel_numpy` frames, each bin normalised over
    all ``N`` frames (:func:`normalize_mel_bins`, with ``normalize``), stacked by 2 (:func:`stack_frames`):
    ``[N // 2, 2 n_mels]`` float32, transformers' ``SeamlessM4TFeatureExtractor`` output for the utterance's real
    units (it pads an odd ``N`` to a half-filled unit that its attention mask hides)."""
    frames = kaldi_log_mel_numpy(waveform, sr, n_mels)
    return stack_frames(normalize_mel_bins(frames) if normalize else frames)


def normalize_utterance(x: np.ndarray, axis: int = 0, eps: float = 1e-7) -> np.ndarray:
    """``(x - mean) / sqrt(var + eps)`` along ``axis``, as ``Wav2Vec2FeatureExtractor.do_normalize`` does.

    Args:
        x: ``[S]`` samples or ``[T, D]`` features (statistics per column along ``axis=0``).

    Returns:
        float32, the shape of ``x``.
    """
    mean = x.mean(axis=axis, keepdims=True)
    var = x.var(axis=axis, keepdims=True)
    return ((x - mean) / np.sqrt(var + eps)).astype(np.float32)


@dataclass(frozen=True, eq=False)
class GlobalCmvn:
    """Mean and variance of each feature bin over a training set (WeNet's global CMVN), and their use.

    Attributes:
        mean: ``[F]`` float64 per-bin mean over every unit (frame) of the set.
        var: ``[F]`` float64 per-bin variance (population, ``ddof=0``, as :func:`normalize_utterance` computes it).
        units: the units (frames) they were computed over.
    """

    mean: np.ndarray
    var: np.ndarray
    units: int

    KEYS = ("mean", "var", "units")

    def apply(self, x: np.ndarray, eps: float = 1e-7) -> np.ndarray:
        """``(x - mean) / sqrt(var + eps)`` per bin: ``[N, F]`` -> ``[N, F]`` float32 (eps as
        :func:`normalize_utterance`'s)."""
        values = np.asarray(x, dtype=np.float64)
        return ((values - self.mean) / np.sqrt(self.var + eps)).astype(np.float32)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: ``{"mean": [F floats], "var": [F floats], "units": N}``."""
        return {"mean": [float(v) for v in self.mean], "var": [float(v) for v in self.var], "units": int(self.units)}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], where: str = "global_cmvn") -> GlobalCmvn:
        """The statistics of :meth:`to_dict`.

        Raises:
            ValueError: a missing key, lengths that differ, a negative or non-finite value (one line naming ``where``).
        """
        missing = [key for key in cls.KEYS if key not in data]
        if missing:
            raise ValueError(f"{where}: the statistics lack {', '.join(missing)} (they hold {', '.join(data)})")
        mean, var = np.asarray(data["mean"], np.float64), np.asarray(data["var"], np.float64)
        if mean.ndim != 1 or mean.shape != var.shape or not mean.size:
            raise ValueError(f"{where}: mean and var must be lists of one length, got {mean.shape} and {var.shape}")
        if not (np.isfinite(mean).all() and np.isfinite(var).all() and (var >= 0).all()):
            raise ValueError(f"{where}: mean and var must be finite and var >= 0")
        return cls(mean, var, int(data["units"]))


class CmvnAccumulator:
    """Sums of units and of their squares per bin in float64, added to a batch of rows at a time (bounded memory)."""

    def __init__(self) -> None:
        self.total: np.ndarray | None = None
        self.squares: np.ndarray | None = None
        self.units = 0

    def add(self, x: np.ndarray) -> None:
        """One row's units ``[N, F]`` (``[N]``: one bin)."""
        values = np.asarray(x, dtype=np.float64).reshape(len(x), -1)
        if self.total is None:
            self.total, self.squares = np.zeros(values.shape[1]), np.zeros(values.shape[1])
        if values.shape[1] != self.total.shape[0]:
            raise ValueError(f"rows of {self.total.shape[0]} and {values.shape[1]} feature bins in one set")
        self.total += values.sum(axis=0)
        self.squares += (values * values).sum(axis=0)
        self.units += len(values)

    def result(self) -> GlobalCmvn:
        """The statistics of every unit added.

        Raises:
            ValueError: no unit was added.
        """
        if self.total is None or self.units == 0:
            raise ValueError("global CMVN statistics over no frame: the training split has no kept row")
        mean = self.total / self.units
        return GlobalCmvn(mean, np.maximum(self.squares / self.units - mean * mean, 0.0), self.units)


@dataclass(frozen=True)
class FrontEnd:
    """How the runtime computes one feature type's model input from a ``[S]`` waveform, in numpy.

    Attributes:
        raw: ``(waveform, sampling_rate, n_mels)`` -> the unnormalised units ``[N]`` or ``[N, F]`` float32.
        utterance: the same -> one utterance's units normalised as ``prepare`` normalises them (None:
            :func:`normalize_utterance` of :attr:`raw`).
    """

    raw: Callable[[np.ndarray, int, int], np.ndarray]
    utterance: Callable[[np.ndarray, int, int], np.ndarray] | None = None

    def normalized(self, waveform: np.ndarray, sr: int, n_mels: int) -> np.ndarray:
        """One utterance's normalised model input (:attr:`utterance`)."""
        if self.utterance is not None:
            return self.utterance(waveform, sr, n_mels)
        return normalize_utterance(self.raw(waveform, sr, n_mels), axis=0)


def _samples(waveform: np.ndarray, sr: int, n_mels: int) -> np.ndarray:
    return np.asarray(waveform, dtype=np.float32)


def _htk_log_mel(waveform: np.ndarray, sr: int, n_mels: int) -> np.ndarray:
    return log_mel_numpy(waveform, sr, n_mels)


def _stacked_raw(waveform: np.ndarray, sr: int, n_mels: int) -> np.ndarray:
    return stacked_fbank_numpy(waveform, sr, n_mels, normalize=False)


def _stacked_utterance(waveform: np.ndarray, sr: int, n_mels: int) -> np.ndarray:
    return stacked_fbank_numpy(waveform, sr, n_mels, normalize=True)


FRONT_ENDS: dict[str, FrontEnd] = {
    "waveform": FrontEnd(_samples),
    "fbank": FrontEnd(_htk_log_mel),
    "stacked_fbank": FrontEnd(_stacked_raw, _stacked_utterance),
}
"""The numpy front end of each feature type an exported folder can name (``feature.type``): the runtime computes
its graph's input with it (the torch path's feature types compute the same values: tested)."""
