"""Settings of a swapped attention that must not be dropped: the backbone's dropout is inherited unless set, and
``attention.num_heads`` is honoured (or refused where it cannot differ)."""

import pytest
import torch

from adaptspeech import AdaptSpeechForCTC
from adaptspeech.attention import ATTENTION
from adaptspeech.testing import tiny_config

EXTRA = {"ldsa": {"context_width": 3}}


def swapped(model, index=0):
    return getattr(model.config.backbone_spec.encoder_layers(model.backbone)[index],
                   model.config.backbone_spec.attention_attr)


@pytest.mark.parametrize("backbone_type", ["wav2vec2", "fbank_conformer"])
@pytest.mark.parametrize("kind", ATTENTION.names())
def test_swapped_attention_keeps_the_backbones_dropout_unless_set(backbone_type, kind):
    overrides = {"attention_dropout": 0.3}
    inherited = AdaptSpeechForCTC(tiny_config(backbone_type, backbone_overrides=overrides,
                                              attention={"kind": kind, **EXTRA.get(kind, {})}))
    assert swapped(inherited).dropout == pytest.approx(0.3)
    assert inherited.config.attention_config().dropout == pytest.approx(0.3)
    explicit = AdaptSpeechForCTC(tiny_config(backbone_type, backbone_overrides=overrides,
                                             attention={"kind": kind, "dropout": 0.05, **EXTRA.get(kind, {})}))
    assert swapped(explicit).dropout == pytest.approx(0.05)


def test_the_fbank_conformers_default_attention_dropout_survives_a_rel_pos_swap():
    config = tiny_config("fbank_conformer", backbone_overrides={"attention_dropout": 0.1},
                         attention={"kind": "rel_pos"})
    module = swapped(AdaptSpeechForCTC(config))
    assert module.dropout == pytest.approx(0.1)
    # and it acts: in training mode two calls differ, in eval mode they are equal
    x = torch.randn(1, 12, 32)
    module.train()
    assert not torch.equal(module(x)[0], module(x)[0])
    module.eval()
    assert torch.equal(module(x)[0], module(x)[0])


@pytest.mark.parametrize("kind", ["mhsa", "ldsa", "synthesizer_dense"])
def test_attention_num_heads_is_honoured(kind):
    config = tiny_config("wav2vec2", backbone_overrides={"num_attention_heads": 2},
                         attention={"kind": kind, "num_heads": 4, **EXTRA.get(kind, {})})
    assert config.attention_config().num_heads == 4
    assert swapped(AdaptSpeechForCTC(config)).num_heads == 4


def test_rel_pos_with_other_heads_than_a_pretrained_rel_pos_layer_is_refused():
    config = tiny_config("wav2vec2_conformer", attention={"kind": "rel_pos", "num_heads": 4})
    with pytest.raises(ValueError, match=r"num_heads=4 differs from the pretrained relative attention's 2 heads"):
        AdaptSpeechForCTC(config)
    model = AdaptSpeechForCTC(tiny_config("wav2vec2_conformer", attention={
        "kind": "rel_pos", "num_heads": 4, "init_from_pretrained": False}))
    assert swapped(model).num_heads == 4


def test_attention_dropout_out_of_range_is_refused():
    with pytest.raises(ValueError, match=r"attention.dropout must be a number in \[0, 1\) or null"):
        tiny_config(attention={"kind": "mhsa", "dropout": 1.5})
