"""The numeric front end without torch: framing, the mel filterbank's weights, log-mel energies in numpy, and the
per-utterance normalisation every feature type applies.

:func:`frame_params`, :func:`num_frames`, :func:`mel_weights` and :func:`normalize_utterance` are the very functions the
torch path uses (:mod:`adaptspeech.data.audio` and :mod:`adaptspeech.data.feature_types` re-export them).
:func:`log_mel_numpy` is the numpy twin of the torch :func:`adaptspeech.data.audio.log_mel` the training features come
from: the same frames, window, filterbank and floor, computed with numpy's FFT in float64 instead of torch's in
float32, so the two agree to float32 rounding (tested), not bit for bit. The torch-free ONNX runtime
(:class:`~adaptspeech.runtime.OnnxRecognizer`) computes the fbank models' input with it.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np


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
