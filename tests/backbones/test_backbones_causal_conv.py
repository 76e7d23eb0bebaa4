"""``backbone_config.conv_lookahead``: the conformer convolution module's depthwise convolution made causal (0) or of
limited look-ahead (r frames), for the fbank Conformer and the wav2vec2-conformer."""

from __future__ import annotations

import pytest
import torch
from transformers import Wav2Vec2ConformerConfig
from transformers.models.wav2vec2_conformer.modeling_wav2vec2_conformer import Wav2Vec2ConformerConvolutionModule

from adaptspeech import AdaptSpeechForCTC
from adaptspeech.backbones.causal_conv import ChunkDepthwiseConv1d, set_conv_lookahead
from adaptspeech.testing import tiny_config, tiny_inputs

KERNEL = 7


def conv_module(lookahead: int | None) -> torch.nn.Module:
    torch.manual_seed(0)
    config = Wav2Vec2ConformerConfig(hidden_size=16, conv_depthwise_kernel_size=KERNEL, hidden_act="gelu")
    module = Wav2Vec2ConformerConvolutionModule(config).eval()
    set_conv_lookahead(torch.nn.ModuleList([torch.nn.Module()]), None)  # None: nothing to do, whatever the layers
    holder = torch.nn.Module()
    holder.conv_module = module
    set_conv_lookahead(torch.nn.ModuleList([holder]), lookahead)
    return module


@pytest.mark.parametrize("lookahead", [0, 1, 3])
def test_output_depends_on_at_most_lookahead_future_frames(lookahead: int) -> None:
    module = conv_module(lookahead)
    x = torch.randn(1, 20, 16)
    changed = x.clone()
    changed[:, 12:] = torch.randn(1, 8, 16)  # frames 12.. differ
    with torch.no_grad():
        a, b = module(x), module(changed)
    unaffected = 12 - lookahead  # frame t sees inputs up to t + lookahead
    assert torch.equal(a[:, :unaffected], b[:, :unaffected])  # literally the same computation on the same frames
    assert not torch.allclose(a[:, unaffected], b[:, unaffected])


def test_symmetric_lookahead_is_transformers_convolution() -> None:
    """Look-ahead (k-1)/2 is "same" padding: transformers' module with the same weights, to float rounding (explicit
    zero padding against the convolution's own)."""
    ours = conv_module((KERNEL - 1) // 2)
    theirs = conv_module(None)
    assert isinstance(ours.depthwise_conv, ChunkDepthwiseConv1d)
    theirs.load_state_dict(ours.state_dict())  # same keys and shapes
    x = torch.randn(2, 11, 16)
    with torch.no_grad():
        torch.testing.assert_close(ours(x), theirs(x), atol=1e-6, rtol=0)


@pytest.mark.parametrize("backbone_type", ["fbank_conformer", "wav2vec2_conformer"])
def test_causal_model_saves_and_loads(tmp_path, backbone_type: str) -> None:
    torch.manual_seed(0)
    config = tiny_config(backbone_type, backbone_overrides={"conv_lookahead": 0})
    model = AdaptSpeechForCTC(config).eval()
    layer = model._encoder_layers()[0]
    assert (layer.conv_module.depthwise_conv.left, layer.conv_module.depthwise_conv.right) == (2, 0)  # kernel 3
    model.save_pretrained(tmp_path)
    loaded = AdaptSpeechForCTC.from_pretrained(tmp_path).eval()
    inputs = tiny_inputs(config, batch=1, pad_last=False)
    with torch.no_grad():
        torch.testing.assert_close(loaded(**inputs).logits, model(**inputs).logits, atol=0, rtol=0)
    symmetric = AdaptSpeechForCTC(tiny_config(backbone_type))
    symmetric.load_state_dict(model.state_dict())  # the same keys: a symmetric model can be made causal


def test_bad_settings_are_refused() -> None:
    with pytest.raises(ValueError, match=r"backbone_config\.conv_lookahead must be null .* 1 \.\. 1 frames"):
        tiny_config("fbank_conformer", backbone_overrides={"conv_lookahead": 2})
    with pytest.raises(ValueError, match=r"conv_lookahead=0 applies to conformer backbones"):
        AdaptSpeechForCTC(tiny_config("wav2vec2", backbone_overrides={"conv_lookahead": 0}))
    with pytest.raises(ValueError, match=r"conv_lookahead must be null"):
        AdaptSpeechForCTC(tiny_config("wav2vec2_conformer", backbone_overrides={"conv_lookahead": -1}))


@pytest.mark.parametrize(
    ("backbone", "value", "message"),
    [
        ("fbank_conformer", "chunks", r"conv_lookahead must be null \(symmetric\), chunk \(dynamic chunk "
         r"convolution\), 0 \(causal\) or a look-ahead of 1 \.\. 1 frames \(conv_depthwise_kernel_size=3\), "
         r"got 'chunks'"),
        ("fbank_conformer", -1, r"conv_lookahead must be null .* got -1"),
        ("wav2vec2_conformer", "chunks", r"conv_lookahead must be null .* got 'chunks'"),
        ("wav2vec2_conformer", 2, r"1 \.\. 1 frames \(conv_depthwise_kernel_size=3\), got 2"),
        ("wav2vec2", "chunk", r"backbone_config\.conv_lookahead='chunk' applies to conformer backbones "
         r"\(fbank_conformer, wav2vec2_conformer\): these encoder layers have no convolution module"),
    ],
)
def test_bad_values_and_the_wav2vec2_backbone_are_refused_in_one_line(backbone, value, message) -> None:
    with pytest.raises(ValueError, match=message) as error:
        AdaptSpeechForCTC(tiny_config(backbone, backbone_overrides={"conv_lookahead": value}))
    assert "\n" not in str(error.value)
