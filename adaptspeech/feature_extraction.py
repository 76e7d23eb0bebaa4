"""The feature extractor saved with an adaptspeech model, registered with transformers' Auto classes.

:class:`~adaptspeech.data.features.AdaptSpeechFeatureExtractor` computes the inputs ``adaptspeech prepare`` computes
(log-mel ``input_features`` for fbank models, normalised ``input_values`` for waveform models). Importing this
module (the model imports it) registers it with ``AutoFeatureExtractor`` (so a folder whose ``processor_config.json``
names it loads with ``AutoFeatureExtractor`` / ``AutoProcessor`` / ``Wav2Vec2Processor``) and ``Wav2Vec2Processor``
as the ``AutoProcessor`` of ``AdaptSpeechConfig``.
"""

from __future__ import annotations

from transformers import AutoFeatureExtractor, AutoProcessor, Wav2Vec2Processor

from .configuration import AdaptSpeechConfig
from .data.features import AdaptSpeechFeatureExtractor, upgrade_feature_extractor

__all__ = ["AdaptSpeechFeatureExtractor", "upgrade_feature_extractor"]

AutoFeatureExtractor.register(AdaptSpeechConfig, AdaptSpeechFeatureExtractor, exist_ok=True)
AutoProcessor.register(AdaptSpeechConfig, Wav2Vec2Processor, exist_ok=True)
