"""LASConfig: defaults, refusals naming the setting and the allowed values, dict round trip."""

from __future__ import annotations

import json

import pytest

from adaptspeech.heads.las_config import LASConfig


def test_special_ids_default_to_a_shared_last_entry():
    config = LASConfig(vocab_size=10)
    assert (config.sos_id, config.eos_id, config.pad_id) == (9, 9, 0)
    assert config.memory_size == config.encoder_hidden_size
    assert LASConfig(listener_layers=2, listener_hidden=40).memory_size == 80


@pytest.mark.parametrize(
    ("setting", "value", "allowed"),
    [
        ("vocab_size", 1, "integers >= 2"),
        ("listener_layers", -1, "integers >= 0"),
        ("decoder_hidden", 0, "integers >= 1"),
        ("decoder_layers", 1.5, "integers >= 1"),
        ("attention_heads", 3, "divisors of the attention_dim width 128: 1, 2, 4, 8, 16, 32, 64, 128"),
        ("location_kernel_size", 4, "odd integers >= 1"),
        ("location_aware", "yes", "True, False"),
        ("label_smoothing", 1.0, r"numbers in \[0, 1\)"),
        ("scheduled_sampling", 1.5, r"numbers in \[0, 1\]"),
        ("dropout", -0.1, r"numbers in \[0, 1\)"),
        ("sos_id", 32, r"integers in \[0, 31\]"),
        ("eos_id", 0, r"integers in \[0, 31\] other than pad_id=0"),
        ("max_target_length", 0, "integers >= 1"),
    ],
)
def test_impossible_values_are_refused_naming_setting_and_allowed_values(setting, value, allowed):
    with pytest.raises(ValueError, match=rf"LASConfig\.{setting}={value!r} is not allowed; allowed values: "
                                         rf"{allowed}"):
        LASConfig(**{setting: value})


def test_heads_must_divide_the_listener_width():
    with pytest.raises(ValueError, match="divisors of the listener output width 30: 1, 2, 3, 5, 6, 10, 15, 30"):
        LASConfig(encoder_hidden_size=30, attention_dim=32, attention_heads=4)
    LASConfig(encoder_hidden_size=30, listener_layers=1, listener_hidden=16, attention_dim=32, attention_heads=4)


def test_dict_round_trip_through_json():
    config = LASConfig(vocab_size=50, encoder_hidden_size=64, listener_layers=2, listener_hidden=32,
                       attention_heads=4, location_aware=True, label_smoothing=0.1, scheduled_sampling=0.2,
                       dropout=0.1, sos_id=48, eos_id=49)
    again = LASConfig.from_dict(json.loads(json.dumps(config.to_dict())))
    assert again == config
    assert again.to_dict()["sos_id"] == 48


def test_unknown_keys_are_refused_listing_the_settings():
    with pytest.raises(ValueError, match="unknown setting\\(s\\) heads; allowed settings: vocab_size, "):
        LASConfig.from_dict({"heads": 4})
