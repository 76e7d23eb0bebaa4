"""The DDP defaults ``run_stage`` applies (find_unused_parameters, non-re-entrant checkpointing), checked against
what a backward pass really leaves without gradient; the resumable-checkpoint lookup."""

from __future__ import annotations

import pytest
import torch
from safetensors.torch import save_file

from adaptspeech import AdaptSpeechForCTC
from adaptspeech.testing import tiny_config, tiny_inputs
from adaptspeech.training.distributed import ddp_training_defaults, modules_never_called, unused_parameter_reasons
from adaptspeech.training.stage import StageConfigError, last_checkpoint


def build(backbone: str = "fbank_conformer", languages=(), active=None, fusion=False, trainable=None,
          **backbone_overrides) -> AdaptSpeechForCTC:
    torch.manual_seed(0)
    config = tiny_config(backbone, adapter_languages=list(languages), adapter_defaults={"bottleneck": 8},
                         backbone_overrides=backbone_overrides)
    model = AdaptSpeechForCTC(config)
    if fusion:
        model.add_fusion(list(languages), target_language=languages[0])
    model.set_trainable(**(trainable or {"backbone": True, "head": True}))
    if active is not None:  # after set_trainable, which refuses (or activates) a trainable adapter left out
        model.set_active_languages(list(active))
    return model


def probe(model: AdaptSpeechForCTC) -> dict[str, torch.Tensor]:
    return tiny_inputs(model.config, batch=2)


def params_without_grad(model: AdaptSpeechForCTC, lang_ids: list[int] | None = None) -> list[str]:
    """Trainable parameters left without a gradient by one training forward + backward on a tiny batch."""
    inputs = tiny_inputs(model.config, batch=2)
    inputs["labels"] = torch.tensor([[5, 6, 7], [6, 7, -100]])
    if lang_ids is not None:
        inputs["lang_ids"] = torch.tensor(lang_ids)
    model.train()
    model(**inputs).loss.backward()
    return [name for name, p in model.named_parameters() if p.requires_grad and p.grad is None]


def test_a_plain_wav2vec2_uses_every_parameter_and_keeps_transformers_default():
    model = build("wav2vec2")
    assert unused_parameter_reasons(model) == [] and modules_never_called(model, probe(model)) == []
    assert params_without_grad(model) == []
    training, _ = ddp_training_defaults(model, {"max_steps": 3}, probe(model))
    assert training == {"max_steps": 3}  # Trainer's own default (True unless checkpointing) is left alone


def test_modules_the_forward_never_calls_explain_every_missing_gradient():
    """transformers' wav2vec2-conformer encoder builds ``pos_conv_embed`` and never calls it (our fbank conformer
    drops it, so it has no idle module)."""
    fbank = build()
    assert modules_never_called(fbank, probe(fbank)) == [] and params_without_grad(fbank) == []
    model = build("wav2vec2_conformer")
    idle = modules_never_called(model, probe(model))
    assert "backbone.encoder.pos_conv_embed.conv" in idle
    explained = {f"{m}.{n}" for m in idle for n, _ in model.get_submodule(m).named_parameters(recurse=False)}
    missing = params_without_grad(model)
    assert missing and set(missing) <= explained
    training, reasons = ddp_training_defaults(model, {"activation_checkpointing": True}, probe(model))
    assert training["ddp_find_unused_parameters"] is True and "pos_conv_embed" in reasons[-1]
    frozen = build("wav2vec2_conformer", trainable={"head": True})  # the same modules, frozen: nothing to report
    assert modules_never_called(frozen, probe(frozen)) == [] and params_without_grad(frozen) == []


def test_layerdrop_leaves_layers_unused():
    model = build("wav2vec2", layerdrop=0.99)
    torch.manual_seed(3)
    unused = params_without_grad(model)
    assert any(".encoder.layers." in name for name in unused)  # the reason is real
    training, reasons = ddp_training_defaults(model, {"activation_checkpointing": True})
    assert any("layerdrop=0.99" in r for r in reasons)
    assert training["ddp_find_unused_parameters"] is True


def test_per_utterance_routing_leaves_absent_languages_unused():
    model = build(languages=("cs", "pl", "ro"), active=("cs", "pl", "ro"), trainable={"adapters": ["cs", "pl", "ro"]})
    unused = params_without_grad(model, lang_ids=[0, 0])  # a batch of cs only
    assert unused and all(".adapters.pl." in n or ".adapters.ro." in n for n in unused)
    reasons = unused_parameter_reasons(model)
    assert len(reasons) == 1 and "per-utterance routing" in reasons[0]
    assert ddp_training_defaults(model, {})[0]["ddp_find_unused_parameters"] is True


def test_fusion_reaches_every_fused_adapter():
    model = build(languages=("cs", "pl", "ro"), fusion=True, trainable={"adapters": ["cs"], "fusion": True})
    assert unused_parameter_reasons(model) == []
    assert params_without_grad(model) == []


