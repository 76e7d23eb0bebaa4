"""Audio decoding and log-mel features without torchcodec or torchaudio.

``datasets`` decodes audio through torchcodec, whose wheels do not load with the CPU torch of this project,
and torchaudio has no CPU wheel here. So clips stay ``Audio(decode=False)`` in the datasets and are decoded
here: soundfile (libsndfile: wav, flac, ogg, mp3) reads them, the channels are averaged to mono and soxr
resamples to the model's rate. Bad clips raise :class:`BadClipError` with a machine-readable ``reason``
so that the data preparation can skip and count them instead of crashing an epoch.
"""

from __future__ import annotations

import io
import os
from functools import lru_cache

import numpy as np
import soundfile as sf
import soxr
import torch

# Reasons a clip is rejected by :func:`load_audio` (the data preparation adds its own, see ``report.py``).
MISSING = "missing"
EMPTY = "empty"
UNREADABLE = "unreadable"
NAN = "nan"
SILENT = "silent"
TOO_LONG = "too_long"

DEFAULT_SILENCE_THRESHOLD = 1e-4
"""Peak amplitude (full scale = 1.0) under which a clip counts as silent, about -80 dBFS."""


class BadClipError(Exception):
    """A clip that cannot be used for training.

    Args:
        path (`str`): the clip's file name or path, as it should appear in a report.
        reason (`str`): one of ``missing``, ``empty``, ``unreadable``, ``nan``, ``silent``, ``too_long``
            (or a reason added by the data preparation, e.g. ``too_short``).
        detail (`str`, *optional*): a human-readable explanation (durations, the decoder's message).
    """

    def __init__(self, path: str | os.PathLike[str], reason: str, detail: str = "") -> None:
        self.path = str(path)
        self.reason = reason
        self.detail = detail
        super().__init__(f"{self.path}: {reason}" + (f" ({detail})" if detail else ""))


def load_audio(
    path: str | os.PathLike[str],
    target_sr: int = 16000,
    max_seconds: float | None = None,
    *,
    data: bytes | None = None,
    silence_threshold: float = DEFAULT_SILENCE_THRESHOLD,
) -> np.ndarray:
    """Decode one clip to a mono float32 waveform at ``target_sr``.

    Args:
        path (`str` or `os.PathLike`): the audio file. With ``data`` it only names the clip in errors.
        target_sr (`int`, defaults to 16000): output sampling rate; soxr (``HQ``) resamples when the
            file's rate differs.
        max_seconds (`float`, *optional*): clips longer than this raise ``too_long``.
        data (`bytes`, *optional*): the encoded file in memory (e.g. the ``bytes`` of a Hub dataset's
            ``Audio(decode=False)`` column); read instead of ``path``.
        silence_threshold (`float`, defaults to 1e-4): clips whose peak amplitude is below it raise
            ``silent``.

    Returns:
        `np.ndarray` of shape ``[S]``, dtype float32, C-contiguous; not normalised (the feature extractor
        does that).

    Raises:
        BadClipError: ``missing`` (no such file), ``empty`` (zero bytes or zero frames), ``unreadable``
            (soundfile cannot decode it), ``nan`` (non-finite samples), ``silent``, ``too_long``.
    """
    name = str(path)
    if data is None:
        if not os.path.isfile(path):
            raise BadClipError(name, MISSING, "no such file")
        if os.path.getsize(path) == 0:
            raise BadClipError(name, EMPTY, "zero-byte file")
        source: str | os.PathLike[str] | io.BytesIO = path
    else:
        if len(data) == 0:
            raise BadClipError(name, EMPTY, "zero bytes")
        source = io.BytesIO(data)
    try:
        with sf.SoundFile(source) as handle:
            sr = handle.samplerate
            if max_seconds is not None and 0 < handle.frames < np.iinfo(np.int64).max:
                _check_length(name, handle.frames, sr, max_seconds)
            wave = handle.read(dtype="float32", always_2d=True)
    except BadClipError:
        raise
    except (sf.SoundFileError, RuntimeError, ValueError, EOFError, OSError) as err:
        raise BadClipError(name, UNREADABLE, f"soundfile cannot decode it: {err}") from None
    if wave.shape[0] == 0:
        raise BadClipError(name, EMPTY, "no audio frames")
    if max_seconds is not None:
        _check_length(name, wave.shape[0], sr, max_seconds)
    if not np.isfinite(wave).all():
        raise BadClipError(name, NAN, "non-finite samples")
    mono = wave.mean(axis=1, dtype=np.float32) if wave.shape[1] > 1 else wave[:, 0]
    peak = float(np.abs(mono).max())
    if peak < silence_threshold:
        raise BadClipError(name, SILENT, f"peak amplitude {peak:.2e} < {silence_threshold:.0e}")
    if sr != target_sr:
        mono = soxr.resample(mono, sr, target_sr, quality="HQ")
    return np.ascontiguousarray(mono, dtype=np.float32)


