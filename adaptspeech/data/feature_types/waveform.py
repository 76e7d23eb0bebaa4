"""Raw waveforms (wav2vec2-family models): ``input_values`` ``[S]``, one unit per sample."""

from __future__ import annotations

from typing import Any

import numpy as np
from datasets import List, Value
from transformers import Wav2Vec2FeatureExtractor

from ..audio import digital_silence
from .registry import FeatureType, register_feature_type


@register_feature_type
class WaveformFeatures(FeatureType):
    """The samples themselves, zero mean and unit variance per utterance when ``do_normalize`` (as transformers'
    ``Wav2Vec2FeatureExtractor``, which computes them: a processor saves it as it is)."""

    name = "waveform"
    input_name = "input_values"
    stock_extractor = True
    stock_class = "Wav2Vec2FeatureExtractor"
    encoder_stride = 320  # wav2vec2's feature encoder: 20 ms at 16 kHz

    def build_stock_extractor(self) -> Any:
        """transformers' ``Wav2Vec2FeatureExtractor`` (zero padding, per-utterance normalisation, attention mask)."""
        return Wav2Vec2FeatureExtractor(
            feature_size=self.feature_size, sampling_rate=self.sampling_rate, padding_value=0.0,
            do_normalize=self.do_normalize, return_attention_mask=True, feature_type=self.name, n_mels=self.n_mels,
        )

    @property
    def feature_size(self) -> int:
        return 1

    @property
    def unit_window(self) -> int:
        return 1

    @property
    def unit_hop(self) -> int:
        return 1

    def num_units(self, num_samples: int) -> int:
        return int(num_samples)

    def raw(self, waveform: np.ndarray) -> np.ndarray:
        """``[S]`` float32."""
        return np.asarray(waveform, dtype=np.float32)

    def empty(self) -> np.ndarray:
        return np.zeros((0,), np.float32)

    def dataset_feature(self) -> Any:
        return List(Value("float32"))

    def digital_silence(self, raw: np.ndarray) -> np.ndarray:
        """Samples inside a run of exact zeros at least one fbank window long (:func:`~adaptspeech.data.audio.
        digital_silence`)."""
        return digital_silence(raw, self.sampling_rate)

    def inputs_to_logits_ratio(self, model: Any) -> int:
        """The backbone's convolution strides (320 for wav2vec2)."""
        return int(model.backbone.config.inputs_to_logits_ratio)
