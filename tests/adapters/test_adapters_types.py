"""Adapter types as a registry of classes: each type registers its own settings class, the generic layer only asks
the type, and the settings are typed once (a 0.1.0 saved layout, every type's settings side by side, still loads)."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from adaptspeech import AdaptSpeechForCTC
from adaptspeech.adapters import (
    ADAPTER_TYPES,
    AdapterDefaults,
    BottleneckAdapterConfig,
    FusionConfig,
    LanguageAdapterConfig,
    LoraAdapterConfig,
    get_adapter_type,
)
from adaptspeech.attention import AttentionConfig
from adaptspeech.testing import tiny_config, tiny_inputs

LORA_FIELDS = {"lora_r", "lora_alpha", "lora_dropout", "lora_target_modules"}

#: one adapter's settings as adaptspeech 0.1.0 wrote them into config.json and adapter files.
SAVED_0_1_0 = {
    "activation": "relu", "adapter_type": "bottleneck", "bias": False, "bottleneck": 8, "dropout": 0.0,
    "init": "default", "layer_norm": True, "lora_alpha": 16, "lora_dropout": 0.0, "lora_r": 8,
    "lora_target_modules": ["q_proj", "v_proj", "linear_q", "linear_v"],
}


def test_each_type_registers_its_own_settings_class():
    assert ADAPTER_TYPES.names() == ["bottleneck", "bottleneck_lora", "lora"]
    assert ADAPTER_TYPES.options("bottleneck") is BottleneckAdapterConfig
    assert ADAPTER_TYPES.options("lora") is LoraAdapterConfig
    assert not LORA_FIELDS & {f.name for f in dataclasses.fields(BottleneckAdapterConfig)}
    assert {f.name for f in dataclasses.fields(LoraAdapterConfig)} == LORA_FIELDS
    assert BottleneckAdapterConfig().adapter_type == "bottleneck" and LoraAdapterConfig().adapter_type == "lora"
    assert get_adapter_type("bottleneck").fusable and not get_adapter_type("lora").fusable


def test_the_saved_layout_reads_as_the_named_type():
    settings = LanguageAdapterConfig.from_dict(SAVED_0_1_0)
    assert settings == BottleneckAdapterConfig(bottleneck=8)  # the LoRA settings beside it are not its own
    lora = LanguageAdapterConfig.from_dict({**SAVED_0_1_0, "adapter_type": "lora", "lora_r": 4})
    assert lora == LoraAdapterConfig(lora_r=4)
    assert lora.to_dict() == {"adapter_type": "lora", "lora_r": 4, "lora_alpha": 16, "lora_dropout": 0.0,
                              "lora_target_modules": ["q_proj", "v_proj", "linear_q", "linear_v"]}
    assert LanguageAdapterConfig.from_dict({}) == BottleneckAdapterConfig()
    message = r"unknown setting\(s\) lora_rank \(did you mean lora_r\?\); allowed settings: .*lora_r"
    with pytest.raises(ValueError, match=message):
        LanguageAdapterConfig.from_dict({"adapter_type": "lora", "lora_rank": 4})
    with pytest.raises(ValueError, match="LoraAdapterConfig holds the settings of 'lora' adapters"):
        LoraAdapterConfig.from_dict({"adapter_type": "bottleneck"})


def test_defaults_hold_every_type_and_save_flat():
    defaults = AdapterDefaults.from_dict({"bottleneck": 128, "lora_r": 4})
    assert defaults.per_type["bottleneck"] == BottleneckAdapterConfig(bottleneck=128)
    assert defaults.per_type["lora"] == LoraAdapterConfig(lora_r=4)
    assert defaults.to_dict() == {**SAVED_0_1_0, "bottleneck": 128, "lora_r": 4}
    assert defaults.settings({"adapter_type": "lora"}) == LoraAdapterConfig(lora_r=4)
    assert defaults.saved(LoraAdapterConfig(lora_r=2)) == {**SAVED_0_1_0, "bottleneck": 128, "adapter_type": "lora",
                                                           "lora_r": 2}
    with pytest.raises(ValueError, match="lora_r must be a positive integer"):
        AdapterDefaults.from_dict({"lora_r": 0})  # every type's defaults are validated


def test_add_language_adapter_keeps_its_public_forms_and_refuses_another_type_s_setting():
    model = AdaptSpeechForCTC(tiny_config("wav2vec2", adapter_defaults={"bottleneck": 16}))
    model.add_language_adapter("ro")
    model.add_language_adapter("cs", bottleneck=64)
    model.add_language_adapter("uk", adapter_type="lora", lora_r=8)
    assert model.config.adapters == {
        "ro": BottleneckAdapterConfig(bottleneck=16),
        "cs": BottleneckAdapterConfig(bottleneck=64),
        "uk": LoraAdapterConfig(lora_r=8),
    }
    message = "lora_r applies only to adapter_type\\(s\\) bottleneck_lora, lora, not 'bottleneck'"
    with pytest.raises(ValueError, match=message):
        model.add_language_adapter("pl", lora_r=4)
    assert "pl" not in model.config.adapters
    assert model.config.adapters["uk"]["adapter_type"] == "lora"  # reads by key as its saved dict


def test_sub_settings_are_typed_when_set():
    config = tiny_config("fbank_conformer", adapter_languages=["ro", "cs"])
    config.fusion = {"languages": ["ro", "cs"], "target_language": "ro"}
    assert isinstance(config.fusion, FusionConfig) and config.fusion.target_index == 0
    config.attention = {"kind": "ldsa", "context_width": 5}
    assert config.attention.context_width == 5
    config.adapters = {**config.adapters, "pl": {"bottleneck": 8}}
    assert config.adapters["pl"] == BottleneckAdapterConfig(bottleneck=8)
    with pytest.raises(ValueError, match=r"attention\.context_width=4"):
        config.attention = {"kind": "mhsa", "context_width": 4}


def test_training_steps_parse_no_settings(monkeypatch):
    """The fusion losses read the typed settings: nothing is rebuilt or re-validated per step."""
    model = AdaptSpeechForCTC(tiny_config("fbank_conformer", adapter_languages=["ro", "cs"]))
    model.add_fusion(["ro", "cs"], target_language="ro", guide_weight=0.1)

    def refuse(*args, **kwargs):
        raise AssertionError("settings parsed during a training step")

    for cls in (FusionConfig, LanguageAdapterConfig, AdapterDefaults, AttentionConfig):
        monkeypatch.setattr(cls, "from_dict", classmethod(refuse))
    for cls in (FusionConfig, BottleneckAdapterConfig, LoraAdapterConfig, AdapterDefaults):
        monkeypatch.setattr(cls, "__post_init__", refuse)
    out = model(**tiny_inputs(model.config), labels=torch.tensor([[5, 6], [7, 8]]))
    assert out.loss_fusion_reg is not None and out.loss_fusion_guide is not None
