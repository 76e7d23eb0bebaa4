"""The language-adapter API: routing, freezing, trainable report, adapter files and their errors."""

import pytest
import torch
from helpers.numerics import assert_paths_agree

from adaptspeech import AdaptSpeechForCTC
from adaptspeech.adapters.bottleneck import BottleneckAdapter
from adaptspeech.adapters.files import AdapterLoadError
from adaptspeech.testing import tiny_config, tiny_inputs

LANGS = ["ro", "cs", "pl"]


def make_model(backbone_type="wav2vec2", **kwargs):
    torch.manual_seed(0)
    config = tiny_config(backbone_type, adapter_languages=LANGS, adapter_defaults={"bottleneck": 8}, **kwargs)
    return AdaptSpeechForCTC(config)


def test_bottleneck_adapter_equation():
    torch.manual_seed(0)
    adapter = BottleneckAdapter(8, 4)
    x = torch.randn(3, 8)
    ln = torch.nn.functional.layer_norm(x, (8,), adapter.layer_norm.weight, adapter.layer_norm.bias)
    expected = x + torch.relu(ln @ adapter.down.weight.T) @ adapter.up.weight.T
    assert torch.allclose(adapter(x), expected, atol=1e-6)
    assert adapter.down.bias is None and adapter.up.bias is None
    near = BottleneckAdapter(8, 4, init="near_identity")
    assert torch.equal(near(x), x)  # x + up(down(x)) with up = 0: adds exact zeros on any CPU


def test_no_active_language_leaves_the_backbone_output_unchanged():
    model = make_model()
    model.eval()
    inputs = tiny_inputs(model.config)
    with_adapters = model(**inputs).logits
    model.set_active_languages([])
    base = model(**inputs).logits
    model.set_target_language("cs")
    cs = model(**inputs).logits
    assert not torch.allclose(base, cs)
    assert torch.equal(with_adapters, base)  # nothing was active at construction


def test_per_utterance_routing_equals_single_language_runs():
    model = make_model()
    model.eval()
    inputs = tiny_inputs(model.config, batch=2)
    ids = model.language_to_id
    model.set_active_languages(["ro", "pl"])
    routed = model(**inputs, lang_ids=torch.tensor([ids["ro"], ids["pl"]])).logits
    model.set_target_language("ro")
    ro = model(**inputs).logits
    model.set_target_language("pl")
    pl = model(**inputs).logits
    assert_paths_agree(routed[0], ro[0])  # routed rows against a one-language batch
    assert_paths_agree(routed[1], pl[1])
    model.set_active_languages(["ro", "pl"])
    with pytest.raises(ValueError, match="lang_ids"):
        model(**inputs)


@pytest.mark.parametrize("backbone_type", ["wav2vec2", "wav2vec2_conformer", "fbank_conformer", "wav2vec2_bert"])
def test_optimizer_step_changes_exactly_the_target_adapter_and_fusion(backbone_type):
    """Compares the whole state dict, buffers included: the conformers' BatchNorm statistics must not move."""
    model = make_model(backbone_type)
    model.train()
    model.add_fusion(LANGS, target_language="ro")
    model.set_trainable(adapters=["ro"], fusion=True)
    before = {k: v.detach().clone() for k, v in model.state_dict().items()}
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-2)
    inputs = tiny_inputs(model.config)
    model(**inputs, labels=torch.tensor([[4, 5, 6], [5, 6, 7]])).loss.backward()
    optimizer.step()
    after = model.state_dict()
    changed = {k for k in before if not torch.equal(before[k], after[k])}
    trainable = {k for k, p in model.named_parameters() if p.requires_grad}
    assert changed == trainable
    assert changed and all(".adapters.ro." in k or ".fusion." in k for k in changed)
    assert any(".fusion.linear_v." in k for k in changed) and any(".adapters.ro.down." in k for k in changed)


