"""Tiny configurations for tests, examples and smoke runs (seconds on a CPU, no download)."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from .configuration import AdaptSpeechConfig

TINY_BACKBONES: dict[str, dict[str, Any]] = {
    "wav2vec2": dict(
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        conv_dim=(16, 16),
        conv_kernel=(10, 3),
        conv_stride=(5, 2),
        num_conv_pos_embeddings=16,
        num_conv_pos_embedding_groups=2,
        do_stable_layer_norm=False,
        hidden_dropout=0.0,
        attention_dropout=0.0,
        activation_dropout=0.0,
        feat_proj_dropout=0.0,
        layerdrop=0.0,
        mask_time_prob=0.0,
    ),
    "wav2vec2_conformer": dict(
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        conv_dim=(16, 16),
        conv_kernel=(10, 3),
        conv_stride=(5, 2),
        num_conv_pos_embeddings=16,
        num_conv_pos_embedding_groups=2,
        conv_depthwise_kernel_size=3,
        position_embeddings_type="relative",
        hidden_dropout=0.0,
        attention_dropout=0.0,
        activation_dropout=0.0,
        feat_proj_dropout=0.0,
        layerdrop=0.0,
        mask_time_prob=0.0,
    ),
    "fbank_conformer": dict(
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        num_mel_bins=16,
        conv_depthwise_kernel_size=3,
        hidden_dropout=0.0,
        attention_dropout=0.0,
        activation_dropout=0.0,
    ),
}


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
    """Random inputs for ``config``'s backbone with the last utterance shortened by padding."""
    gen = torch.Generator().manual_seed(seed)
    if config.backbone_type == "fbank_conformer":
        frames = int(seconds * 100)
        inputs = {"input_features": torch.randn(batch, frames, config.backbone_config.num_mel_bins, generator=gen)}
        length = frames
    else:
        length = int(seconds * 16000)
        inputs = {"input_values": torch.randn(batch, length, generator=gen)}
    mask = torch.ones(batch, length, dtype=torch.bool)
    if pad_last and batch > 1:
        mask[-1, int(length * 0.7) :] = False
        key = next(iter(inputs))
        inputs[key][-1, int(length * 0.7) :] = 0.0
    inputs["attention_mask"] = mask
    return inputs


def save_tiny_model(
    folder: str | os.PathLike[str],
    backbone_type: str = "fbank_conformer",
    head: str = "ctc",
    languages: Sequence[str] = ("ro", "cs"),
    texts: Sequence[str] = ("abc def", "ghi jkl"),
    seed: int = 0,
) -> Path:
    """Write a random tiny model and its processor into ``folder``, laid out as ``adaptspeech train`` writes a model
    folder (``config.json``, the weights, the tokenizer and feature extractor): for examples and tests that need a
    model folder, not a trained model (its text is a guess). Returns the folder.

    Args:
        folder: where to write (created).
        backbone_type: ``fbank_conformer`` (log-mel input, 16 mel bins) or ``wav2vec2`` / ``wav2vec2_conformer``
            (waveform input).
        head: ``ctc``, ``las`` or ``ctc_las``.
        languages: languages with an adapter (none active).
        texts: the text whose characters make the vocabulary.
        seed: the seed of the random weights.
    """
    from .data.processor import build_processor
    from .data.text import build_vocab
    from .heads import get_head

    vocab = build_vocab(list(texts))
    feature_type = "fbank" if backbone_type == "fbank_conformer" else "waveform"
    build_processor(vocab, folder, feature_type=feature_type, n_mels=TINY_BACKBONES["fbank_conformer"]["num_mel_bins"])
    config = tiny_config(backbone_type, vocab_size=len(vocab), adapter_languages=list(languages), head=head)
    torch.manual_seed(seed)
    get_head(head).model_class(config).eval().save_pretrained(folder)
    return Path(folder)
