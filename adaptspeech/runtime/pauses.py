"""Pauses in a long recording, from the energy of its output frames: where CTC decoding cuts it into utterances.

A model trained on utterances of a few seconds reads a long recording best one utterance at a time, as a voice
activity detector feeds a recogniser: each stretch of speech normalised over its own audio (as ``prepare`` normalises
a training utterance) and decoded alone, so that the encoder never attends across two utterances nor reads long
silences it never saw in training (the long-form CER check in docs/inference.md measures each effect).

**Pause rule.** ``e_t`` is the log power in dB of output frame ``t``'s samples (:func:`energy_cost`). Frames of
digital silence (``e_t <= -95`` dB: runs of exact zeros) are pause frames and are left out of the levels below. The
speech level ``R`` is the 90th percentile of the other frames' ``e_t``, the floor ``F`` their 2nd percentile; a frame
is a pause frame when

    e_t < max(R - pause_db, min(F + 3 dB, R - 10 dB))

(``R - pause_db`` on clean audio; ``F + 3`` dB where noise lifts the pauses above it, but never within 10 dB of the
speech level, so that a recording of even loudness has no pause frames). A *pause* is a run of at least
``min_pause_s`` of pause frames. With the defaults (30 dB, 0.25 s) the pauses inside the demo's synthetic utterances
(at most 0.2 s below the threshold) are not pauses and the 0.3 s gaps between them are.

**Speech regions** are the stretches between pauses (a pause touching either end of the recording trims it), each
grown over the pause frames next to it that still sound (:func:`edge_threshold`, the second threshold of a
two-threshold VAD): up to the pause's digital silence where it has some (concatenated or edited audio: whatever sounds
between an utterance and the zeros is that utterance's soft onset or fade-out), otherwise over frames above the noise
floor ``F + 3`` dB (room noise: the onset rises out of it); then widened by ``speech_pad_s`` on both sides (as
silero-vad's ``speech_pad_ms``; default 0); never past the middle of a pause, so that regions do not overlap. The
middle frame ``(first + end - 1) // 2`` of every pause between two regions is where one utterance ends and the next
begins: a word boundary. A region shorter than ``MIN_SPEECH_S`` once digital silence is trimmed (a click between two
pauses) is not decoded (:func:`~adaptspeech.runtime.long_form.speech_spans`).
"""

from __future__ import annotations

import numpy as np

DEFAULT_MIN_PAUSE_S = 0.25
"""Shortest pause (seconds below the threshold) that ends an utterance."""
DEFAULT_PAUSE_DB = 30.0
"""Decibels below the speech level under which a frame is a pause frame (clean audio)."""
MIN_SPEECH_S = 0.1
"""A speech region shorter than this (a click between two pauses) is not decoded: its frames stay blank (silero-vad's
``min_speech_duration_ms`` is 250 ms; 0.1 s keeps a short word)."""
DEFAULT_SPEECH_PAD_S = 0.0
"""Seconds of the neighbouring pauses kept on each side of a speech region. 0, chosen on the demo's dev utterances
(``scripts/bench_long_form_cer.py --split dev --speech-pad 0 0.05 0.1``): with pauses of digital silence the pad does
not matter (it is trimmed), with pauses of -60 dB noise every 0.05 s of it costs 2 to 4 CER points, since the demo's
synthetic clips hold no silence at all; the threshold, 30 dB below the speech level, already keeps soft onsets."""
DIGITAL_SILENCE_DB = -95.0
"""Frames at or below this log power are digital silence (``energy_cost`` floors exact zeros at -100 dB)."""
FLOOR_MARGIN_DB = 3.0
"""Decibels above the floor (2nd percentile) under which a frame is a pause frame (noisy audio)."""
SPEECH_MARGIN_DB = 10.0
"""A pause frame lies at least this far below the speech level, whatever the floor."""
_ENERGY_FLOOR = 1e-10
"""Power floor (-100 dB) so that digital silence has a finite log power."""
_ZERO_DB = 10.0 * np.log10(_ENERGY_FLOOR) + 1e-6
"""Frames at or below this are all zeros (a fade's last samples can lie below ``DIGITAL_SILENCE_DB`` but are not)."""
_SPEECH_PERCENTILE = 90.0
_FLOOR_PERCENTILE = 2.0


ENERGY_PIECE_FRAMES = 1500
"""Output frames whose samples :func:`energy_cost` squares at once (a minute at 40 ms; an hour's float64 samples and
their squares at once took 920 MB)."""


def energy_cost(waveform: np.ndarray, samples_per_frame: int, num_frames: int,
                piece_frames: int = ENERGY_PIECE_FRAMES) -> np.ndarray:
    """``[num_frames]`` log power (dB) of the samples ``[t x samples_per_frame, (t + 1) x samples_per_frame)`` of
    each output frame (zero-padded past the end of ``waveform`` ``[S]``), ``piece_frames`` frames at a time (the
    same figures)."""
    power = np.empty(num_frames, dtype=np.float64)
    piece_frames = max(1, piece_frames)
    for first in range(0, num_frames, piece_frames):
        frames = min(piece_frames, num_frames - first)
        samples = np.zeros(frames * samples_per_frame, dtype=np.float64)
        part = waveform[first * samples_per_frame : (first + frames) * samples_per_frame]
        samples[: len(part)] = part
        power[first : first + frames] = np.square(samples).reshape(frames, samples_per_frame).mean(-1)
    return 10.0 * np.log10(np.maximum(power, _ENERGY_FLOOR))


