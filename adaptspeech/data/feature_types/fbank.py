"""Log-mel filterbanks (the fbank Conformer): ``input_features`` ``[T, n_mels]``, one unit per 25-ms frame every
10 ms (:func:`~adaptspeech.data.audio.log_mel`)."""

from __future__ import annotations

import inspect
import math
from typing import Any

import numpy as np
from datasets import Array2D

from ..audio import frame_params, log_mel, num_frames
from .registry import FeatureType, register_feature_type
from .waveform import WaveformFeatures

DIGITAL_SILENCE_MARGIN = 1.0
"""Nats above ``log_mel``'s floor below which every mel bin of a frame marks it as digital silence."""
_LOG_FLOOR = math.log(inspect.signature(log_mel).parameters["eps"].default)
_PROBE_FRAMES = 4096
"""fbank frames of the input whose output length gives a model's subsampling (:meth:`inputs_to_logits_ratio`)."""


@register_feature_type
class FbankFeatures(FeatureType):
    """Log-mel filterbank frames, each mel bin normalised to zero mean and unit variance per utterance when
    ``do_normalize``; computed by :class:`~adaptspeech.feature_extraction.AdaptSpeechFeatureExtractor`."""

    name = "fbank"
    input_name = "input_features"
    stock_extractor = False
    encoder_stride = 640  # 10-ms hop, two stride-2 convolutions

    @property
    def feature_size(self) -> int:
        return self.n_mels

    @property
    def unit_window(self) -> int:
        return frame_params(self.sampling_rate)[0]

    @property
    def unit_hop(self) -> int:
        return frame_params(self.sampling_rate)[1]

    def num_units(self, num_samples: int) -> int:
        return num_frames(num_samples, self.sampling_rate)

    def raw(self, waveform: np.ndarray) -> np.ndarray:
        """``[T, n_mels]`` float32 log-mel energies."""
        return log_mel(np.asarray(waveform, dtype=np.float32), sr=self.sampling_rate, n_mels=self.n_mels)

    def empty(self) -> np.ndarray:
        return np.zeros((0, self.n_mels), np.float32)

    def dataset_feature(self) -> Any:
        return Array2D(shape=(None, self.n_mels), dtype="float32")

    def digital_silence(self, raw: np.ndarray) -> np.ndarray:
        """Frames whose every mel bin lies within ``DIGITAL_SILENCE_MARGIN`` of ``log_mel``'s floor."""
        return raw.max(axis=1) <= _LOG_FLOOR + DIGITAL_SILENCE_MARGIN

    def inputs_to_logits_ratio(self, model: Any) -> int:
        """The 10-ms hop times the model's subsampling (160 x 4 = 640 for the fbank Conformer)."""
        frames = int(model._get_feat_extract_output_lengths(_PROBE_FRAMES))
        return self.unit_hop * round(_PROBE_FRAMES / frames)

    def collate_input(self, row: Any) -> np.ndarray:
        """The row's ``input_features``, or for a row prepared as waveforms (``input_values``) its features
        computed here."""
        if self.input_name not in row and WaveformFeatures.input_name in row:
            return self.extract(np.asarray(row[WaveformFeatures.input_name], dtype=np.float32))
        return super().collate_input(row)
