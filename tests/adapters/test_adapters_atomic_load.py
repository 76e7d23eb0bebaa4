"""Loads are atomic: a load that does not fit is refused before anything changes, and the
model's state dict, config and active languages are exactly as before."""

import copy

import pytest
import torch
from peft import PeftModel, get_peft_model
from safetensors.torch import load_file, save_file

from adaptspeech import AdaptSpeechForCTC
from adaptspeech.adapters.files import AdapterLoadError
from adaptspeech.adapters.peft_method import SpeechAdapterConfig
from adaptspeech.testing import tiny_config, tiny_inputs

LORA = {"adapter_type": "lora", "lora_r": 4, "lora_alpha": 8}

pytestmark = pytest.mark.filterwarnings("ignore:`is_gradient_checkpointing` is deprecated:FutureWarning")


def model_with(vocab=31, seed=0, **adapters):
    torch.manual_seed(seed)
    return AdaptSpeechForCTC(tiny_config(vocab_size=vocab, adapters=adapters or {"ro": {"bottleneck": 8}})).eval()


def snapshot(model):
    return {k: v.clone() for k, v in model.state_dict().items()}, copy.deepcopy(model.config.to_dict()), list(
        model.config.active_languages), model.config.fusion_active


def assert_unchanged(model, before):
    state, config, active, fusion_active = before
    now = model.state_dict()
    assert now.keys() == state.keys()
    assert all(torch.equal(now[k], v) for k, v in state.items())
    assert model.config.to_dict() == config
    assert model.config.active_languages == active and model.config.fusion_active == fusion_active


def test_failed_load_adapter_keeps_the_adapter_the_model_had(tmp_path):
    """The reported case: ro (bottleneck 8, vocab 31) <- a file with ro of bottleneck 16 and a 40-token head."""
    model_with(vocab=40, seed=1, ro={"bottleneck": 16}).save_adapter("ro", tmp_path, include_head=True)
    model = model_with()
    model.set_target_language("ro")
    before = snapshot(model)
    inputs = tiny_inputs(model.config)
    with torch.no_grad():
        expected = model(**inputs).logits
    with pytest.raises(AdapterLoadError, match=r"head\.lm_head\.bias.*\(40,\).*\(31,\)"):
        model.load_adapter("ro", tmp_path)
    assert_unchanged(model, before)
    with torch.no_grad():
        assert torch.equal(model(**inputs).logits, expected)


def test_a_fitting_file_with_other_settings_replaces_the_adapter(tmp_path):
    model_with(seed=1, ro={"bottleneck": 16}).save_adapter("ro", tmp_path)
    model = model_with()
    model.load_adapter("ro", tmp_path)
    assert model.config.adapters["ro"].bottleneck == 16 and model.config.active_languages == ["ro"]


@pytest.mark.parametrize("damage", ["truncated", "shape"])
def test_failed_load_of_a_new_or_lora_language_changes_nothing(tmp_path, damage):
    source = model_with(seed=1, ro={"bottleneck": 8}, uk=LORA)
    source.save_adapter("uk", tmp_path)
    path = tmp_path / "adapter.uk.safetensors"
    if damage == "truncated":
        path.write_bytes(path.read_bytes()[:100])
    else:
        tensors = load_file(path)
        key = sorted(tensors)[0]
        tensors[key] = torch.zeros(3, 3)
        save_file(tensors, path)
    model = model_with()
    before = snapshot(model)
    with pytest.raises(AdapterLoadError, match=r"adapter\.uk\.safetensors"):
        model.load_adapter("uk", tmp_path)
    assert_unchanged(model, before)
    assert not any(".lora_" in k for k in model.state_dict())


def test_failed_load_fusion_keeps_the_fusion_the_model_had(tmp_path):
    model = model_with(ro={"bottleneck": 8}, cs={"bottleneck": 8}, pl={"bottleneck": 8})
    model.add_fusion(["ro", "cs", "pl"], target_language="ro", include_self=True)
    model.save_fusion(tmp_path / "three")
    model.remove_fusion()
    model.add_fusion(["ro", "cs"], target_language="ro")
    before = snapshot(model)
    tensors = load_file(tmp_path / "three" / "fusion.safetensors")
    tensors["layers.1.linear_q.weight"] = torch.zeros(16, 32)
    save_file(tensors, tmp_path / "three" / "fusion.safetensors")
    with pytest.raises(AdapterLoadError, match=r"layers\.1\.linear_q\.weight.*\(16, 32\).*\(32, 32\)"):
        model.load_fusion(tmp_path / "three")
    assert_unchanged(model, before)
    # a fusion over a language the model has no adapter for
    other = model_with(ro={"bottleneck": 8}, xx={"bottleneck": 8})
    other.add_fusion(["ro", "xx"])
    other.save_fusion(tmp_path / "xx")
    with pytest.raises(AdapterLoadError, match=r"no adapter for language\(s\) \['xx'\]"):
        model.load_fusion(tmp_path / "xx")
    assert_unchanged(model, before)


def test_failed_peft_load_leaves_the_peft_model_as_it_was(tmp_path):
    def base():
        torch.manual_seed(0)
        return AdaptSpeechForCTC(tiny_config()).eval()

    wide = get_peft_model(base(), SpeechAdapterConfig(bottleneck=16), adapter_name="cs")
    wide.save_pretrained(tmp_path / "good")
    good = tmp_path / "good" / "cs"  # peft saves a named adapter in a folder of its name
    bad = tmp_path / "bad"
    bad.mkdir()
    for name in ("adapter_model.safetensors", "adapter_config.json"):
        (bad / name).write_bytes((good / name).read_bytes())
    config_path = bad / "adapter_config.json"
    config_path.write_text(config_path.read_text().replace('"bottleneck": 16', '"bottleneck": 8'))
    # -> a config announcing other shapes than its weights have

    model = get_peft_model(base(), SpeechAdapterConfig(bottleneck=8), adapter_name="ro")
    with torch.no_grad():
        for name, param in model.named_parameters():
            if ".ro." in name:
                param.add_(0.1)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    flags = {n: p.requires_grad for n, p in model.named_parameters()}
    with pytest.raises(AdapterLoadError, match=r"nothing was loaded, adapter\(s\) \['x'\] removed again"):
        model.load_adapter(str(bad), adapter_name="x")
    assert set(model.peft_config) == {"ro"} and model.active_adapters == ["ro"]
    now = model.state_dict()
    assert now.keys() == before.keys() and all(torch.equal(now[k], v) for k, v in before.items())
    assert {n: p.requires_grad for n, p in model.named_parameters()} == flags

    # into an existing adapter of other shape: refused before a single tensor is copied
    model.add_adapter("cs", SpeechAdapterConfig(bottleneck=8))
    before = {k: v.clone() for k, v in model.state_dict().items()}
    with pytest.raises(AdapterLoadError, match=r"nothing was loaded$"):
        model.load_adapter(str(good), adapter_name="cs")
    now = model.state_dict()
    assert now.keys() == before.keys() and all(torch.equal(now[k], v) for k, v in before.items())
    assert set(model.peft_config) == {"ro", "cs"}
    # and a fitting one still loads
    loaded = PeftModel.from_pretrained(base(), str(good), adapter_name="cs")
    assert torch.equal(loaded.state_dict()[next(k for k in loaded.state_dict() if ".cs." in k)],
                       wide.state_dict()[next(k for k in wide.state_dict() if ".cs." in k)])
