"""Backbone specs: HF wav2vec2 (both layer-norm variants), wav2vec2-conformer, w2v-BERT 2.0, and a from-scratch fbank
Conformer."""

from .base import BACKBONES, BackboneSpec, backbone_type_of_model_type, get_backbone_spec
from .conformer import Wav2Vec2ConformerSpec
from .fbank_conformer import FbankConformerConfig, FbankConformerModel, FbankConformerSpec
from .wav2vec2 import Wav2Vec2Spec
from .wav2vec2_bert import Wav2Vec2BertSpec

__all__ = [
    "BACKBONES",
    "BackboneSpec",
    "FbankConformerConfig",
    "FbankConformerModel",
    "FbankConformerSpec",
    "Wav2Vec2BertSpec",
    "Wav2Vec2ConformerSpec",
    "Wav2Vec2Spec",
    "backbone_type_of_model_type",
    "get_backbone_spec",
]
