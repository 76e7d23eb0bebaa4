"""HF w2v-BERT 2.0 encoders (``facebook/w2v-bert-2.0``: transformers' ``Wav2Vec2BertModel``).

A Conformer over 80 Kaldi log-mel bins stacked by 2 (160 features every 20 ms, transformers'
``SeamlessM4TFeatureExtractor``; the feature type ``stacked_fbank``): a LayerNorm + Linear feature projection, then
conformer layers (macaron feed-forward, self-attention with Shaw relative-key positions clipped at 64 frames left and
8 right, a *causal* depthwise convolution of kernel 31: transformers pads ``k - 1`` frames on the left only), each
closed by its own LayerNorm, no final encoder LayerNorm.

transformers' ``add_adapter=True`` on this model is not a language adapter: it is a stack of strided convolutions
(and attention) that downsamples the encoder output for a sequence-to-sequence decoder. adaptspeech's language
adapters go inside every layer instead; a checkpoint with ``add_adapter`` is refused (one line), as is
``conv_lookahead`` (the convolution is causal already).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn
from transformers import AutoConfig, PretrainedConfig, Wav2Vec2BertForCTC, Wav2Vec2BertModel

from .base import BACKBONES, BackboneSpec

W2V_BERT_2_BACKBONE: dict[str, Any] = {
    # facebook/w2v-bert-2.0's config.json: the shape ...
    "hidden_size": 1024,
    "num_hidden_layers": 24,
    "num_attention_heads": 16,
    "intermediate_size": 4096,
    "feature_projection_input_dim": 160,
    "hidden_act": "swish",
    "layer_norm_eps": 1e-5,
    "position_embeddings_type": "relative_key",
    "left_max_position_embeddings": 64,
    "right_max_position_embeddings": 8,
    "conv_depthwise_kernel_size": 31,
    "add_adapter": False,
    "use_intermediate_ffn_before_adapter": False,
    # ... and its regularisation, which fine-tuning from the checkpoint inherits
    "hidden_dropout": 0.0,
    "attention_dropout": 0.0,
    "activation_dropout": 0.0,
    "feat_proj_dropout": 0.0,
    "conformer_conv_dropout": 0.1,
    "layerdrop": 0.1,
    "apply_spec_augment": True,
    "mask_time_prob": 0.05,
    "mask_time_length": 10,
    "mask_feature_prob": 0.0,
}
"""The ``backbone_config`` of ``facebook/w2v-bert-2.0`` (580M parameters) for building a model of its shape with random
weights, without a download: 24 conformer layers of width 1024, 16 heads, FFN 4096, relative-key positions clipped at
64 / 8, depthwise kernel 31, 160 input features (80 mel bins stacked by 2: 50 frames per second of 16 kHz audio). The
dry run and the training-step benchmark (``scripts/bench_training_step.py --shape w2v-bert``) use it."""


def refusal(config: PretrainedConfig | dict[str, Any]) -> str | None:
    """Why adaptspeech cannot wrap a w2v-BERT config (None when it can)."""
    get = config.get if isinstance(config, dict) else lambda key, default=None: getattr(config, key, default)
    if get("add_adapter", False):
        return (
            "backbone_config.add_adapter=true: w2v-BERT's add_adapter is a convolutional downsampling network on top "
            "of the encoder, not a language adapter; adaptspeech puts language adapters in every layer instead: set "
            "add_adapter to false"
        )
    if get("conv_lookahead", None) is not None:
        return (
            f"backbone_config.conv_lookahead={get('conv_lookahead')!r}: w2v-BERT's depthwise convolution is causal "
            "already (transformers pads kernel - 1 frames on the left only); remove the setting"
        )
    return None


@BACKBONES.register("wav2vec2_bert")
class Wav2Vec2BertSpec(BackboneSpec):
    """``Wav2Vec2BertModel`` (w2v-BERT 2.0): stacked-fbank input, conformer layers; adapters go after each layer's
    final LayerNorm, the SimAdapter residual is the second feed-forward block's LayerNorm output."""

    name = "wav2vec2_bert"
    model_type = "wav2vec2-bert"
    main_input_name = "input_features"
    attention_attr = "self_attn"
    feature_type = "stacked_fbank"

    def build_config(self, backbone_config: dict[str, Any] | PretrainedConfig | None) -> PretrainedConfig:
        config = super().build_config(backbone_config)
        reason = refusal(config)
        if reason is not None:
            raise ValueError(f"wav2vec2_bert: {reason}")
        return config

    def build_model(self, config: PretrainedConfig) -> Wav2Vec2BertModel:
        return Wav2Vec2BertModel(self.build_config(config))

    def load_pretrained(self, name_or_path: str, revision: str | None = None, **kwargs: Any) -> Wav2Vec2BertModel:
        return self.load_pretrained_with_head(name_or_path, revision=revision, **kwargs)[0]

    def load_pretrained_with_head(
        self, name_or_path: str, revision: str | None = None, **kwargs: Any
    ) -> tuple[Wav2Vec2BertModel, nn.Linear | None]:
        """The encoder and, for a ``Wav2Vec2BertForCTC`` checkpoint, its ``lm_head`` (else None); the config is
        checked (:func:`refusal`) before any weight is read."""
        config = AutoConfig.from_pretrained(name_or_path, revision=revision)
        reason = refusal(config)
        if reason is not None:
            raise ValueError(f"{name_or_path}: {reason}")
        if "Wav2Vec2BertForCTC" in (config.architectures or []):
            ctc = Wav2Vec2BertForCTC.from_pretrained(name_or_path, revision=revision, **kwargs)
            return ctc.wav2vec2_bert, ctc.lm_head
        return Wav2Vec2BertModel.from_pretrained(name_or_path, revision=revision, **kwargs), None

    def ffn_input_module(self, layer: nn.Module) -> nn.Module:
        # the second (macaron) feed-forward block is the one right before the layer's final LayerNorm
        return layer.ffn2_layer_norm

    def finish_encoder(self, model: Wav2Vec2BertModel, hidden: torch.Tensor) -> torch.Tensor:
        """The optional ``intermediate_ffn`` of transformers' forward (``add_adapter`` is refused)."""
        if model.intermediate_ffn is not None:
            hidden = hidden + 0.5 * model.intermediate_ffn(hidden)
        return hidden

    def num_frames(self, model: Wav2Vec2BertModel, num_units: int) -> int:
        return num_units  # one encoder frame per stacked feature frame (add_adapter is refused)

    def stream_refusal(self, model: Wav2Vec2BertModel) -> str:
        config = model.config
        return (
            "every layer's self-attention reads the whole recording (its relative-key positions are clipped at "
            f"{config.left_max_position_embeddings} left / {config.right_max_position_embeddings} right, the "
            "attention span is not), and the feature extractor normalises each mel bin over the whole recording "
            "(streaming backbones: fbank_conformer, wav2vec2_conformer)"
        )
