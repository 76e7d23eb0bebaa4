"""HF wav2vec2 / XLS-R / MMS encoders, both layer-norm variants.

MMS checkpoints carry a built-in adapter (``config.adapter_attn_dim``): adaptspeech models take it out of the
backbone and hold it as an ordinary language adapter (:meth:`AdaptSpeechForCTC.from_backbone`,
:mod:`adaptspeech.adapters.mms`), so a backbone built from a config never has one.
"""

from __future__ import annotations

from typing import Any

from torch import nn
from transformers import AutoConfig, PretrainedConfig, Wav2Vec2ForCTC, Wav2Vec2Model

from .base import BACKBONES, BackboneSpec

XLSR_300M_BACKBONE: dict[str, Any] = {
    # facebook/wav2vec2-xls-r-300m's config.json: the shape ...
    "hidden_size": 1024,
    "num_hidden_layers": 24,
    "num_attention_heads": 16,
    "intermediate_size": 4096,
    "hidden_act": "gelu",
    "do_stable_layer_norm": True,
    "layer_norm_eps": 1e-5,
    "feat_extract_norm": "layer",
    "feat_extract_activation": "gelu",
    "conv_dim": [512] * 7,
    "conv_kernel": [10, 3, 3, 3, 3, 2, 2],
    "conv_stride": [5, 2, 2, 2, 2, 2, 2],
    "conv_bias": True,
    "num_conv_pos_embeddings": 128,
    "num_conv_pos_embedding_groups": 16,
    # ... and its regularisation, which fine-tuning from the checkpoint inherits
    "hidden_dropout": 0.1,
    "attention_dropout": 0.1,
    "activation_dropout": 0.0,
    "feat_proj_dropout": 0.0,
    "layerdrop": 0.1,
    "apply_spec_augment": True,
    "mask_time_prob": 0.075,
    "mask_time_length": 10,
    "mask_feature_prob": 0.0,
}
"""The ``backbone_config`` of ``facebook/wav2vec2-xls-r-300m`` (315M parameters), for building a model of its shape and
settings with random weights, without a download: wav2vec2 with stable (pre-) layer norm, 24 layers of width 1024, 16
heads, FFN 4096, the 7-layer convolutional feature encoder (512 channels, 320x downsampling: 50 frames per second of
16 kHz audio). The dry run of a recipe (:mod:`adaptspeech.recipes.simadapter.dry_run`) and the size and training-step
benchmarks (``scripts/adapter_size.py``, ``scripts/bench_training_step.py``) use it."""


@BACKBONES.register("wav2vec2")
class Wav2Vec2Spec(BackboneSpec):
    """``Wav2Vec2Model``: post-LN layers (``do_stable_layer_norm=False``, base models) or pre-LN "stable" layers
    (``True``: XLS-R, MMS, large models). Adapters go after each layer's output, i.e. after the feed-forward block."""

    name = "wav2vec2"
    model_type = "wav2vec2"
    main_input_name = "input_values"
    attention_attr = "attention"

    def build_model(self, config: PretrainedConfig) -> Wav2Vec2Model:
        if getattr(config, "adapter_attn_dim", None) is not None:
            raise ValueError(
                f"backbone_config.adapter_attn_dim={config.adapter_attn_dim}: MMS's built-in adapter would run beside "
                "adaptspeech's adapters; wrap an MMS checkpoint with from_backbone (its adapter becomes a language "
                "adapter) or set adapter_attn_dim to null"
            )
        return Wav2Vec2Model(config)

    def load_pretrained(self, name_or_path: str, revision: str | None = None, **kwargs: Any) -> Wav2Vec2Model:
        return Wav2Vec2Model.from_pretrained(name_or_path, revision=revision, **kwargs)

    def load_pretrained_with_head(
        self, name_or_path: str, revision: str | None = None, **kwargs: Any
    ) -> tuple[Wav2Vec2Model, nn.Linear | None]:
        """The encoder and, for a ``Wav2Vec2ForCTC`` checkpoint (e.g. MMS), its ``lm_head`` (else None); the
        weights are read once."""
        architectures = AutoConfig.from_pretrained(name_or_path, revision=revision).architectures or []
        if "Wav2Vec2ForCTC" not in architectures:
            return self.load_pretrained(name_or_path, revision=revision, **kwargs), None
        ctc = Wav2Vec2ForCTC.from_pretrained(name_or_path, revision=revision, **kwargs)
        return ctc.wav2vec2, ctc.lm_head

    def stream_refusal(self, model: Wav2Vec2Model) -> str:
        return (
            f"its convolutional position embedding (kernel {model.config.num_conv_pos_embeddings}) looks "
            f"{model.config.num_conv_pos_embeddings // 2} frames ahead in the whole recording (streaming backbones: "
            "fbank_conformer, wav2vec2_conformer)"
        )

    def ffn_input_module(self, layer: nn.Module) -> nn.Module:
        # stable-layer-norm layers normalise the FFN input with final_layer_norm; post-LN layers feed the FFN
        # with the output of layer_norm (applied after the attention residual).
        if type(layer).__name__.endswith("StableLayerNorm"):
            return layer.final_layer_norm
        return layer.layer_norm