def _check_length(name: str, frames: int, sr: int, max_seconds: float) -> None:
    if frames > max_seconds * sr:
        raise BadClipError(name, TOO_LONG, f"{frames / sr:.2f} s > max_seconds={max_seconds:g}")


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
def mel_filterbank(
    n_mels: int = 80, sr: int = 16000, n_fft: int = 512, f_min: float = 20.0, f_max: float | None = None
) -> torch.Tensor:
    """Triangular filters on the HTK mel scale, ``mel(f) = 2595 log10(1 + f / 700)``, without area norm.

    ``n_mels + 2`` points equally spaced in mel between ``f_min`` and ``f_max`` (default ``sr / 2``) give
    the feet and peaks of the triangles; each FFT bin ``k`` (frequency ``k sr / n_fft``) gets the weight of
    its position on each triangle.

    Returns:
        `torch.Tensor` of shape ``[n_fft // 2 + 1, n_mels]``, float32 (read-only by convention: cached).
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
    weights = np.clip(np.minimum(rising, falling), 0.0, None)
    return torch.from_numpy(weights.astype(np.float32))


def log_mel(
    waveform: np.ndarray | torch.Tensor,
    sr: int = 16000,
    n_mels: int = 80,
    *,
    win_ms: float = 25.0,
    hop_ms: float = 10.0,
    f_min: float = 20.0,
    eps: float = 1e-10,
) -> np.ndarray | torch.Tensor:
    """Log mel filterbank energies (the "fbank" front end), in torch, without torchaudio.

    Frames of 25 ms every 10 ms without centre padding (Kaldi's ``snip_edges``: ``T = 1 + (S - win) // hop``;
    a clip shorter than one window is zero-padded to one frame), a periodic Hann window, the power
    spectrum of an ``n_fft``-point real FFT (``n_fft`` the next power of two >= the window, 512 at 16 kHz),
    :func:`mel_filterbank`, then ``log(max(energy, eps))``. No dither, pre-emphasis or normalisation
    (the data preparation normalises per utterance, see ``features.py``).

    Args:
        waveform (`np.ndarray` or `torch.Tensor`): ``[S]`` or ``[B, S]`` float samples.
        sr (`int`, defaults to 16000): sampling rate of ``waveform``.
        n_mels (`int`, defaults to 80): number of mel filters.

    Returns:
        ``[T, n_mels]`` (or ``[B, T, n_mels]``) float32, a tensor for a tensor input, else an ndarray.
    """
    as_numpy = not isinstance(waveform, torch.Tensor)
    x = torch.as_tensor(np.asarray(waveform, dtype=np.float32) if as_numpy else waveform).float()
    if x.dim() not in (1, 2):
        raise ValueError(f"log_mel expects a waveform of shape [S] or [B, S], got {tuple(x.shape)}")
    win, hop, n_fft = frame_params(sr, win_ms, hop_ms)
    if x.shape[-1] < win:
        x = torch.nn.functional.pad(x, (0, win - x.shape[-1]))
    frames = x.unfold(-1, win, hop)  # [..., T, win]
    window = torch.hann_window(win, periodic=True, dtype=frames.dtype, device=frames.device)
    power = torch.fft.rfft(frames * window, n=n_fft).abs().pow(2)  # [..., T, n_fft // 2 + 1]
    fbank = mel_filterbank(n_mels, sr, n_fft, f_min).to(power.device)
    feats = torch.log(torch.clamp(power @ fbank, min=eps))
    return feats.numpy() if as_numpy else feats
