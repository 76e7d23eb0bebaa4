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

    def ffn_input_module(self, layer: nn.Module) -> nn.Module:
        # stable-layer-norm layers normalise the FFN input with final_layer_norm; post-LN layers feed the FFN
        # with the output of layer_norm (applied after the attention residual).
        if type(layer).__name__.endswith("StableLayerNorm"):
            return layer.final_layer_norm
        return layer.layer_norm
