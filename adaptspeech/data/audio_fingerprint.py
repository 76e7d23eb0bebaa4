"""Whether two recordings are the same audio after re-encoding, a small trim and a gain change: a coarse,
level-free spectral envelope compared by correlation over aligned offsets.

:func:`fingerprint` summarises a 16-kHz waveform ``[S]`` as ``[T, B]`` log band energies (:data:`HOP` samples per
frame, :data:`BANDS` log-spaced bands between 100 Hz and 7 kHz), floored :data:`FLOOR_DB` below the loudest band
energy and centred per band: a gain adds the same constant to every log energy and is removed by the centring, a
lossy codec or PCM16 changes the fine spectrum but hardly the band energies, and a trim shifts the frames.
:func:`similarity` is the largest Pearson correlation of two fingerprints over the offsets of at most
:data:`MAX_SHIFT_S` (their overlapping frames, at least half of the shorter one); :data:`SAME_AUDIO` is the
threshold above which two recordings count as the same audio.

What it cannot see: a clip hidden inside a longer recording (whole files are compared, and only files whose
durations differ by at most :data:`MAX_SHIFT_S` plus the frames a trim may remove), a clip played faster or slower,
and heavy noise or filtering. The comparison is ``O(pool files x held-out clips of a similar duration)``.
"""

from __future__ import annotations

import numpy as np

SAMPLING_RATE = 16000
HOP = 160
"""Samples per frame (10 ms)."""
WINDOW = 512
"""Samples per analysis window (32 ms, Hann)."""
BANDS = 16
FLOOR_DB = 50.0
"""Band energies more than this below the loudest are raised to it (silence and codec noise do not count)."""
MAX_SHIFT_S = 0.25
"""The largest trim (seconds at either end) the comparison looks through."""
SAME_AUDIO = 0.9
"""Correlation above which two recordings are the same audio (copies: above 0.98; other clips of the same voice and
words: below 0.6 on the synthetic corpus; tests/data/test_data_audio_fingerprint.py)."""


def _band_edges() -> np.ndarray:
    """FFT bin edges ``[BANDS + 1]`` of :data:`BANDS` log-spaced bands between 100 Hz and 7 kHz."""
    hz = np.geomspace(100.0, 7000.0, BANDS + 1)
    return np.round(hz / SAMPLING_RATE * WINDOW).astype(int)


def fingerprint(waveform: np.ndarray) -> np.ndarray:
    """``[T, BANDS]`` float32: the centred log band energies of a 16-kHz waveform ``[S]`` (module docstring);
    ``[0, BANDS]`` for a recording shorter than one window or without energy."""
    wave = np.asarray(waveform, dtype=np.float32)
    if len(wave) < WINDOW or not np.any(wave):
        return np.zeros((0, BANDS), np.float32)
    count = 1 + (len(wave) - WINDOW) // HOP
    frames = np.lib.stride_tricks.sliding_window_view(wave, WINDOW)[::HOP][:count] * np.hanning(WINDOW)
    power = np.abs(np.fft.rfft(frames, axis=1)) ** 2
    edges = _band_edges()
    energy = np.add.reduceat(power, edges[:-1], axis=1)[:, :BANDS]
    log = 10.0 * np.log10(np.maximum(energy, 1e-20))
    log = np.maximum(log, log.max() - FLOOR_DB)
    return (log - log.mean(axis=0, keepdims=True)).astype(np.float32)


def similarity(a: np.ndarray, b: np.ndarray, max_shift_s: float = MAX_SHIFT_S) -> float:
    """The largest correlation of fingerprints ``a`` ``[Ta, B]`` and ``b`` ``[Tb, B]`` over offsets of at most
    ``max_shift_s`` (overlaps of at least half the shorter one); 0.0 when none is long enough."""
    shortest = min(len(a), len(b))
    if shortest < 2:
        return 0.0
    max_shift = round(max_shift_s * SAMPLING_RATE / HOP)
    best = 0.0
    for shift in range(-max_shift, max_shift + 1):
        x = a[max(shift, 0):]
        y = b[max(-shift, 0):]
        length = min(len(x), len(y))
        if length < max(2, shortest // 2):
            continue
        x = x[:length] - x[:length].mean()
        y = y[:length] - y[:length].mean()
        denominator = float(np.sqrt((x * x).sum() * (y * y).sum()))
        if denominator > 0:
            best = max(best, float((x * y).sum()) / denominator)
    return best
