"""Feature types as a registry of classes (:mod:`.registry`): :class:`~.waveform.WaveformFeatures` (``"waveform"``)
and :class:`~.fbank.FbankFeatures` (``"fbank"``), :class:`~.stacked_fbank.StackedFbankFeatures` (``"stacked_fbank"``,
w2v-BERT 2.0). A new type is its own module plus one registration."""

from .fbank import FbankFeatures
from .registry import (
    DEFAULT_FEATURE_TYPE,
    FEATURE_TYPES,
    FeatureType,
    feature_type_of,
    feature_type_of_model,
    normalize_utterance,
    register_feature_type,
)
from .stacked_fbank import StackedFbankFeatures
from .waveform import WaveformFeatures

__all__ = [
    "DEFAULT_FEATURE_TYPE",
    "FEATURE_TYPES",
    "FbankFeatures",
    "FeatureType",
    "StackedFbankFeatures",
    "WaveformFeatures",
    "feature_type_of",
    "feature_type_of_model",
    "normalize_utterance",
    "register_feature_type",
]
