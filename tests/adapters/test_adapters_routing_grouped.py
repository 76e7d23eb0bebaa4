"""The grouped routing of several languages in one batch (``engine._route_grouped``) against the routing before it
(``engine._route_masked``, run inside ``reference_path()``): outputs and every gradient, on the engine alone, through
a model (bottleneck and LoRA languages mixed, with and without activation checkpointing) and through the peft
``speech_adapter`` layer.

Tolerance: every adapter runs the same products on the same rows in both paths, and the rest is gathering and
copying, so the numbers are the same; the one difference is where a language's rows lie in memory (a block of one
gathered tensor instead of a copy of their own), and a BLAS kernel may be chosen by the address's alignment, which
changes the order of a sum: ``SAME`` allows that last-bit rounding of float32 and nothing a wrong row could hide
behind (a wrong routing moves outputs by 1e-2 or more).
"""

from __future__ import annotations

import pytest
import torch
from peft import get_peft_model
from torch import nn

from adaptspeech import AdaptSpeechForCTC
from adaptspeech.adapters.bottleneck import BottleneckAdapter
from adaptspeech.adapters.layer_forward import reference_path, route
from adaptspeech.adapters.peft_method import SpeechAdapterConfig
from adaptspeech.testing import tiny_config, tiny_inputs

SAME = {"rtol": 1e-6, "atol": 1e-7}
LORA = {"adapter_type": "lora", "lora_r": 4, "lora_alpha": 8}

pytestmark = pytest.mark.filterwarnings("ignore:`is_gradient_checkpointing` is deprecated:FutureWarning")


def adapters(width: int = 16) -> nn.ModuleDict:
    """Three languages' adapters with random weights (two widths)."""
    torch.manual_seed(0)
    modules = nn.ModuleDict({"ro": BottleneckAdapter(width, 4), "cs": BottleneckAdapter(width, 8),
                             "pl": BottleneckAdapter(width, 4)})
    with torch.no_grad():
        for param in modules.parameters():
            param.add_(torch.randn_like(param) * 0.3)
    return modules


def routed_with_gradients(modules: nn.ModuleDict, rows: list[str], reference: bool) -> tuple[torch.Tensor, dict]:
    """``route`` on a random ``[B, 5, 16]`` input; its output, and the gradients of a weighted sum of it with respect
    to the input and every adapter tensor."""
    z = torch.randn(len(rows), 5, 16, generator=torch.Generator().manual_seed(1)).requires_grad_(True)
    weight = torch.randn(len(rows), 5, 16, generator=torch.Generator().manual_seed(2))
    modules.zero_grad(set_to_none=True)
    with reference_path() if reference else torch.enable_grad():
        out = route(z, modules, ["ro", "cs", "pl", "sk"], rows, "test layer")
    (out * weight).sum().backward()
    grads = {"z": z.grad, **{n: p.grad for n, p in modules.named_parameters() if p.grad is not None}}
    return out.detach(), grads


@pytest.mark.parametrize(
    "rows",
    [
        ["cs", "ro", "__base__", "cs", "pl", "ro"],  # interleaved, with a row that has no adapter
        ["ro", "ro", "cs", "pl"],  # already grouped: no gathering
        ["sk", "cs", "ro", "sk"],  # an active language without an adapter on this layer
        ["cs", "cs", "cs"],  # one language: its adapter on the whole batch
        ["pl"],
    ],
)
def test_grouped_routing_equals_the_masked_one(rows):
    modules = adapters()
    expected, expected_grads = routed_with_gradients(modules, rows, reference=True)
    actual, grads = routed_with_gradients(modules, rows, reference=False)
    torch.testing.assert_close(actual, expected, **SAME)
    assert sorted(grads) == sorted(expected_grads)
    for name, grad in expected_grads.items():
        torch.testing.assert_close(grads[name], grad, **SAME, msg=lambda m, name=name: f"{name}: {m}")
    # and it routes: each utterance equals its own language's adapter (or itself) alone
    z = torch.randn(len(rows), 5, 16, generator=torch.Generator().manual_seed(1))
    for i, lang in enumerate(rows):
        alone = modules[lang](z[i : i + 1]) if lang in modules else z[i : i + 1]
        torch.testing.assert_close(actual[i : i + 1], alone.detach(), rtol=1e-5, atol=1e-6)


