"""Stock PEFT LoRA as a per-language adapter type of AdaptSpeechForCTC (adaptspeech/adapters/lora.py)."""

import pytest
import torch
from helpers.numerics import assert_paths_agree
from peft import get_peft_model
from peft.tuners.lora import LoraLayer
from safetensors.torch import load_file

from adaptspeech import AdaptSpeechForCTC, SpeechAdapterConfig
from adaptspeech.adapters.lora import lora_tensors
from adaptspeech.testing import tiny_config, tiny_inputs

LORA = {"adapter_type": "lora", "lora_r": 4, "lora_alpha": 8}


def make_model(backbone_type="wav2vec2", adapters=None, seed=0, **kwargs):
    torch.manual_seed(seed)
    adapters = {"ro": LORA} if adapters is None else adapters
    return AdaptSpeechForCTC(tiny_config(backbone_type, adapters=adapters, **kwargs)).eval()


def randomize_lora(model, std=0.3, seed=1):
    """LoRA starts as the identity (B = 0): give every LoRA weight a random value so it matters."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if ".lora_" in name:
                param.copy_(torch.randn(param.shape, generator=gen) * std)


def plain_copy(model):
    """A model without adapters holding ``model``'s backbone and head weights."""
    plain = make_model(model.config.backbone_type, adapters={})
    state = {
        k.replace(".base_layer.", "."): v
        for k, v in model.state_dict().items()
        if ".lora_" not in k and ".language_adapters." not in k
    }
    plain.load_state_dict(state, strict=True)
    return plain


def logits(model, inputs, **kwargs):
    with torch.no_grad():
        return model(**inputs, **kwargs).logits


def lora_module_names(model):
    return sorted(n for n, m in model.named_modules() if isinstance(m, LoraLayer))


@pytest.mark.parametrize(
    ("backbone_type", "projections"),
    [
        ("wav2vec2", ["attention.q_proj", "attention.v_proj"]),
        ("fbank_conformer", ["self_attn.linear_q", "self_attn.linear_v"]),
    ],
)
def test_lora_wraps_the_target_projections_of_the_adapter_layers_only(backbone_type, projections):
    adapters = {"ro": LORA, "cs": {"bottleneck": 4}, "pl": {"bottleneck": 4}}
    model = make_model(backbone_type, adapters=adapters, adapter_layers=[1], fusion={"languages": ["cs", "pl"]})
    expected = sorted(f"backbone.encoder.layers.1.{p}" for p in projections)
    assert lora_module_names(model) == expected  # not layer 0, not the fusion's own linear_q / linear_v
    assert {n for n, _ in model.named_parameters() if ".lora_" in n} == {
        f"{m}.lora_{ab}.ro.weight" for m in expected for ab in "AB"
    }


def test_lora_projection_equation_and_identity_at_init():
    model = make_model()
    inputs = tiny_inputs(model.config)
    base = logits(model, inputs)
    model.set_active_languages(["ro"])
    assert_paths_agree(logits(model, inputs), base)  # B = 0 at init: the LoRA path adds zeros
    randomize_lora(model)
    layer = model.backbone.encoder.layers[0].attention.q_proj
    x = torch.randn(2, 5, 32)
    W, b = layer.base_layer.weight, layer.base_layer.bias
    A, B = layer.lora_A["ro"].weight, layer.lora_B["ro"].weight
    expected = torch.zeros(2, 5, 32)
    for i in range(2):
        for t in range(5):
            expected[i, t] = W @ x[i, t] + b + (8 / 4) * (B @ (A @ x[i, t]))
    with torch.no_grad():
        assert torch.allclose(layer(x), expected, atol=1e-5)
    assert not torch.allclose(logits(model, inputs), base)
    model.set_active_languages([])
    assert torch.equal(logits(model, inputs), base)  # the same modules, none active again: the same computation


def test_gradients_reach_the_lora_weights_only_when_they_train():
    model = make_model(adapters={"ro": LORA, "cs": {"bottleneck": 4}})
    model.train()
    model.set_active_languages(["ro"])
    model.set_trainable(adapters=["ro"])
    inputs = tiny_inputs(model.config)
    labels = torch.tensor([[1, 2, 3], [4, 5, -100]])
    model(**inputs, labels=labels).loss.backward()
    with_grad = {n for n, p in model.named_parameters() if p.grad is not None}
    lora = {n for n, _ in model.named_parameters() if ".lora_" in n}
    assert with_grad == lora
    assert all(p.grad.abs().sum() > 0 for n, p in model.named_parameters() if ".lora_B." in n)
    report = model.trainable_parameters()["groups"]
    assert report["adapter:ro"]["trainable"] == report["adapter:ro"]["total"] == sum(
        model.get_parameter(n).numel() for n in lora
    )
    assert report["backbone"]["trainable"] == report["head"]["trainable"] == 0
    # switching the active language never changes what trains (peft's set_adapter would)
    model.set_active_languages(["cs"])
    model.set_active_languages([])
    assert {n for n, p in model.named_parameters() if p.requires_grad} == lora
    model.set_trainable(adapters=["cs"])
    assert not any(model.get_parameter(n).requires_grad for n in lora)


