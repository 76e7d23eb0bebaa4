"""A recording on a model's frame grid, and whether it has anything to decode: what every inference stage reads.

:class:`FrameGrid` is the geometry of a model's input and output: its feature type (what one input unit is: a sample,
or a 25-ms fbank frame every 10 ms), samples and input units per output frame, and the front end's output length.
:func:`nothing_to_decode` is ``prepare``'s rule for clips that give no text, applied before any model call.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ...data.audio import DEFAULT_SILENCE_THRESHOLD
from ...data.feature_types import FeatureType
from ...runtime.audio import undecodable
from ...runtime.long_form import FrameGeometry
from ..model_mixin import MODEL_SAMPLING_RATE, inputs_to_logits_ratio


@dataclass(frozen=True)
class FrameGrid:
    """A model's output-frame grid over its input.

    Attributes:
        model: the adaptspeech model (its front end gives the output length of an input), or ``None`` for a grid of
            its own (:meth:`of_features`: finding speech in audio before any model reads it).
        features: the feature type it reads, at 16 kHz.
        samples_per_frame: input samples per output frame (``inputs_to_logits_ratio``: 640 for the fbank front end,
            320 for wav2vec2).
        units_per_frame: input units per output frame (4 fbank frames, or 320 samples).
    """

    model: Any
    features: FeatureType
    samples_per_frame: int
    units_per_frame: int

    @classmethod
    def of(cls, model: Any) -> FrameGrid:
        """The grid of ``model``."""
        features = FeatureType.of_model(model)
        ratio = inputs_to_logits_ratio(model)
        return cls(model, features, ratio, ratio // features.unit_hop)

    @classmethod
    def of_features(cls, features: FeatureType, samples_per_frame: int) -> FrameGrid:
        """A grid without a model: ``features`` read by a front end giving one output frame per ``samples_per_frame``
        samples (the speech regions of an untranscribed pool, :mod:`~adaptspeech.data.pool_segments`)."""
        if samples_per_frame % features.unit_hop:
            raise ValueError(f"samples_per_frame {samples_per_frame} is not a multiple of the unit hop "
                             f"{features.unit_hop}")
        return cls(None, features, samples_per_frame, samples_per_frame // features.unit_hop)

    @property
    def geometry(self) -> FrameGeometry:
        """The grid without the model, as the numpy long-form functions read it
        (:mod:`adaptspeech.runtime.long_form`)."""
        return FrameGeometry(self.samples_per_frame, self.features.unit_hop, self.features.unit_window,
                             self.output_frames, MODEL_SAMPLING_RATE)

    @property
    def seconds_per_frame(self) -> float:
        """Seconds per output frame (0.04 for the fbank front end)."""
        return self.geometry.seconds_per_frame

    @property
    def seconds_per_unit(self) -> float:
        """Seconds from one input unit to the next."""
        return self.geometry.seconds_per_unit

    def frames_of(self, num_units: int) -> int:
        """Output frames on the grid that ``num_units`` input units touch: ``ceil(num_units / units_per_frame)``."""
        return self.geometry.frames_of(num_units)

    def output_frames(self, num_units: int) -> int:
        """Output frames the model's front end gives for ``num_units`` input units (the unchunked model's count; without
        a model, the whole frames they fill)."""
        if self.model is None:
            return num_units // self.units_per_frame
        return int(self.model._get_feat_extract_output_lengths(num_units))

    def shortest_input(self) -> int:
        """The fewest 16-kHz samples a recording needs for one output frame (see :func:`shortest_input`)."""
        stride = self.samples_per_frame
        return next((n for n in range(stride, 100 * stride)
                     if self.output_frames(self.features.num_units(n)) >= 1), stride)


def shortest_input(model: Any) -> int:
    """The fewest 16-kHz samples a recording needs to be decoded: at least one encoder stride
    (:func:`~adaptspeech.inference.model_mixin.inputs_to_logits_ratio`: 640 for fbank models, 320 for wav2vec2, as
    ``prepare`` counts encoder frames) and one output frame from the front end (wav2vec2's 400-sample receptive
    field)."""
    return FrameGrid.of(model).shortest_input()


def nothing_to_decode(model: Any, waveform: np.ndarray,
                      silence_threshold: float = DEFAULT_SILENCE_THRESHOLD) -> str | None:
    """Why a recording gives no text without running the model, or ``None`` when it has something to decode.

    The rule of ``adaptspeech prepare`` (which skips such clips as ``empty``, ``nan``, ``silent`` and ``too_short``):
    a recording with no samples, with a non-finite sample, of nothing but digital silence (exact zeros) or whose peak
    amplitude lies below the silence threshold, and one shorter than :func:`shortest_input` (one encoder frame
    needs one encoder stride of samples, and wav2vec2's feature encoder its receptive field) has no text; running
    the model on it would give a guess (the fbank front end pads a short clip to one frame) or a crash.

    Args:
        model: an adaptspeech model (its front end's stride and output length).
        waveform: ``[S]`` the recording at 16 kHz.
        silence_threshold: peak amplitude below which a recording is silent (``prepare``'s default, about -80 dBFS).
    """
    return undecodable(np.asarray(waveform), shortest_input(model), silence_threshold)
