"""HF wav2vec2-conformer encoders (raw waveform front end)."""

from __future__ import annotations

from typing import Any

from torch import nn
from transformers import PretrainedConfig, Wav2Vec2ConformerModel

from .base import BACKBONES, BackboneSpec


@BACKBONES.register("wav2vec2_conformer")
class Wav2Vec2ConformerSpec(BackboneSpec):
    """``Wav2Vec2ConformerModel`` (relative, rotary or no position embeddings in the attention)."""

    name = "wav2vec2_conformer"
    model_type = "wav2vec2-conformer"
    main_input_name = "input_values"
    attention_attr = "self_attn"

    def build_model(self, config: PretrainedConfig) -> Wav2Vec2ConformerModel:
        return Wav2Vec2ConformerModel(config)

    def load_pretrained(self, name_or_path: str, revision: str | None = None, **kwargs: Any) -> Wav2Vec2ConformerModel:
        return Wav2Vec2ConformerModel.from_pretrained(name_or_path, revision=revision, **kwargs)

    def ffn_input_module(self, layer: nn.Module) -> nn.Module:
        # the second (macaron) feed-forward block is the one right before the layer output
        return layer.ffn2_layer_norm
