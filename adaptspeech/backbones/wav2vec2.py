"""HF wav2vec2 / XLS-R / MMS encoders, both layer-norm variants."""

from __future__ import annotations

from typing import Any

from torch import nn
from transformers import PretrainedConfig, Wav2Vec2Model

from .base import BACKBONES, BackboneSpec


@BACKBONES.register("wav2vec2")
class Wav2Vec2Spec(BackboneSpec):
    """``Wav2Vec2Model``: post-LN layers (``do_stable_layer_norm=False``, base models) or pre-LN "stable" layers
    (``True``: XLS-R, MMS, large models). Adapters go after each layer's output, i.e. after the feed-forward block."""

    name = "wav2vec2"
    model_type = "wav2vec2"
    main_input_name = "input_values"
    attention_attr = "attention"

    def build_model(self, config: PretrainedConfig) -> Wav2Vec2Model:
        return Wav2Vec2Model(config)

    def load_pretrained(self, name_or_path: str, revision: str | None = None, **kwargs: Any) -> Wav2Vec2Model:
        return Wav2Vec2Model.from_pretrained(name_or_path, revision=revision, **kwargs)

    def ffn_input_module(self, layer: nn.Module) -> nn.Module:
        # stable-layer-norm layers normalise the FFN input with final_layer_norm; post-LN layers feed the FFN
        # with the output of layer_norm (applied after the attention residual).
        if type(layer).__name__.endswith("StableLayerNorm"):
            return layer.final_layer_norm
        return layer.layer_norm