def test_trainable_parameter_report_counts():
    model = make_model()
    model.add_fusion(LANGS)
    model.set_trainable(adapters=["ro"], fusion=True)
    report = model.trainable_parameters()
    d, r, layers = 32, 8, 2
    per_adapter = layers * (2 * d + d * r + r * d)
    assert report["groups"]["adapter:ro"] == {"total": per_adapter, "trainable": per_adapter}
    assert report["groups"]["adapter:cs"] == {"total": per_adapter, "trainable": 0}
    per_fusion = layers * (2 * (d * d + d) + d * d)
    assert report["groups"]["fusion"] == {"total": per_fusion, "trainable": per_fusion}
    assert report["trainable"] == per_adapter + per_fusion
    assert report["total"] == sum(p.numel() for p in model.parameters())
    assert report["adapter_share_of_backbone"]["ro"] == pytest.approx(per_adapter / report["backbone"])
    assert "trainable params" in model.print_trainable_parameters()


@pytest.mark.parametrize("include_head", [False, True])
def test_save_and_load_adapter_round_trip(tmp_path, include_head):
    model = make_model()
    model.eval()
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.01 * torch.randn_like(p))
    model.set_target_language("cs")
    inputs = tiny_inputs(model.config)
    expected = model(**inputs).logits
    path = model.save_adapter("cs", tmp_path, include_head=include_head)
    assert path.name == "adapter.cs.safetensors" and (tmp_path / "adapter.cs.json").is_file()

    fresh = AdaptSpeechForCTC(tiny_config(adapter_languages=["ro"], adapter_defaults={"bottleneck": 8}))
    kept = {
        k: v
        for k, v in model.state_dict().items()
        if ".adapters.cs." not in k and ".adapters.pl." not in k and (not include_head or "ctc_head" not in k)
    }
    missing, unexpected = fresh.load_state_dict(kept, strict=False)
    assert not unexpected and set(missing) == (
        {"ctc_head.lm_head.weight", "ctc_head.lm_head.bias"} if include_head else set()
    )
    fresh.eval()
    fresh.load_adapter("cs", tmp_path)
    assert "cs" in fresh.config.adapters and fresh.config.active_languages == ["cs"]
    assert torch.allclose(fresh(**inputs).logits, expected, atol=1e-6)


def test_load_adapter_errors_name_the_problem(tmp_path):
    model = make_model()
    model.save_adapter("cs", tmp_path)
    with pytest.raises(FileNotFoundError) as err:
        model.load_adapter("xx", tmp_path)
    assert "adapter.xx.json" in str(err.value) and "adapter.cs.json" in str(err.value)

    other = AdaptSpeechForCTC(
        tiny_config(
            adapter_languages=["cs"],
            adapter_defaults={"bottleneck": 8},
            backbone_overrides={"hidden_size": 48, "num_attention_heads": 2},
        )
    )
    with pytest.raises(AdapterLoadError, match="hidden size 32"):
        other.load_adapter("cs", tmp_path)

    # a file whose tensors do not have the shape its config announces
    from safetensors.torch import load_file, save_file

    tensors = load_file(tmp_path / "adapter.cs.safetensors")
    tensors["layers.0.down.weight"] = torch.zeros(4, 32)
    save_file(tensors, tmp_path / "adapter.cs.safetensors")
    fresh = make_model()
    with pytest.raises(AdapterLoadError) as err:
        fresh.load_adapter("cs", tmp_path)
    assert "layers.0.down.weight" in str(err.value) and "(4, 32)" in str(err.value) and "(8, 32)" in str(err.value)


def test_unknown_language_in_api_calls_is_named():
    model = make_model()
    for call in (
        lambda: model.set_target_language("xx"),
        lambda: model.add_fusion(["ro", "xx"]),
        lambda: model.set_trainable(adapters=["xx"]),
        lambda: model.save_adapter("xx", "/tmp/none"),
    ):
        with pytest.raises(KeyError, match="'xx'"):
            call()
    with pytest.raises(ValueError, match="lang_ids holds 7"):
        model.set_active_languages(["ro", "cs"])
        model(**tiny_inputs(model.config), lang_ids=torch.tensor([0, 7]))


def test_adapter_layers_subset_and_fbank_backbone():
    model = make_model("fbank_conformer", adapter_layers=[1])
    assert sorted(model.adapter_blocks) == [1]
    assert not hasattr(model.backbone.encoder.layers[0], "language_adapters")
    model.add_fusion(["ro", "cs"], target_language="ro")
    out = model(**tiny_inputs(model.config), labels=torch.tensor([[4, 5], [5, 6]]), output_fusion_weights=True)
    assert len(out.fusion_weights) == 1 and torch.isfinite(out.loss)


