"""A small from-scratch Conformer over log-mel filterbanks, for training on CPU and for the offline demo.

80-dim log-mel features (10 ms hop) -> two Conv1d layers of stride 2 (40 ms frames, 25 Hz) -> Linear projection ->
transformers' ``Wav2Vec2ConformerEncoder`` (so the same layer surgery, adapters and attention swaps apply as for the
pretrained wav2vec2-conformer). DESIGN measured this front end at 75-98 utterances/s on 2 cores versus 8-28 for the
raw-waveform wav2vec2 front end.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn
from transformers import AutoConfig, Wav2Vec2ConformerConfig
from transformers.modeling_outputs import BaseModelOutput
from transformers.models.wav2vec2_conformer.modeling_wav2vec2_conformer import (
    Wav2Vec2ConformerEncoder,
    Wav2Vec2ConformerPreTrainedModel,
)

from .base import BACKBONES, BackboneSpec
from .causal_conv import check_conv_lookahead
from .conv_padding import frame_padding, mask_convolution_padding
from .stream_front_end import ConvStage, StreamFrontEnd


class FbankConformerConfig(Wav2Vec2ConformerConfig):
    """``Wav2Vec2ConformerConfig`` plus the filterbank front end.

    Args:
        num_mel_bins (`int`, defaults to 80): input feature dimension.
        subsampling_kernel (`int`, defaults to 3): kernel of the two stride-2 Conv1d layers.
        spec_augment_time_masks / spec_augment_time_width / spec_augment_freq_masks / spec_augment_freq_width:
            SpecAugment on the filterbanks during training (0 masks = off).
        conv_lookahead (`int` or `"chunk"`, *optional*): right context of the conformer layers' depthwise
            convolution: None (symmetric, transformers' "same" padding), "chunk" (dynamic chunk convolution: the
            symmetric kernel masked past the end of the running chunk; streamable), 0 (causal: streamable) or
            1 .. (k-1)/2 frames (:mod:`adaptspeech.backbones.causal_conv`).
        All other arguments as in ``Wav2Vec2ConformerConfig`` (hidden_size, num_hidden_layers, ...). Defaults here
        are the small CPU model DESIGN measured: width 144, 4 layers, 4 heads, FFN 576.
    """

    model_type = "adaptspeech_fbank_conformer"

    def __init__(
        self,
        num_mel_bins: int = 80,
        subsampling_kernel: int = 3,
        spec_augment_time_masks: int = 0,
        spec_augment_time_width: int = 20,
        spec_augment_freq_masks: int = 0,
        spec_augment_freq_width: int = 10,
        hidden_size: int = 144,
        num_hidden_layers: int = 4,
        num_attention_heads: int = 4,
        intermediate_size: int = 576,
        conv_depthwise_kernel_size: int = 15,
        position_embeddings_type: str | None = "relative",
        conv_lookahead: int | str | None = None,
        **kwargs: Any,
    ) -> None:
        kwargs.setdefault("hidden_dropout", 0.1)
        kwargs.setdefault("attention_dropout", 0.1)
        kwargs.setdefault("activation_dropout", 0.1)
        kwargs.setdefault("layerdrop", 0.0)
        super().__init__(
            hidden_size=hidden_size,
            num_hidden_layers=num_hidden_layers,
            num_attention_heads=num_attention_heads,
            intermediate_size=intermediate_size,
            conv_depthwise_kernel_size=conv_depthwise_kernel_size,
            position_embeddings_type=position_embeddings_type,
            **kwargs,
        )
        if num_mel_bins < 1:
            raise ValueError(f"num_mel_bins must be positive, got {num_mel_bins}")
        self.num_mel_bins = num_mel_bins
        self.subsampling_kernel = subsampling_kernel
        self.spec_augment_time_masks = spec_augment_time_masks
        self.spec_augment_time_width = spec_augment_time_width
        self.spec_augment_freq_masks = spec_augment_freq_masks
        self.spec_augment_freq_width = spec_augment_freq_width
        check_conv_lookahead(conv_lookahead, conv_depthwise_kernel_size)
        if conv_lookahead is not None:  # absent when unset: existing config.json files are written back unchanged
            self.conv_lookahead = conv_lookahead


AutoConfig.register(FbankConformerConfig.model_type, FbankConformerConfig)


class FbankSubsampling(nn.Module):
    """Two Conv1d(stride 2) + GELU: [B, T, F] -> [B, ceil(T/4), D]."""

    def __init__(self, config: FbankConformerConfig) -> None:
        super().__init__()
        k = config.subsampling_kernel
        self.conv1 = nn.Conv1d(config.num_mel_bins, config.hidden_size, k, stride=2, padding=k // 2)
        self.conv2 = nn.Conv1d(config.hidden_size, config.hidden_size, k, stride=2, padding=k // 2)
        self.act = nn.GELU()
        self.projection = nn.Linear(config.hidden_size, config.hidden_size)
        self.dropout = nn.Dropout(config.hidden_dropout)

    def forward(self, features: torch.Tensor, lengths: torch.Tensor | None = None) -> torch.Tensor:
        """``features`` [B, T, F] (``lengths`` [B] real frames, None: no padding) -> [B, ceil(T/4), D].

        With ``lengths``, the frames past each utterance's end are zeroed before each convolution, so that a padded
        utterance's last frames see the zeros the convolution pads with, exactly as when it is alone (after the
        first convolution the padding would otherwise hold ``GELU(bias)``)."""
        x = features.transpose(1, 2)  # [B, F, T]
        for conv in (self.conv1, self.conv2):
            if lengths is not None:
                real = torch.arange(x.shape[-1], device=x.device)[None, :] < lengths[:, None]  # [B, T]
                x = x * real.unsqueeze(1).to(x.dtype)
                lengths = (lengths + 2 * conv.padding[0] - conv.kernel_size[0]) // conv.stride[0] + 1
            x = self.act(conv(x))
        return self.dropout(self.projection(x.transpose(1, 2)))


def spec_augment(features: torch.Tensor, config: FbankConformerConfig) -> torch.Tensor:
    """Time and frequency masking (SpecAugment) of [B, T, F] features, masked to zero."""
    if config.spec_augment_time_masks == 0 and config.spec_augment_freq_masks == 0:
        return features
    features = features.clone()
    batch, frames, bins = features.shape
    for b in range(batch):
        for _ in range(config.spec_augment_freq_masks):
            width = int(torch.randint(0, config.spec_augment_freq_width + 1, ()))
            start = int(torch.randint(0, max(1, bins - width), ()))
            features[b, :, start : start + width] = 0.0
        for _ in range(config.spec_augment_time_masks):
            width = int(torch.randint(0, min(config.spec_augment_time_width, frames // 5) + 1, ()))
            start = int(torch.randint(0, max(1, frames - width), ()))
            features[b, start : start + width, :] = 0.0
    return features


class FbankConformerModel(Wav2Vec2ConformerPreTrainedModel):
    """Filterbank Conformer encoder; returns ``BaseModelOutput(last_hidden_state [B, T/4, D])``.

    Subclasses transformers' conformer base class to reuse its weight initialisation (including the relative
    position table, a non-persistent buffer that must be rebuilt after loading).
    """

    config_class = FbankConformerConfig
    base_model_prefix = "fbank_conformer"
    main_input_name = "input_features"
    supports_gradient_checkpointing = True
    _supports_sdpa = True
    _supports_flash_attn = True

    def __init__(self, config: FbankConformerConfig) -> None:
        super().__init__(config)
        self.subsampling = FbankSubsampling(config)
        self.encoder = Wav2Vec2ConformerEncoder(config)
        # transformers' conformer encoder builds a convolutional position embedding that its forward never calls;
        # drop it so that it neither counts as trainable nor leaves DDP with unused parameters
        del self.encoder.pos_conv_embed
        mask_convolution_padding(self.encoder.layers)
        self.post_init()

    def _get_feat_extract_output_lengths(
        self, input_lengths: torch.Tensor | int, add_adapter: bool | None = None
    ) -> torch.Tensor | int:
        """Frames after the two stride-2 convolutions (padding k//2): ``L -> (L - 1)//2 + 1`` twice."""
        k = self.config.subsampling_kernel
        pad = k // 2
        for _ in range(2):
            input_lengths = (input_lengths + 2 * pad - k) // 2 + 1
        return input_lengths

    def freeze_feature_encoder(self) -> None:
        for p in self.subsampling.parameters():
            p.requires_grad = False

    def forward(
        self,
        input_features: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        **kwargs: Any,
    ) -> BaseModelOutput:
        """``input_features`` [B, T, F]; ``attention_mask`` [B, T] (1/True on real frames)."""
        if self.training:
            input_features = spec_augment(input_features, self.config)
        input_lengths = None if attention_mask is None else attention_mask.sum(-1)
        hidden_states = self.subsampling(input_features, input_lengths)
        frame_mask = None
        if attention_mask is not None:
            lengths = self._get_feat_extract_output_lengths(input_lengths)
            frame_mask = torch.arange(hidden_states.shape[1], device=hidden_states.device)[None] < lengths[:, None]
        with frame_padding(frame_mask):  # the conformer convolutions see zeros where the padding is
            return self.encoder(hidden_states, attention_mask=frame_mask, **kwargs)


@BACKBONES.register("fbank_conformer")
class FbankConformerSpec(BackboneSpec):
    """From-scratch filterbank Conformer (see module docstring)."""

    name = "fbank_conformer"
    model_type = FbankConformerConfig.model_type
    main_input_name = "input_features"
    attention_attr = "self_attn"

    def build_model(self, config: FbankConformerConfig) -> FbankConformerModel:
        return FbankConformerModel(config)

    def load_pretrained(self, name_or_path: str, revision: str | None = None, **kwargs: Any) -> FbankConformerModel:
        return FbankConformerModel.from_pretrained(name_or_path, revision=revision, **kwargs)

    def ffn_input_module(self, layer: nn.Module) -> nn.Module:
        return layer.ffn2_layer_norm

    def num_frames(self, model: FbankConformerModel, num_units: int) -> int:
        return model._get_feat_extract_output_lengths(num_units)  # Python integer arithmetic already

    def stream_front_end(self, model: FbankConformerModel) -> StreamFrontEnd:
        """The two stride-2 convolutions (+ GELU) as :class:`ConvStage`, then the projection: filterbank frames
        ``[B, F, n]`` in, ``[B, m, D]`` out (encoder frame ``u`` once filterbank frame ``4u + 3`` is in)."""
        sub = model.subsampling

        def stage(conv: nn.Conv1d) -> ConvStage:
            def run(x: torch.Tensor) -> torch.Tensor:
                return sub.act(nn.functional.conv1d(x, conv.weight, conv.bias, stride=conv.stride))

            return ConvStage(run, conv.kernel_size[0], conv.stride[0], conv.padding[0])

        return StreamFrontEnd([stage(sub.conv1), stage(sub.conv2)], lambda x: sub.dropout(sub.projection(x)))