def test_adding_a_lora_language_keeps_existing_trainability():
    model = make_model(adapters={"cs": {"bottleneck": 4}})
    model.set_trainable(adapters=["cs"])
    before = {n for n, p in model.named_parameters() if p.requires_grad}
    model.add_language_adapter("ro", **LORA)
    after = {n for n, p in model.named_parameters() if p.requires_grad}
    assert after == before | {n for n, _ in model.named_parameters() if ".lora_" in n}
    assert not hasattr(model.backbone, "peft_config")


@pytest.mark.parametrize("backbone_type", ["wav2vec2", "fbank_conformer"])
def test_save_pretrained_round_trip_is_identical(tmp_path, backbone_type):
    model = make_model(backbone_type, adapters={"ro": LORA, "cs": {"bottleneck": 4}}, active_languages=["ro"])
    randomize_lora(model)
    inputs = tiny_inputs(model.config)
    expected = logits(model, inputs)
    model.save_pretrained(tmp_path)
    loaded = AdaptSpeechForCTC.from_pretrained(tmp_path).eval()
    assert loaded.config.adapters["ro"].adapter_type == "lora"
    assert torch.equal(logits(loaded, inputs), expected)


def test_save_adapter_load_adapter_round_trip_is_identical(tmp_path):
    model = make_model(active_languages=["ro"])
    randomize_lora(model)
    inputs = tiny_inputs(model.config)
    expected = logits(model, inputs)
    model.save_adapter("ro", tmp_path)
    keys = set(load_file(tmp_path / "adapter.ro.safetensors"))
    projections = ("q_proj", "v_proj")
    assert keys == {f"layers.{i}.attention.{p}.lora_{ab}.weight" for i in (0, 1) for p in projections for ab in "AB"}

    plain = plain_copy(model)
    plain.load_adapter("ro", tmp_path)  # creates the LoRA language from the file's settings
    assert plain.config.adapters["ro"] == model.config.adapters["ro"]
    assert torch.equal(logits(plain, inputs), expected)
    # into an existing LoRA language: weights are copied in place
    plain.remove_language_adapter("ro")
    plain.add_language_adapter("ro", **LORA)
    assert not torch.equal(logits(plain, inputs), expected)
    plain.load_adapter("ro", tmp_path)
    assert torch.equal(logits(plain, inputs), expected)


def test_several_active_lora_languages_route_per_utterance():
    model = make_model(adapters={"ro": LORA, "pl": LORA, "cs": {"bottleneck": 4}})
    randomize_lora(model)
    inputs = tiny_inputs(model.config)
    single = {}
    for lang in ("ro", "pl", "cs"):
        model.set_active_languages([lang])
        single[lang] = logits(model, inputs)
    ids = model.language_to_id
    model.set_active_languages(["ro", "pl"])
    mixed = logits(model, inputs, lang_ids=torch.tensor([ids["pl"], ids["ro"]]))
    assert_paths_agree(mixed[0], single["pl"][0])
    assert_paths_agree(mixed[1], single["ro"][1])
    with pytest.raises(ValueError, match="lang_ids"):
        logits(model, inputs)
    # mixed adapter types: the LoRA layers leave the bottleneck language's utterance alone
    model.set_active_languages(["ro", "cs"])
    mixed = logits(model, inputs, lang_ids=torch.tensor([ids["cs"], ids["ro"]]))
    assert_paths_agree(mixed[0], single["cs"][0])


def test_mixed_bottleneck_and_lora_languages_route_the_lora_utterance():
    model = make_model(adapters={"ro": LORA, "cs": {"bottleneck": 4}})
    randomize_lora(model)
    inputs = tiny_inputs(model.config)
    model.set_active_languages(["ro"])
    ro = logits(model, inputs)
    ids = model.language_to_id
    model.set_active_languages(["ro", "cs"])
    mixed = logits(model, inputs, lang_ids=torch.tensor([ids["cs"], ids["ro"]]))
    assert_paths_agree(mixed[1], ro[1])


def test_active_fusion_switches_lora_off():
    adapters = {"ro": LORA, "cs": {"bottleneck": 4}, "pl": {"bottleneck": 4}}
    model = make_model(adapters=adapters, fusion={"languages": ["cs", "pl"]})
    randomize_lora(model)
    inputs = tiny_inputs(model.config)
    model.set_fusion_active(True)
    fused = logits(model, inputs)
    model.remove_language_adapter("ro")
    assert_paths_agree(logits(model, inputs), fused)  # the inactive LoRA layers of ro gone: another path


