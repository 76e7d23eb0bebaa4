"""save_pretrained / from_pretrained restore backbone, adapters, fusion and head with identical logits."""

import pytest
import torch
from transformers import AutoModelForCTC

from adaptspeech import AdaptSpeechForCTC
from adaptspeech.testing import tiny_config, tiny_inputs

BACKBONES = [
    ("wav2vec2", False),
    ("wav2vec2", True),
    ("wav2vec2_conformer", False),
    ("fbank_conformer", False),
    ("wav2vec2_bert", False),
]


@pytest.mark.parametrize(("backbone_type", "stable"), BACKBONES)
def test_round_trip_identical_logits(tmp_path, backbone_type, stable):
    torch.manual_seed(0)
    config = tiny_config(
        backbone_type,
        stable_layer_norm=stable,
        adapter_languages=["ro", "cs", "pl"],
        adapter_defaults={"bottleneck": 8},
    )
    model = AdaptSpeechForCTC(config)
    model.add_fusion(["ro", "cs", "pl"], target_language="ro")
    with torch.no_grad():  # move W_V away from its initialisation so that the check means something
        for block in model.adapter_blocks.values():
            block.fusion.linear_v.weight.add_(0.01 * torch.randn_like(block.fusion.linear_v.weight))
    model.eval()
    inputs = tiny_inputs(config)
    expected = model(**inputs, output_fusion_weights=True)

    model.save_pretrained(tmp_path)
    loaded = AutoModelForCTC.from_pretrained(tmp_path)
    assert type(loaded) is AdaptSpeechForCTC
    loaded.eval()
    got = loaded(**inputs, output_fusion_weights=True)
    assert torch.equal(got.logits, expected.logits)
    for a, b in zip(got.fusion_weights, expected.fusion_weights, strict=True):
        assert torch.equal(a, b)
    assert loaded.config.fusion_active and loaded.config.active_languages == ["ro", "cs", "pl"]
    original = model.state_dict()
    for key, value in loaded.state_dict().items():
        assert torch.equal(value, original[key]), key


def test_backbone_parameter_names_match_the_hf_checkpoint():
    """Adapters hang beside the HF layers: every HF parameter name is still there, unchanged."""
    from transformers import Wav2Vec2Model

    config = tiny_config(adapter_languages=["ro"])
    model = AdaptSpeechForCTC(config)
    hf_names = set(Wav2Vec2Model(config.backbone_config).state_dict())
    ours = {k.removeprefix("backbone.") for k in model.state_dict() if k.startswith("backbone.")}
    assert hf_names <= ours
    assert all("language_adapters" in k for k in ours - hf_names)


def test_from_backbone_keeps_pretrained_weights_and_records_provenance(tmp_path, monkeypatch):
    from transformers import PreTrainedModel, Wav2Vec2Model

    backbone_config = tiny_config().backbone_config
    pretrained = Wav2Vec2Model(backbone_config)
    pretrained.save_pretrained(tmp_path / "ckpt")
    loads = []
    original = PreTrainedModel.from_pretrained.__func__

    def counting(cls, *args, **kwargs):
        loads.append(cls.__name__)
        return original(cls, *args, **kwargs)

    monkeypatch.setattr(PreTrainedModel, "from_pretrained", classmethod(counting))
    model = AdaptSpeechForCTC.from_backbone(str(tmp_path / "ckpt"), adapter_languages=["ro"], vocab_size=12)
    assert len(loads) == 1  # the backbone type is read from config.json, the weights are loaded once
    assert model.config.backbone_type == "wav2vec2"
    assert model.config.backbone_name_or_path == str(tmp_path / "ckpt")
    reference = pretrained.state_dict()
    for key, value in model.backbone.state_dict().items():
        if key in reference:
            assert torch.equal(value, reference[key]), key
