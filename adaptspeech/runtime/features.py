"""The numeric front end without torch: framing, the mel filterbank's weights, log-mel energies in numpy, and the
per-utterance normalisation every feature type applies, and the global normalisation with a training set's statistics
(:class:`GlobalCmvn`, WeNet's global CMVN).

:func:`frame_params`, :func:`num_frames`, :func:`mel_weights` and :func:`normalize_utterance` are the very functions the
torch path uses (:mod:`adaptspeech.data.audio` and :mod:`adaptspeech.data.feature_types` re-export them).
:func:`log_mel_numpy` is the numpy twin of the torch :func:`adaptspeech.data.audio.log_mel` the training features come
from: the same frames, window, filterbank and floor, computed with numpy's FFT in float64 instead of torch's in
float32, so the two agree to float32 rounding (tested), not bit for bit. The torch-free ONNX runtime
(:class:`~adaptspeech.runtime.OnnxRecognizer`) computes the fbank models' input with it.
"""

from __future__ import annotations

from collections.abc import Mapping
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
