"""w2v-BERT 2.0's input: Kaldi-style log-mel filterbanks stacked by 2 (``input_features`` ``[T // 2, 2 n_mels]``, one
unit per 20 ms), computed by transformers' ``SeamlessM4TFeatureExtractor``.

The extractor frames the waveform (scaled to 16-bit integers) in 25-ms Povey windows every 10 ms without centre
padding (DC offset removed, pre-emphasis 0.97), takes ``n_mels`` Kaldi mel bins and their log (floor
``1.19e-7``), normalises each bin over the utterance's frames (mean and *sample* variance, ``ddof=1``, epsilon
``1e-7``), drops an odd last frame and concatenates frames ``2u`` and ``2u + 1`` into unit ``u``. This type computes
it with the torch-free runtime's numpy front end (:func:`~adaptspeech.runtime.features.stacked_fbank_numpy`, the
extractor's own arithmetic vectorised: bit-identical to it, tested), so ``prepare``, the collator, inference and the
exported model's runtime compute exactly what transformers computes. (transformers pads a batch to an even frame
count and masks the half-filled unit of an odd utterance; one utterance here has ``T // 2`` units, its real ones.)
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from datasets import Array2D
from transformers import SeamlessM4TFeatureExtractor

from ...runtime.features import KALDI_HOP as HOP
from ...runtime.features import KALDI_MEL_FLOOR as MEL_FLOOR
from ...runtime.features import KALDI_WINDOW as WINDOW
from ...runtime.features import STACK, kaldi_log_mel_numpy, stack_frames, stacked_fbank_numpy
from .registry import FeatureType, register_feature_type
from .waveform import WaveformFeatures

DIGITAL_SILENCE_MARGIN = 1.0
"""Nats above ``log(MEL_FLOOR)`` below which every bin of a unit marks it as digital silence."""
_PROBE_UNITS = 4096


def new_seamless_extractor(sampling_rate: int = 16000, n_mels: int = 80) -> Any:
    """A new ``SeamlessM4TFeatureExtractor`` with these settings, carrying ``feature_type`` and ``n_mels``."""
    return SeamlessM4TFeatureExtractor(
        feature_size=n_mels, num_mel_bins=n_mels, sampling_rate=sampling_rate, stride=STACK,
        feature_type=StackedFbankFeatures.name, n_mels=n_mels,
    )


@register_feature_type
class StackedFbankFeatures(FeatureType):
    """Kaldi log-mel bins stacked by 2 (w2v-BERT 2.0 / SeamlessM4T), see the module docstring."""

    name = "stacked_fbank"
    input_name = "input_features"
    stock_extractor = True
    stock_class = "SeamlessM4TFeatureExtractor"
    encoder_stride = STACK * HOP  # one encoder frame per unit: 20 ms
    normalizes_raw_units = False  # the mel bins are normalised over all frames (ddof=1) before stacking

    def build_stock_extractor(self) -> Any:
        """transformers' ``SeamlessM4TFeatureExtractor`` (``n_mels`` bins, stride 2)."""
        if self.sampling_rate != 16000:
            raise ValueError(f"feature_type={self.name!r} needs 16 kHz audio (transformers' extractor frames 400 / "
                             f"160 samples), got sampling_rate={self.sampling_rate}")
        return new_seamless_extractor(self.sampling_rate, self.n_mels)

    @property
    def feature_size(self) -> int:
        return STACK * self.n_mels

    @property
    def unit_window(self) -> int:
        return WINDOW + (STACK - 1) * HOP

    @property
    def unit_hop(self) -> int:
        return STACK * HOP

    def num_units(self, num_samples: int) -> int:
        frames = 1 + (num_samples - WINDOW) // HOP if num_samples >= WINDOW else 0
        return frames // STACK

    def raw(self, waveform: np.ndarray) -> np.ndarray:
        """``[N // 2, 2 n_mels]`` float32 log-mel energies, stacked."""
        return stack_frames(kaldi_log_mel_numpy(waveform, self.sampling_rate, self.n_mels))

    def extract(self, waveform: np.ndarray) -> np.ndarray:
        """``[N // 2, 2 n_mels]``: each mel bin normalised over all ``N`` frames (``ddof=1``) when ``do_normalize``,
        then stacked, as ``SeamlessM4TFeatureExtractor`` computes it."""
        return stacked_fbank_numpy(waveform, self.sampling_rate, self.n_mels, normalize=self.do_normalize)

    def empty(self) -> np.ndarray:
        return np.zeros((0, self.feature_size), np.float32)

    def dataset_feature(self) -> Any:
        return Array2D(shape=(None, self.feature_size), dtype="float32")

    def digital_silence(self, raw: np.ndarray) -> np.ndarray:
        """Units whose every bin lies within ``DIGITAL_SILENCE_MARGIN`` of ``log(MEL_FLOOR)``."""
        return raw.max(axis=1) <= math.log(MEL_FLOOR) + DIGITAL_SILENCE_MARGIN

    def inputs_to_logits_ratio(self, model: Any) -> int:
        """The 20-ms unit hop times the backbone's subsampling (none for w2v-BERT: 320)."""
        frames = int(model._get_feat_extract_output_lengths(_PROBE_UNITS))
        return self.unit_hop * round(_PROBE_UNITS / frames)

    def collate_input(self, row: Any) -> np.ndarray:
        """The row's ``input_features``, or for a row prepared as waveforms (``input_values``) its features computed
        here."""
        if self.input_name not in row and WaveformFeatures.input_name in row:
            return self.extract(np.asarray(row[WaveformFeatures.input_name], dtype=np.float32))
        return super().collate_input(row)
