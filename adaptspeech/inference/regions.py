"""Stage 1 of inference: the speech regions of a recording, on its model input units.

The pauses come from the energy of the recording's output frames (:mod:`~adaptspeech.inference.pauses`). Region
``[a, b)`` of output frames is input units ``[a u, b u)`` (``u`` input units per output frame; the last region up to
the end of the input) less the units at either end that read digital silence (``prepare``'s utterances hold none);
a region then shorter than ``MIN_SPEECH_S``, or too short for the front end to give one frame, is dropped. The middle
frame of every pause between two regions is a word boundary. The rule itself is numpy
(:func:`adaptspeech.runtime.long_form.speech_spans`), shared with the ONNX runtime.
"""

from __future__ import annotations

import numpy as np

from ..runtime.long_form import SpeechRegions, check_pause_settings, speech_spans
from .pauses import DEFAULT_MIN_PAUSE_S, DEFAULT_PAUSE_DB, DEFAULT_SPEECH_PAD_S
from .recording import FrameGrid

__all__ = ["SpeechRegions", "check_pause_settings", "find_speech"]


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
    return speech_spans(grid.geometry, num_units, waveform, min_pause_s, speech_pad_s, pause_db)
