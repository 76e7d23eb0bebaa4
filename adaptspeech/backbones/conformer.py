"""HF wav2vec2-conformer encoders (raw waveform front end)."""

from __future__ import annotations

from typing import Any

from torch import nn
from transformers import PretrainedConfig, Wav2Vec2ConformerModel

from .base import BACKBONES, BackboneSpec
from .stream_front_end import ConvStage, StreamFrontEnd


@BACKBONES.register("wav2vec2_conformer")
class Wav2Vec2ConformerSpec(BackboneSpec):
    """``Wav2Vec2ConformerModel`` (relative, rotary or no position embeddings in the attention)."""

    name = "wav2vec2_conformer"
    model_type = "wav2vec2-conformer"
    main_input_name = "input_values"
    attention_attr = "self_attn"
    own_settings = ("conv_lookahead",)

    def build_model(self, config: PretrainedConfig) -> Wav2Vec2ConformerModel:
        return Wav2Vec2ConformerModel(config)

    def load_pretrained(self, name_or_path: str, revision: str | None = None, **kwargs: Any) -> Wav2Vec2ConformerModel:
        return Wav2Vec2ConformerModel.from_pretrained(name_or_path, revision=revision, **kwargs)

    def ffn_input_module(self, layer: nn.Module) -> nn.Module:
        # the second (macaron) feed-forward block is the one right before the layer output
        return layer.ffn2_layer_norm

    def stream_refusal(self, model: Wav2Vec2ConformerModel) -> str:
        if model.config.feat_extract_norm != "layer":
            return (
                f"feat_extract_norm={model.config.feat_extract_norm!r}: the first convolution's GroupNorm normalises "
                "over the whole recording (a stream needs feat_extract_norm: layer, XLS-R's per-frame LayerNorm)"
            )
        return "its output adapter (add_adapter) is not streamed"

    def stream_front_end(self, model: Wav2Vec2ConformerModel) -> StreamFrontEnd:
        """The feature encoder's convolutions (each with its per-frame LayerNorm and activation) as
        :class:`ConvStage` without padding, then the feature projection: samples ``[B, 1, n]`` in, ``[B, m, D]`` out.
        Refused for the GroupNorm front end (it normalises over the whole recording) and an output adapter."""
        if model.config.feat_extract_norm != "layer" or model.adapter is not None:
            return super().stream_front_end(model)
        layers = model.feature_extractor.conv_layers
        stages = [ConvStage(layer, layer.conv.kernel_size[0], layer.conv.stride[0]) for layer in layers]
        return StreamFrontEnd(stages, lambda x: model.feature_projection(x)[0])
