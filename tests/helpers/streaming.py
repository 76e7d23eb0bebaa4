"""Helpers of the streaming tests: a CTC head forced to one label while audio streams in (endpointing tests)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import torch


def forced_speaker(recognizer: Any, head: torch.nn.Linear, audio: Callable[[float], np.ndarray]
                   ) -> Callable[[int, float], None]:
    """``say(label, seconds)``: ``seconds`` of ``audio`` into ``recognizer`` with the CTC output layer ``head`` (its
    weights zeroed by the caller) forced to ``label`` on every frame."""

    def say(label: int, seconds: float) -> None:
        with torch.no_grad():
            head.bias.fill_(0.0)
            head.bias[label] = 10.0
        recognizer.accept_waveform(audio(seconds))

    return say
