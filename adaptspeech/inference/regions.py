"""Stage 1 of inference: the speech regions of a recording, on its model input units.

The pauses come from the energy of the recording's output frames (:mod:`~adaptspeech.inference.pauses`). Region
``[a, b)`` of output frames is input units ``[a u, b u)`` (``u`` input units per output frame; the last region up to
the end of the input) less the units at either end that read digital silence (``prepare``'s utterances hold none);
a region then shorter than ``MIN_SPEECH_S``, or too short for the front end to give one frame, is dropped. The middle
frame of every pause between two regions is a word boundary.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..data.audio import digital_silence
from .pauses import (
    DEFAULT_MIN_PAUSE_S,
    DEFAULT_PAUSE_DB,
    DEFAULT_SPEECH_PAD_S,
    MIN_SPEECH_S,
    energy_cost,
    speech_regions,
)
from .recording import FrameGrid


@dataclass(frozen=True)
class SpeechRegions:
    """Where a recording holds speech.

    Attributes:
        spans: ``[(start_unit, end_unit), ...]`` model input units of each region, in order.
        boundaries: ``[output frame, ...]``: the middle frame of every pause between two regions (a word boundary).
    """

    spans: list[tuple[int, int]]
    boundaries: list[int]


def check_pause_settings(min_pause_s: float, speech_pad_s: float) -> None:
    """Refuse a pause that is not positive or a pad that is negative (``ValueError`` naming both)."""
    if min_pause_s <= 0 or speech_pad_s < 0:
        raise ValueError(f"min_pause_s must be positive and speech_pad_s not negative, got {min_pause_s} and "
                         f"{speech_pad_s}")


def find_speech(grid: FrameGrid, num_units: int, waveform: np.ndarray, min_pause_s: float = DEFAULT_MIN_PAUSE_S,
                speech_pad_s: float = DEFAULT_SPEECH_PAD_S, pause_db: float = DEFAULT_PAUSE_DB) -> SpeechRegions:
    """The speech regions of a recording (see the module docstring).

    Args:
        grid: the model's frame grid.
        num_units: length of the recording's model input.
        waveform: ``[S]`` the recording at 16 kHz.
        min_pause_s, speech_pad_s, pause_db: the pause rule's settings (:mod:`~adaptspeech.inference.pauses`).
    """
    check_pause_settings(min_pause_s, speech_pad_s)
    per_frame, seconds_per_frame = grid.units_per_frame, grid.seconds_per_frame
    num_frames = grid.frames_of(num_units)
    regions, boundaries = speech_regions(energy_cost(waveform, grid.samples_per_frame, num_frames),
                                         max(1, round(min_pause_s / seconds_per_frame)),
                                         round(speech_pad_s / seconds_per_frame), pause_db)
    touching = grid.features.units_touching(digital_silence(np.asarray(waveform)), num_units)
    spans = []
    for a, b in regions:
        low, high = a * per_frame, num_units if b == num_frames else min(b * per_frame, num_units)
        sound = np.flatnonzero(~touching[low:high])
        if len(sound) == 0:
            continue
        start, end = low + int(sound[0]), low + int(sound[-1]) + 1
        long_enough = (end - start) * grid.seconds_per_unit >= MIN_SPEECH_S
        if long_enough and grid.output_frames(end - start) > 0:
            spans.append((start, end))
    return SpeechRegions(spans, boundaries)
