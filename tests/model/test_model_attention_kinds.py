"""Every registered attention kind, chosen through AdaptSpeechConfig, saves, loads and trains with adapters and
fusion, for a wav2vec2 and a from-scratch conformer backbone."""

import pytest
import torch
from transformers import AutoModelForCTC

from adaptspeech import AdaptSpeechForCTC
from adaptspeech.attention import ATTENTION
from adaptspeech.testing import tiny_config, tiny_inputs

EXTRA = {"ldsa": {"context_width": 3}, "synthesizer_random": {"synthesizer_init": "fixed_patterns"}}


@pytest.mark.parametrize("backbone_type", ["wav2vec2", "fbank_conformer"])
@pytest.mark.parametrize("kind", ATTENTION.names())
def test_attention_kind_trains_saves_and_loads(tmp_path, backbone_type, kind):
    torch.manual_seed(0)
    attention = {"kind": kind, "layers": [1], **EXTRA.get(kind, {})}
    config = tiny_config(backbone_type, attention=attention, adapter_languages=["ro", "cs"],
                         adapter_defaults={"bottleneck": 8})
    model = AdaptSpeechForCTC(config)
    assert model.swapped_attention_layers == [1]
    model.add_fusion(["ro", "cs"], target_language="ro")
    model.set_trainable(adapters=["ro"], fusion=True, backbone=True)
    inputs = tiny_inputs(config)
    out = model(**inputs, labels=torch.tensor([[4, 5, 6], [5, 6, -100]]))
    out.loss.backward()
    attention_module = getattr(model.backbone.encoder.layers[1], config.backbone_spec.attention_attr)
    grads = [p.grad for p in attention_module.parameters() if p.requires_grad]
    assert grads and all(g is not None for g in grads)

    model.eval()
    expected = model(**inputs).logits
    model.save_pretrained(tmp_path)
    loaded = AutoModelForCTC.from_pretrained(tmp_path)
    loaded.eval()
    assert loaded.config.attention.kind == kind
    assert type(getattr(loaded.backbone.encoder.layers[1], config.backbone_spec.attention_attr)) is type(
        attention_module
    )
    assert torch.allclose(loaded(**inputs).logits, expected, atol=1e-6)


def test_unknown_attention_kind_is_refused_with_the_allowed_values():
    with pytest.raises(ValueError) as err:
        tiny_config(attention={"kind": "performer"})
    for name in ATTENTION.names():
        assert name in str(err.value)