def _levels(energy_db: np.ndarray) -> tuple[float, float] | None:
    """``(R, F)``: the speech level and the floor (90th and 2nd percentiles) of the frames ``[T]`` that are not
    digital silence, or ``None`` when every frame is."""
    sounding = energy_db[energy_db > DIGITAL_SILENCE_DB]
    if len(sounding) == 0:
        return None
    return float(np.percentile(sounding, _SPEECH_PERCENTILE)), float(np.percentile(sounding, _FLOOR_PERCENTILE))


def pause_threshold(energy_db: np.ndarray, pause_db: float = DEFAULT_PAUSE_DB) -> float:
    """``max(R - pause_db, min(F + 3, R - 10))`` dB of the module docstring's rule for frame energies ``[T]``
    (``-inf`` when every frame is digital silence: only digital silence is then a pause)."""
    levels = _levels(energy_db)
    if levels is None:
        return -np.inf
    speech, floor = levels
    return max(speech - pause_db, min(floor + FLOOR_MARGIN_DB, speech - SPEECH_MARGIN_DB))


def find_pauses(energy_db: np.ndarray, min_pause_frames: int,
                pause_db: float = DEFAULT_PAUSE_DB) -> list[tuple[int, int]]:
    """Pauses ``[(first, end), ...]`` (frames ``[first, end)``, in order; those touching either end included) of a
    recording's frame energies ``[T]``.

    Args:
        energy_db: ``[T]`` log power per output frame (dB).
        min_pause_frames: shortest run of pause frames that is a pause (at least 1).
        pause_db: decibels below the speech level (see :func:`pause_threshold`).
    """
    if min_pause_frames < 1:
        raise ValueError(f"a pause of {min_pause_frames} frames: must be at least one frame")
    energy_db = np.asarray(energy_db, dtype=np.float64)
    quiet = (energy_db <= DIGITAL_SILENCE_DB) | (energy_db < pause_threshold(energy_db, pause_db))
    edges = np.flatnonzero(np.diff(np.concatenate([[0], quiet.astype(np.int8), [0]])))
    runs = zip(edges[::2].tolist(), edges[1::2].tolist(), strict=True)
    return [(a, b) for a, b in runs if b - a >= min_pause_frames]


def edge_threshold(energy_db: np.ndarray) -> float:
    """``F + 3`` dB for frame energies ``[T]`` (``-inf`` when every frame is digital silence): in a pause without
    digital silence a region grows over the frames above it, so that it takes a soft onset rising out of room noise
    but not the noise itself (module docstring)."""
    levels = _levels(energy_db)
    return -np.inf if levels is None else levels[1] + FLOOR_MARGIN_DB


def _grow(energy_db: np.ndarray, edge: int, limit: int, step: int, threshold: float) -> int:
    """The frame where a region's edge ``edge`` (its first frame, ``step=-1``, or one past its last, ``step=1``)
    stops growing into the pause towards ``limit``: when the pause holds digital silence, over every frame up to the
    first all-zero one (at the -100 dB floor: a fade's last samples can lie below -95 dB; the units that touch the
    zeros are trimmed later, :func:`~adaptspeech.runtime.long_form.speech_spans`), else over frames above
    ``threshold``."""
    frames = range(edge, limit) if step > 0 else range(edge - 1, limit - 1, -1)
    silent = any(energy_db[t] <= DIGITAL_SILENCE_DB for t in frames)
    for t in frames:
        sounding = energy_db[t] > _ZERO_DB if silent else energy_db[t] > threshold
        if not sounding:
            return t if step > 0 else t + 1
    return limit


def speech_regions(energy_db: np.ndarray, min_pause_frames: int, pad_frames: int = 0,
                   pause_db: float = DEFAULT_PAUSE_DB) -> tuple[list[tuple[int, int]], list[int]]:
    """The speech regions of a recording and the word boundaries between them (module docstring).

    Args:
        energy_db: ``[T]`` log power per output frame (dB).
        min_pause_frames: shortest pause, in frames.
        pad_frames: frames added on each side of a region once grown (within half of the neighbouring pause).
        pause_db: decibels below the speech level.

    Returns:
        ``(regions [(first, end), ...] frames in order, boundaries [frame, ...])``: ``[]`` regions when every frame
        is a pause frame; one boundary per pause lying between two regions.
    """
    if pad_frames < 0:
        raise ValueError(f"a speech pad of {pad_frames} frames: must not be negative")
    energy_db = np.asarray(energy_db, dtype=np.float64)
    total = len(energy_db)
    pauses = find_pauses(energy_db, min_pause_frames, pause_db)
    starts = [0] + [b for _, b in pauses]
    ends = [a for a, _ in pauses] + [total]
    middles = [(a + b - 1) // 2 for a, b in pauses]
    grow_above = edge_threshold(np.asarray(energy_db, dtype=np.float64))
    regions: list[tuple[int, int]] = []
    boundaries: list[int] = []
    for i, (start, end) in enumerate(zip(starts, ends, strict=True)):
        if end <= start:  # a pause touching the recording's start or end
            continue
        low = middles[i - 1] + 1 if regions else 0  # a pause touching the start has no region before it
        high = middles[i] if i < len(pauses) and pauses[i][1] < total else total
        if regions:
            boundaries.append(middles[i - 1])
        start = _grow(energy_db, start, low, -1, grow_above)
        end = _grow(energy_db, end, high, 1, grow_above)
        regions.append((max(low, start - pad_frames), min(high, end + pad_frames)))
    return regions, boundaries