def test_a_trainable_adapter_that_is_not_active_is_reported():
    model = build(languages=("cs", "pl"), active=("cs",), trainable={"adapters": ["cs", "pl"]})
    assert [n for n in params_without_grad(model) if ".adapters." in n]
    assert unused_parameter_reasons(model) == ["trainable adapter(s) ['pl'] are not active"]


def test_wav2vec2_masked_spec_embed_without_time_masking():
    model = build("wav2vec2", mask_time_prob=0.0, mask_feature_prob=0.5)  # feature masking creates the parameter
    assert "backbone.masked_spec_embed" in params_without_grad(model)
    assert any("masked_spec_embed" in r for r in unused_parameter_reasons(model))
    assert unused_parameter_reasons(build("wav2vec2", mask_time_prob=0.5)) == []
    assert unused_parameter_reasons(build("wav2vec2", mask_time_prob=0.0, mask_feature_prob=0.5,
                                          trainable={"head": True})) == []


def test_an_explicit_setting_wins():
    model = build(layerdrop=0.5)
    training, _ = ddp_training_defaults(model, {"ddp_find_unused_parameters": False})
    assert training["ddp_find_unused_parameters"] is False


@pytest.mark.parametrize(
    ("training", "key", "expected"),
    [
        ({"activation_checkpointing": True}, "activation_checkpointing_kwargs", {"use_reentrant": False}),
        ({"gradient_checkpointing": True}, "gradient_checkpointing_kwargs", {"use_reentrant": False}),
        ({"activation_checkpointing": True, "activation_checkpointing_kwargs": {"every_n_layers": 2}},
         "activation_checkpointing_kwargs", {"every_n_layers": 2, "use_reentrant": False}),
        ({"activation_checkpointing": True, "activation_checkpointing_kwargs": '{"use_reentrant": false}'},
         "activation_checkpointing_kwargs", {"use_reentrant": False}),
    ],
)  # fmt: skip
def test_checkpointing_is_made_non_reentrant(training, key, expected):
    out, _ = ddp_training_defaults(build(), training)
    assert out[key] == expected
    assert ddp_training_defaults(build(), {})[0] == {}  # no checkpointing: nothing added


def test_reentrant_checkpointing_is_refused_in_one_line():
    with pytest.raises(StageConfigError, match="use_reentrant=true is not supported"):
        ddp_training_defaults(build(), {"activation_checkpointing": True,
                                        "activation_checkpointing_kwargs": {"use_reentrant": True}})


def test_last_checkpoint_skips_one_killed_while_saving(tmp_path):
    assert last_checkpoint(tmp_path / "missing") is None
    for step, complete in ((5, True), (10, True), (15, False)):
        folder = tmp_path / f"checkpoint-{step}"
        folder.mkdir()
        save_file({"w": torch.zeros(2)}, str(folder / "model.safetensors"))  # complete weights (resume checks them)
        if complete:
            (folder / "trainer_state.json").write_text("{}")
    (tmp_path / "checkpoint-final").mkdir()
    assert last_checkpoint(tmp_path) == str(tmp_path / "checkpoint-10")


def lora_grads(checkpointing: dict | None) -> dict[str, torch.Tensor]:
    """Gradients of a LoRA adapter inside the encoder layers of a frozen backbone (head frozen too)."""
    torch.manual_seed(0)
    config = tiny_config("fbank_conformer")
    model = AdaptSpeechForCTC(config)
    model.add_language_adapter("ro", adapter_type="lora", lora_r=4)
    model.set_active_languages(["ro"])
    model.set_trainable(adapters=["ro"])
    with torch.no_grad():  # LoRA's B starts at zero: give A and B values so that both get gradients
        for param in (p for p in model.parameters() if p.requires_grad):
            param.normal_(0, 0.1)
    model.train()
    if checkpointing is not None:
        model.activation_checkpointing_enable(activation_checkpointing_kwargs=checkpointing)
    inputs = tiny_inputs(config, batch=2)
    model(**inputs, labels=torch.tensor([[5, 6, 7], [6, 7, -100]])).loss.backward()
    return {n: p.grad for n, p in model.named_parameters() if p.requires_grad}


def test_non_reentrant_checkpointing_trains_adapters_inside_frozen_layers():
    """The frozen-input trap: with ``use_reentrant=True`` no input of a checkpointed layer requires grad, so the LoRA
    weights inside get nothing (here the loss has no gradient at all); with what ``ddp_training_defaults`` writes the
    gradients are those of a run without checkpointing."""
    with (
        pytest.warns(UserWarning, match="None of the inputs have requires_grad"),
        pytest.raises(RuntimeError, match="does not require grad"),
    ):
        lora_grads({"use_reentrant": True})
    training, _ = ddp_training_defaults(build(), {"activation_checkpointing": True})
    expected, actual = lora_grads(None), lora_grads(training["activation_checkpointing_kwargs"])
    assert len(expected) == 8 and all(g is not None and g.abs().sum() > 0 for g in expected.values())
    for name, grad in expected.items():
        torch.testing.assert_close(actual[name], grad, msg=name)
