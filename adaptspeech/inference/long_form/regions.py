"""Stage 1 of inference: the speech regions of a recording, on its model input units.

The regions come from a speech-region finder on the recording's output frames (:mod:`.speech_finders`: the energy
rule of :mod:`~adaptspeech.runtime.pauses`, or silero-vad). Region
``[a, b)`` of output frames is input units ``[a u, b u)`` (``u`` input units per output frame; the last region up to
the end of the input) less the units at either end that read digital silence (``prepare``'s utterances hold none);
a region then shorter than ``MIN_SPEECH_S``, or too short for the front end to give one frame, is dropped. The middle
frame of every pause between two regions is a word boundary. The rule itself is numpy
(:func:`adaptspeech.runtime.long_form.speech_spans`), shared with the ONNX runtime.
"""

from __future__ import annotations

import numpy as np

from ...runtime.long_form import SpeechRegions, check_pause_settings, region_spans
from .recording import FrameGrid
from .speech_finders import ENERGY, SpeechFinderSettings

__all__ = ["SpeechRegions", "check_pause_settings", "find_speech"]


def find_speech(grid: FrameGrid, num_units: int, waveform: np.ndarray,
                finder: SpeechFinderSettings = ENERGY) -> SpeechRegions:
    """The speech regions of a recording (see the module docstring).

    Args:
        grid: the model's frame grid.
        num_units: length of the recording's model input.
        waveform: ``[S]`` the recording at 16 kHz.
        finder: the speech-region finder and its settings (:mod:`~adaptspeech.inference.long_form.speech_finders`).
    """
    regions, boundaries = finder.find(waveform, grid.samples_per_frame, grid.frames_of(num_units))
    return region_spans(grid.geometry, num_units, waveform, regions, boundaries)