def test_frozen_batchnorm_keeps_its_statistics_but_a_trained_one_updates():
    model = make_model("fbank_conformer")
    norm = model.backbone.encoder.layers[0].conv_module.batch_norm
    model.set_trainable(adapters=["ro"])
    model.train()
    assert not norm.training and model.training
    before = norm.running_mean.clone()
    model(**tiny_inputs(model.config))
    assert torch.equal(norm.running_mean, before)
    model.set_trainable(backbone=True)
    model.train()
    assert norm.training
    model(**tiny_inputs(model.config))
    assert not torch.equal(norm.running_mean, before)


def _trains(model, group: str) -> bool:
    """One backward pass of a CTC loss; whether every tensor of ``group`` got a gradient, not all zero (LoRA's
    ``lora_A`` gets zeros at first: ``lora_B`` starts at zero)."""
    model.train()
    model.zero_grad()
    out = model(**tiny_inputs(model.config), labels=torch.tensor([[4, 5], [5, 6]]))
    out.loss.backward()
    params = model._named_groups()[group]
    return bool(params) and all(p.grad is not None for _, p in params) and any(p.grad.abs().sum() > 0
                                                                             for _, p in params)


@pytest.mark.parametrize("settings", [{"bottleneck": 8}, {"adapter_type": "lora", "lora_r": 4}],
                         ids=["bottleneck", "lora"])
def test_an_adapter_made_trainable_with_none_active_is_activated_and_trains(settings):
    """``add_language_adapter("ro")`` then ``set_trainable(adapters=["ro"])`` without ``set_active_languages``:
    nothing was active, nothing trained, and backward failed with "element 0 of tensors does not require grad"."""
    model = make_model("fbank_conformer")
    model.add_language_adapter("uk", **settings)
    assert model.config.active_languages == []
    model.set_trainable(adapters=["uk"])
    assert model.config.active_languages == ["uk"] and not model.config.fusion_active
    assert _trains(model, "adapter:uk")


@pytest.mark.parametrize("settings", [{"bottleneck": 8}, {"adapter_type": "lora", "lora_r": 4}],
                         ids=["bottleneck", "lora"])
def test_an_adapter_made_trainable_beside_other_active_ones_is_refused_in_one_line(settings):
    model = make_model("fbank_conformer")
    model.add_language_adapter("uk", **settings)
    model.set_active_languages(["cs"])
    flags = {n: p.requires_grad for n, p in model.named_parameters()}
    with pytest.raises(ValueError) as error:
        model.set_trainable(adapters=["cs", "uk"])
    message = str(error.value)
    assert message.startswith("set_trainable: adapters ['uk'] would not train: they are not among the active "
                              "languages ['cs']") and "set_active_languages" in message and "\n" not in message
    assert {n: p.requires_grad for n, p in model.named_parameters()} == flags  # nothing changed
    assert model.config.active_languages == ["cs"]


def test_a_fusion_made_trainable_must_be_there_and_active():
    model = make_model("fbank_conformer")
    with pytest.raises(ValueError, match=r"^set_trainable\(fusion=True\): the model has no fusion; call add_fusion"):
        model.set_trainable(fusion=True)
    model.add_fusion(["ro", "cs"], target_language="ro", activate=False)
    model.set_trainable(adapters=["ro"], fusion=True)  # nothing was active: the fusion is switched on
    assert model.config.fusion_active and _trains(model, "fusion") and _trains(model, "adapter:ro")
    model.set_active_languages(["ro"])  # switches the fusion off
    with pytest.raises(ValueError, match=r"^set_trainable\(fusion=True\): the fusion would not train: it is "
                                         r"switched off \(active languages \['ro'\]\); call set_fusion_active"):
        model.set_trainable(fusion=True)
    model.set_fusion_active(True)
    with pytest.raises(ValueError, match=r"^set_trainable: adapters \['pl'\] would not train: they are not among "
                                         r"the fusion's languages \['ro', 'cs'\]"):
        model.set_trainable(adapters=["pl"], fusion=True)
