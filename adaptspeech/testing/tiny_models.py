"""Tiny configurations for tests, examples and smoke runs (seconds on a CPU, no download)."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from ..configuration import AdaptSpeechConfig
from ..data.feature_types import FEATURE_TYPES, FeatureType, feature_type_of_model
from ..data.processor import build_processor
from ..data.text import build_vocab
from ..heads import get_head

#: the encoder every tiny backbone has: width 32, 2 layers, 2 heads, feed-forward 64, dropout off
_ENCODER: dict[str, Any] = dict(
    hidden_size=32,
    num_hidden_layers=2,
    num_attention_heads=2,
    intermediate_size=64,
    hidden_dropout=0.0,
    attention_dropout=0.0,
    activation_dropout=0.0,
)
#: ... with the wav2vec2 front end both wav2vec2 backbones share (LayerDrop and masking off)
_WAV2VEC2: dict[str, Any] = dict(
    _ENCODER,
    conv_dim=(16, 16),
    conv_kernel=(10, 3),
    conv_stride=(5, 2),
    num_conv_pos_embeddings=16,
    num_conv_pos_embedding_groups=2,
    feat_proj_dropout=0.0,
    layerdrop=0.0,
    mask_time_prob=0.0,
)

#: ``backbone_overrides`` giving a tiny wav2vec2 front end the real models' 320x downsampling (20-ms frames, 50 a
#: second) on three convolutions, for tests that run long inputs (30 s: 1500 frames, not 48000)
FRONT_END_320X: dict[str, Any] = dict(conv_dim=(16, 16, 16), conv_kernel=(10, 8, 4), conv_stride=(5, 8, 8))

TINY_BACKBONES: dict[str, dict[str, Any]] = {
    "wav2vec2": dict(_WAV2VEC2, do_stable_layer_norm=False),
    "wav2vec2_conformer": dict(_WAV2VEC2, conv_depthwise_kernel_size=3, position_embeddings_type="relative"),
    "fbank_conformer": dict(_ENCODER, num_mel_bins=16, conv_depthwise_kernel_size=3),
    # w2v-BERT 2.0's layer at width 32: relative-key positions clipped at 4 left / 2 right (64 / 8 in the real model)
    "wav2vec2_bert": dict(_ENCODER, feature_projection_input_dim=160, conv_depthwise_kernel_size=3,
                          left_max_position_embeddings=4, right_max_position_embeddings=2, feat_proj_dropout=0.0,
                          conformer_conv_dropout=0.0, layerdrop=0.0, mask_time_prob=0.0),
}


#: the attention of a tiny model that can stream (``save_tiny_model(..., streaming=True)``)
STREAMING_ATTENTION: dict[str, Any] = {"kind": "rel_pos", "dynamic_chunks": True}


def tiny_config(backbone_type: str = "wav2vec2", stable_layer_norm: bool = False, **kwargs: Any) -> AdaptSpeechConfig:
    """A tiny :class:`AdaptSpeechConfig` (width 32, 2 layers, vocabulary 12 unless overridden)."""
    backbone = dict(TINY_BACKBONES[backbone_type])
    if backbone_type == "wav2vec2":
        backbone["do_stable_layer_norm"] = stable_layer_norm
    backbone.update(kwargs.pop("backbone_overrides", {}))
    kwargs.setdefault("vocab_size", 12)
    return AdaptSpeechConfig(backbone_type=backbone_type, backbone_config=backbone, **kwargs)


def tiny_inputs(
    config: AdaptSpeechConfig, batch: int = 2, seconds: float = 0.25, seed: int = 0, pad_last: bool = True
) -> dict[str, torch.Tensor]:
    """Random inputs for ``config``'s backbone, in the feature type it reads: waveform samples ``[B, S]`` or frames
    ``[B, frames, mel bins]`` (100 a second), with the last utterance shortened by padding (and its ``attention_mask``
    ``[B, units]``)."""
    gen = torch.Generator().manual_seed(seed)
    features = _feature_type(config)
    length = int(seconds * (features.sampling_rate // features.unit_hop))
    shape = (batch, length, features.feature_size) if features.framed else (batch, length)
    inputs = {features.input_name: torch.randn(*shape, generator=gen)}
    mask = torch.ones(batch, length, dtype=torch.bool)
    if pad_last and batch > 1:
        mask[-1, int(length * 0.7) :] = False
        inputs[features.input_name][-1, int(length * 0.7) :] = 0.0
    inputs["attention_mask"] = mask
    return inputs


def _feature_type(config: AdaptSpeechConfig) -> FeatureType:
    """The feature type ``config``'s backbone reads (with its mel bins where it has them)."""
    kind = FEATURE_TYPES.get(feature_type_of_model(config.backbone_spec))
    return kind(n_mels=getattr(config.backbone_config, "num_mel_bins", FeatureType.n_mels))


def save_tiny_model(
    folder: str | os.PathLike[str],
    backbone_type: str = "fbank_conformer",
    head: str = "ctc",
    languages: Sequence[str] = ("ro", "cs"),
    texts: Sequence[str] = ("abc def", "ghi jkl"),
    seed: int = 0,
    streaming: bool = False,
) -> Path:
    """Write a random tiny model and its processor into ``folder``, laid out as ``adaptspeech train`` writes a model
    folder (``config.json``, the weights, the tokenizer and feature extractor): for examples and tests that need a
    model folder, not a trained model (its text is a guess). Returns the folder.

    Args:
        folder: where to write (created).
        backbone_type: ``fbank_conformer`` (log-mel input, 16 mel bins), ``wav2vec2`` / ``wav2vec2_conformer``
            (waveform input) or ``wav2vec2_bert`` (80 mel bins stacked by 2).
        head: ``ctc``, ``las`` or ``ctc_las``.
        languages: languages with an adapter (none active).
        texts: the text whose characters make the vocabulary.
        seed: the seed of the random weights.
        streaming: a model that can stream (conformer backbones): ``rel_pos`` attention trained with dynamic chunks
            and a causal convolution (``backbone_config.conv_lookahead: 0``).
    """
    vocab = build_vocab(list(texts))
    extra: dict[str, Any] = {}
    if streaming:
        extra = dict(attention=STREAMING_ATTENTION, backbone_overrides={"conv_lookahead": 0})
        if backbone_type == "wav2vec2_conformer":
            extra["backbone_overrides"]["feat_extract_norm"] = "layer"
    config = tiny_config(backbone_type, vocab_size=len(vocab), adapter_languages=list(languages), head=head, **extra)
    features = _feature_type(config)
    build_processor(vocab, folder, feature_type=features.name, n_mels=features.n_mels)
    torch.manual_seed(seed)
    get_head(head).model_class(config).eval().save_pretrained(folder)
    return Path(folder)
