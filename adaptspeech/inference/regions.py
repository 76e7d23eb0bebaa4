"""Stage 1 of inference: the speech regions of a recording, on its model input units.

The regions come from a speech-region finder on the recording's output frames (:mod:`.speech_finders`: the energy
rule of :mod:`~adaptspeech.inference.pauses`, or silero-vad). Region
``[a, b)`` of output frames is input units ``[a u, b u)`` (``u`` input units per output frame; the last region up to
the end of the input) less the units at either end that read digital silence (``prepare``'s utterances hold none);
a region then shorter than ``MIN_SPEECH_S``, or too short for the front end to give one frame, is dropped. The middle
frame of every pause between two regions is a word boundary.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..data.audio import digital_silence
from .pauses import MIN_SPEECH_S
from .recording import FrameGrid
from .speech_finders import ENERGY, SpeechFinderSettings


@dataclass(frozen=True)
class SpeechRegions:
    """Where a recording holds speech.

    Attributes:
        spans: ``[(start_unit, end_unit), ...]`` model input units of each region, in order.
        boundaries: ``[output frame, ...]``: the middle frame of every pause between two regions (a word boundary).
    """

    spans: list[tuple[int, int]]
    boundaries: list[int]


def find_speech(grid: FrameGrid, num_units: int, waveform: np.ndarray,
                finder: SpeechFinderSettings = ENERGY) -> SpeechRegions:
    """The speech regions of a recording (see the module docstring).

    Args:
        grid: the model's frame grid.
        num_units: length of the recording's model input.
        waveform: ``[S]`` the recording at 16 kHz.
        finder: the speech-region finder and its settings (:mod:`~adaptspeech.inference.speech_finders`).
    """
    per_frame = grid.units_per_frame
    num_frames = grid.frames_of(num_units)
    regions, boundaries = finder.find(waveform, grid.samples_per_frame, num_frames)
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