def routed_model(checkpointing: bool) -> AdaptSpeechForCTC:
    """ro: LoRA, cs and pl: bottleneck; all active, routed per utterance, everything trainable."""
    torch.manual_seed(0)
    model = AdaptSpeechForCTC(tiny_config("wav2vec2", adapters={"ro": LORA, "cs": {"bottleneck": 8},
                                                                   "pl": {"bottleneck": 4}}))
    with torch.no_grad():
        for name, param in model.named_parameters():
            if (".lora_" in name or ".language_adapters." in name) and "layer_norm" not in name:
                param.add_(torch.randn_like(param) * 0.3)
    model.set_active_languages(["ro", "cs", "pl"])
    model.set_trainable(adapters=["ro", "cs", "pl"], head=True, backbone=True)
    if checkpointing:
        model.activation_checkpointing_enable(activation_checkpointing_kwargs={"use_reentrant": False})
    return model.train()


def step(model: nn.Module, reference: bool, **call: object) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Loss and every gradient of one training forward + backward (the same dropout masks in both paths)."""
    inputs = tiny_inputs(model.config if hasattr(model, "config") else model.base_model.model.config, batch=4)
    labels = torch.tensor([[4, 5, 6, 7], [5, 6, 7, -100], [6, 7, -100, -100], [7, 4, 5, -100]])
    model.zero_grad(set_to_none=True)
    torch.manual_seed(0)
    with reference_path() if reference else torch.enable_grad():
        loss = model(**inputs, labels=labels, **call).loss
        loss.backward()
    return loss.detach(), {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


@pytest.mark.parametrize("checkpointing", [False, True])
def test_a_routed_training_step_equals_the_masked_routing(checkpointing):
    model = routed_model(checkpointing)
    ids = model.language_to_id
    lang_ids = torch.tensor([ids[lang] for lang in ("cs", "ro", "pl", "cs")])
    expected_loss, expected = step(model, True, lang_ids=lang_ids)
    loss, grads = step(model, False, lang_ids=lang_ids)
    torch.testing.assert_close(loss, expected_loss, **SAME)
    assert sorted(grads) == sorted(expected)
    assert any(".language_adapters.adapters.pl." in name for name in grads)  # the routed adapters are reached
    for name, grad in expected.items():
        torch.testing.assert_close(grads[name], grad, **SAME, msg=lambda m, name=name: f"{name}: {m}")


def test_the_peft_layer_routes_as_before():
    torch.manual_seed(0)
    config = tiny_config("wav2vec2")
    peft_model = get_peft_model(AdaptSpeechForCTC(config), SpeechAdapterConfig(bottleneck=8), adapter_name="ro")
    peft_model.add_adapter("cs", SpeechAdapterConfig(bottleneck=4))
    with torch.no_grad():
        for name, param in peft_model.named_parameters():
            if ".speech_adapter_" in name and "layer_norm" not in name:
                param.add_(torch.randn_like(param) * 0.3)
    peft_model.base_model.set_adapter(["ro", "cs"])
    for name, param in peft_model.named_parameters():
        param.requires_grad_(".speech_adapter_" in name)
    peft_model.train()
    rows = ["cs", "__base__", "ro", "cs"]
    expected_loss, expected = step(peft_model, True, adapter_names=rows)
    loss, grads = step(peft_model, False, adapter_names=rows)
    torch.testing.assert_close(loss, expected_loss, **SAME)
    assert sorted(grads) == sorted(expected) and len(expected) > 0
    for name, grad in expected.items():
        torch.testing.assert_close(grads[name], grad, **SAME, msg=lambda m, name=name: f"{name}: {m}")
