"""Audio for the data preparation: decoding (:mod:`adaptspeech.runtime.audio`, torch-free, re-exported here) and the
log-mel front end in torch.

Decoding: soundfile reads the clip, the channels are averaged to mono and soxr resamples (``datasets`` would decode
through torchcodec, whose wheels do not load with this CPU torch, and torchaudio has no CPU wheel here); bad clips raise
:class:`BadClipError` with a machine-readable ``reason``. The framing and the filterbank's weights are
:mod:`adaptspeech.runtime.features`'s, shared with the torch-free runtime.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np
import torch

from ..runtime.audio import (
    DEFAULT_SILENCE_THRESHOLD,
    EMPTY,
    MISSING,
    NAN,
    SILENT,
    TOO_LONG,
    TRUNCATED,
    UNREADABLE,
    BadClipError,
    digital_silence,
    load_audio,
)
from ..runtime.features import frame_params, mel_weights, num_frames

__all__ = [
    "DEFAULT_SILENCE_THRESHOLD",
    "EMPTY",
    "MISSING",
    "NAN",
    "SILENT",
    "TOO_LONG",
    "TRUNCATED",
    "UNREADABLE",
    "BadClipError",
    "digital_silence",
    "frame_params",
    "load_audio",
    "log_mel",
    "mel_filterbank",
    "num_frames",
]


@lru_cache(maxsize=16)
def mel_filterbank(
    n_mels: int = 80, sr: int = 16000, n_fft: int = 512, f_min: float = 20.0, f_max: float | None = None
) -> torch.Tensor:
    """:func:`~adaptspeech.runtime.features.mel_weights` as a tensor: triangular filters on the HTK mel scale,
    ``[n_fft // 2 + 1, n_mels]``, float32 (read-only by convention: cached)."""
    return torch.from_numpy(np.array(mel_weights(n_mels, sr, n_fft, f_min, f_max)))


LOG_MEL_PIECE_FRAMES = 6000
"""Frames of :func:`log_mel` computed at once (a minute at the 10-ms hop)."""


def log_mel(
    waveform: np.ndarray | torch.Tensor,
    sr: int = 16000,
    n_mels: int = 80,
    *,
    win_ms: float = 25.0,
    hop_ms: float = 10.0,
    f_min: float = 20.0,
    eps: float = 1e-10,
    piece_frames: int = LOG_MEL_PIECE_FRAMES,
) -> np.ndarray | torch.Tensor:
    """Log mel filterbank energies (the "fbank" front end), in torch, without torchaudio.

    Frames of 25 ms every 10 ms without centre padding (Kaldi's ``snip_edges``: ``T = 1 + (S - win) // hop``;
    a clip shorter than one window is zero-padded to one frame), a periodic Hann window, the power
    spectrum of an ``n_fft``-point real FFT (``n_fft`` the next power of two >= the window, 512 at 16 kHz),
    :func:`mel_filterbank`, then ``log(max(energy, eps))``. No dither, pre-emphasis or normalisation
    (the data preparation normalises per utterance, see :func:`~adaptspeech.data.feature_types.normalize_utterance`).

    Args:
        waveform (`np.ndarray` or `torch.Tensor`): ``[S]`` or ``[B, S]`` float samples.
        sr (`int`, defaults to 16000): sampling rate of ``waveform``.
        n_mels (`int`, defaults to 80): number of mel filters.
        piece_frames (`int`): frames computed at once (the same features; the FFT's intermediates of an hour at
            once would take 1.7 GB, of :data:`LOG_MEL_PIECE_FRAMES` about 35 MB).

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
    frames = x.unfold(-1, win, hop)  # [..., T, win] (a view)
    window = torch.hann_window(win, periodic=True, dtype=frames.dtype, device=frames.device)
    fbank = mel_filterbank(n_mels, sr, n_fft, f_min).to(frames.device)
    feats = torch.empty((*frames.shape[:-1], n_mels), dtype=frames.dtype, device=frames.device)
    piece_frames = max(1, piece_frames)
    for first in range(0, frames.shape[-2], piece_frames):
        piece = frames[..., first : first + piece_frames, :]
        power = torch.fft.rfft(piece * window, n=n_fft).abs().pow(2)  # [..., t, n_fft // 2 + 1]
        feats[..., first : first + piece_frames, :] = torch.log(torch.clamp(power @ fbank, min=eps))
    return feats.numpy() if as_numpy else feats