def test_remove_language_adapter_restores_the_backbone_names():
    model = make_model(adapters={"ro": LORA, "pl": LORA}, active_languages=["pl"])
    randomize_lora(model)
    inputs = tiny_inputs(model.config)
    pl = logits(model, inputs)
    plain = plain_copy(model)
    model.remove_language_adapter("ro")
    assert torch.equal(logits(model, inputs), pl)  # the same layers run pl alone as before: the same computation
    assert all("pl" in m.lora_A and "ro" not in m.lora_A for m in model.modules() if isinstance(m, LoraLayer))
    model.remove_language_adapter("pl")
    assert lora_module_names(model) == []
    assert set(model.state_dict()) == set(plain.state_dict())
    assert torch.equal(logits(model, inputs), logits(plain, inputs))  # the same plain modules and weights


def test_lora_target_modules_that_match_nothing_are_reported():
    with pytest.raises(ValueError, match=r"match no nn.Linear.*Linear modules there: .*q_proj"):
        make_model(adapters={"ro": {**LORA, "lora_target_modules": ["query"]}})


@pytest.mark.parametrize(
    ("backbone_type", "projections"),
    [("wav2vec2", ["attention.q_proj", "attention.v_proj"]), ("fbank_conformer", ["self_attn.linear_q",
                                                                                 "self_attn.linear_v"])],
)
def test_a_lora_language_joins_a_model_that_get_peft_model_wrapped(backbone_type, projections):
    """The README's PEFT block: ``add_language_adapter("uk", adapter_type="lora")`` on the model that
    ``get_peft_model`` had wrapped raised peft's ``NoMatchingPeftModuleError`` (peft skips every module inside its
    own tuner layers, here the speech_adapter layer around each encoder layer)."""
    model = make_model(backbone_type, adapters={"cs": {"bottleneck": 4}})
    peft_model = get_peft_model(model, SpeechAdapterConfig(bottleneck=8), adapter_name="ro")
    inputs = tiny_inputs(model.config)
    before = logits(peft_model, inputs)
    model.add_language_adapter("uk", **LORA)
    assert lora_module_names(model) == sorted(
        f"backbone.encoder.layers.{i}.base_layer.{p}" for i in (0, 1) for p in projections
    )
    assert sorted(lora_tensors(model, "uk")) == sorted(
        f"layers.{i}.{p}.lora_{ab}.weight" for i in (0, 1) for p in projections for ab in "AB"
    )
    assert_paths_agree(logits(peft_model, inputs), before)  # not active, and B = 0: wrapped layers, another path
    randomize_lora(model)
    model.set_active_languages(["uk"])
    with_uk = logits(peft_model, inputs)
    assert not torch.allclose(with_uk, before)
    model.set_active_languages([])
    assert_paths_agree(logits(peft_model, inputs), before)  # uk inactive inside the wrapped layers
    model.set_trainable(adapters=["uk"])
    peft_model.train()
    peft_model(**inputs, labels=torch.tensor([[1, 2, 3], [4, 5, -100]])).loss.backward()
    assert {n for n, p in model.named_parameters() if p.grad is not None} == {
        n for n, _ in model.named_parameters() if ".lora_" in n}
    model.remove_language_adapter("uk")
    peft_model.eval()
    assert lora_module_names(model) == [] and torch.equal(logits(peft_model, inputs), before)  # as before uk


def test_a_routing_override_runs_its_lora_language_without_touching_peft_s_active_adapters() -> None:
    import threading

    from adaptspeech.adapters.routing import RoutingOverride, routing_call

    model = make_model(adapters={"ro": LORA, "cs": LORA})
    randomize_lora(model)
    inputs = tiny_inputs(model.config)
    expected = {}
    for language in ("ro", "cs"):
        model.set_active_languages([language])
        expected[language] = logits(model, inputs)
    expected["none"] = logits(plain_copy(model), inputs)
    model.set_active_languages(["ro"])
    peft_state = [list(layer.active_adapters) for layer in model.modules() if isinstance(layer, LoraLayer)]
    overrides = {"ro": RoutingOverride(("ro",)), "cs": RoutingOverride(("cs",)), "none": RoutingOverride()}
    barrier = threading.Barrier(3, timeout=30)
    got: dict[str, list[bool]] = {}

    def run(name: str) -> None:
        same = []
        for _ in range(10):
            with routing_call(override=overrides[name]):
                barrier.wait()
                same.append(torch.equal(logits(model, inputs), expected[name]))
        got[name] = same

    threads = [threading.Thread(target=run, args=(name,)) for name in overrides]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert got == {name: [True] * 10 for name in overrides}  # bit-identical to the settings' routing
    assert [list(layer.active_adapters) for layer in model.modules() if isinstance(layer, LoraLayer)] == peft_state
    assert model.config.active_languages == ["ro"]
