"""Registration of the speech_adapter PEFT method and the validation of its config."""

import subprocess
import sys
import textwrap

import pytest
from peft import PeftConfig
from peft.mapping import PEFT_TYPE_TO_CONFIG_MAPPING, PEFT_TYPE_TO_PREFIX_MAPPING, PEFT_TYPE_TO_TUNER_MAPPING
from peft.utils import PeftType

from adaptspeech.adapters import peft_method
from adaptspeech.adapters.peft_method import SpeechAdapterConfig, SpeechAdapterModel, register_speech_adapter


def test_registered_under_the_string_peft_type_without_touching_peft_enum():
    register_speech_adapter()  # a second call is a no-op
    assert PEFT_TYPE_TO_CONFIG_MAPPING["SPEECH_ADAPTER"] is SpeechAdapterConfig
    assert PEFT_TYPE_TO_TUNER_MAPPING["SPEECH_ADAPTER"] is SpeechAdapterModel
    assert PEFT_TYPE_TO_PREFIX_MAPPING["SPEECH_ADAPTER"] == "speech_adapter_"
    assert sum(1 for key in PEFT_TYPE_TO_TUNER_MAPPING if key == "SPEECH_ADAPTER") == 1
    assert "SPEECH_ADAPTER" not in PeftType.__members__
    assert peft_method.peft_types.PeftType is PeftType  # the temporary binding was restored
    # a saved config comes back as our class through peft's generic loader
    config = PeftConfig.from_peft_type(peft_type="SPEECH_ADAPTER", bottleneck=16)
    assert isinstance(config, SpeechAdapterConfig) and config.bottleneck == 16


def test_a_foreign_method_under_the_same_name_is_refused():
    class Other:
        pass

    saved = PEFT_TYPE_TO_TUNER_MAPPING["SPEECH_ADAPTER"]
    PEFT_TYPE_TO_TUNER_MAPPING["SPEECH_ADAPTER"] = Other
    try:
        with pytest.raises(KeyError, match="another PEFT method"):
            register_speech_adapter()
    finally:
        PEFT_TYPE_TO_TUNER_MAPPING["SPEECH_ADAPTER"] = saved
    register_speech_adapter()
    assert PEFT_TYPE_TO_TUNER_MAPPING["SPEECH_ADAPTER"] is SpeechAdapterModel


def test_taking_the_config_from_the_package_registers_and_a_reimport_is_idempotent():
    script = textwrap.dedent(
        """
        import importlib
        import sys
        import adaptspeech
        assert "peft" not in sys.modules, "a bare import adaptspeech imported peft"
        from adaptspeech import SpeechAdapterConfig
        from peft.mapping import PEFT_TYPE_TO_TUNER_MAPPING as tuners
        assert "SPEECH_ADAPTER" in tuners, "importing SpeechAdapterConfig did not register the speech_adapter method"
        import adaptspeech.adapters.peft_method as pm
        for module in (pm.config, pm.layer, pm.model, pm):
            importlib.reload(module)
        pm.register_speech_adapter()
        assert tuners["SPEECH_ADAPTER"] is pm.SpeechAdapterModel
        assert sum(1 for key in tuners if key == "SPEECH_ADAPTER") == 1
        """
    )
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"activation": "swish"}, "allowed values: relu, gelu, silu, tanh"),
        ({"init": "zeros"}, "allowed values: default, near_identity"),
        ({"bottleneck": 0}, "bottleneck must be a positive integer"),
        ({"fusion_of": ["ro", "ro"]}, "duplicates"),
        ({"fusion_of": ["ro"], "fusion_residual": "input"}, "allowed values: ffn_input, query, none"),
        ({"target_layers": [-1]}, "layer indices"),
        ({"target_modules": "layers.(\\d+"}, "not a valid regex"),
        ({"hidden_size": 0}, "hidden_size must be positive"),
    ],
)
def test_bad_settings_are_reported(settings, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(")):
        SpeechAdapterConfig(**settings)


def test_config_round_trips_through_json(tmp_path):
    config = SpeechAdapterConfig(bottleneck=16, fusion_of=["ro", "cs"], target_layers=[3, 1], fusion_temperature=2.0)
    config.save_pretrained(tmp_path)
    loaded = PeftConfig.from_pretrained(tmp_path)
    assert isinstance(loaded, SpeechAdapterConfig)
    assert loaded.peft_type == "SPEECH_ADAPTER" and loaded.peft_type.value == "SPEECH_ADAPTER"
    assert (loaded.fusion_of, loaded.target_layers, loaded.fusion_temperature) == (["ro", "cs"], [1, 3], 2.0)
