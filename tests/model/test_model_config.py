"""AdaptSpeechConfig: validation at construction, JSON round trip, Auto registration."""

import json

import pytest
from helpers.paths import FORMAT_0_1_0
from transformers import AutoConfig

from adaptspeech import AdaptSpeechConfig
from adaptspeech.backbones import BACKBONES, backbone_type_of_model_type
from adaptspeech.testing import tiny_config


@pytest.mark.parametrize(
    ("kwargs", "fragments"),
    [
        (
            {"backbone_type": "whisper"},
            ["backbone_type", "whisper", "fbank_conformer", "wav2vec2", "wav2vec2_conformer"],
        ),
        ({"head": "rnnt"}, ["head", "rnnt", "ctc"]),
        ({"adapter_defaults": {"activation": "swish"}}, ["swish", "relu", "gelu"]),
        ({"adapter_defaults": {"adapter_type": "prefix"}}, ["adapter_type", "prefix", "bottleneck", "lora"]),
        ({"adapter_defaults": {"bottleneck": 0}}, ["bottleneck", "positive"]),
        ({"adapter_defaults": {"botleneck": 8}}, ["botleneck", "allowed settings", "bottleneck"]),
        ({"adapter_layers": [0, 5]}, ["adapter_layers", "[5]", "0..1"]),
        ({"adapter_languages": ["r o"]}, ["'r o'", "language code"]),
        (
            {"adapter_languages": ["ro"], "fusion": {"languages": ["ro", "cs"]}},
            ["['cs']", "no bottleneck adapter"],
        ),
        (
            {"adapter_languages": ["ro"], "fusion": {"languages": ["ro"], "residual": "pre"}},
            ["residual", "ffn_input"],
        ),
        (
            {"adapter_languages": ["ro"], "fusion": {"languages": ["ro"], "fusion_type": "adapterfusion"}},
            ["fusion_type", "simadapter"],
        ),
        ({"adapter_languages": ["ro"], "fusion": {"languages": ["ro"], "temperature": 0}}, ["temperature"]),
        ({"adapter_languages": ["ro"], "active_languages": ["cs"]}, ["active_languages", "cs", "ro"]),
        ({"vocab_size": 1}, ["vocab_size"]),
        ({"pad_token_id": 40}, ["pad_token_id", "40"]),
        ({"ctc_loss_reduction": "max"}, ["ctc_loss_reduction", "mean", "sum"]),
        ({"ctc_weight": 1.5}, ["ctc_weight"]),
    ],
)
def test_invalid_values_are_refused_with_allowed_values(kwargs, fragments):
    with pytest.raises(ValueError) as err:
        if "backbone_type" in kwargs:
            AdaptSpeechConfig(**kwargs)
        else:
            tiny_config(**kwargs)
    message = str(err.value)
    for fragment in fragments:
        assert fragment in message, f"{fragment!r} missing from: {message}"


def test_registry_lists_all_backbones():
    assert BACKBONES.names() == ["fbank_conformer", "wav2vec2", "wav2vec2_bert", "wav2vec2_conformer"]


@pytest.mark.parametrize("backbone_type", ["wav2vec2", "wav2vec2_conformer", "fbank_conformer", "wav2vec2_bert"])
def test_config_round_trip_through_auto_config(tmp_path, backbone_type):
    config = tiny_config(
        backbone_type,
        adapters={"ro": {"bottleneck": 8}, "cs": {"bottleneck": 16, "activation": "gelu"}},
        adapter_layers=[1],
        fusion={"languages": ["ro", "cs"], "target_language": "ro", "guide_weight": 0.1},
        fusion_active=True,
        active_languages=["ro", "cs"],
    )
    config.save_pretrained(tmp_path)
    loaded = AutoConfig.from_pretrained(tmp_path)
    assert isinstance(loaded, AdaptSpeechConfig)
    ignore = {"_name_or_path"}
    assert {k: v for k, v in loaded.to_dict().items() if k not in ignore} == {
        k: v for k, v in config.to_dict().items() if k not in ignore
    }
    assert loaded.adapters["cs"].bottleneck == 16 and loaded.adapters["cs"].activation == "gelu"
    assert loaded.fusion.languages == ["ro", "cs"] and loaded.fusion == config.fusion
    assert loaded.backbone_config.hidden_size == 32
    assert loaded.backbone_config.model_type == config.backbone_config.model_type


def test_adapter_defaults_apply_to_shorthand_languages():
    config = tiny_config(adapter_languages=["ro", "cs"], adapter_defaults={"bottleneck": 24})
    assert {lang: settings.bottleneck for lang, settings in config.adapters.items()} == {"ro": 24, "cs": 24}




@pytest.mark.parametrize("name", ["ctc_fusion", "ctc_wav2vec2_lora", "ctc_las", "mms_adapter/base"])
def test_a_0_1_0_config_json_is_written_back_as_it_was(name):
    """The typed sub-settings save in 0.1.0's layout: every adapter flat over every type's defaults, the fusion's
    fields, the attention's kind and changed settings."""
    saved = json.loads((FORMAT_0_1_0 / name / "config.json").read_text())
    written = json.loads(AdaptSpeechConfig.from_pretrained(FORMAT_0_1_0 / name).to_json_string())
    ignore = {"transformers_version"}
    assert {k: v for k, v in written.items() if k not in ignore} == {k: v for k, v in saved.items() if k not in ignore}


def test_the_backbone_of_a_checkpoint_is_found_by_its_model_type():
    for name in BACKBONES.names():
        assert backbone_type_of_model_type(BACKBONES.get(name).model_type) == name
    with pytest.raises(ValueError, match="model_type 'whisper' is not a supported backbone; supported: "
                                         "adaptspeech_fbank_conformer, wav2vec2, wav2vec2-bert, wav2vec2-conformer"):
        backbone_type_of_model_type("whisper", "openai/whisper-tiny")
