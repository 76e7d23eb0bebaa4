"""The stacked SimAdapter path (:func:`stacked_simadapter_output`: one LayerNorm statistics pass, the adapters'
projections over concatenated weights, no ``[B, T, N, D]`` stack) against the reference (:func:`simadapter_output`:
each adapter's own forward, then the fusion over their stacked outputs): outputs, fusion weights and every gradient,
on the module, in the native block of a model (with and without activation checkpointing, with the fusion block
recomputed) and in the peft layer.

Tolerance: ``TOL`` relative to each tensor's largest magnitude (at least 1). The two paths compute the same function
in float32 in different orders (a folded LayerNorm scale, sums over concatenated adapters, the common ``q . z`` score
term left out), and both round the scores to float32 for the softmax; at these sizes the differences are ~1e-7
relative on the module (``TOL``). Through a whole model (``MODEL_TOL``) the CTC loss (about 330 nats here) sums
per-frame terms that cancel in the gradients, so the same rounding (logits apart by 2e-7) reaches 1.5e-5 of the
largest gradient of ``W_V`` and ``W_Q``: the tolerance of two float32 paths through a tiny model
(``helpers.numerics.PATHS_RTOL``). The key bias ``b_K`` gets a gradient that is zero in exact arithmetic (softmax
ignores a shift common to all entries): it is compared against the scale of ``W_K``'s gradient."""

import contextlib
from types import SimpleNamespace

import pytest
import torch
from helpers.numerics import PATHS_RTOL
from peft import get_peft_model

from adaptspeech import AdaptSpeechForCTC
from adaptspeech.adapters.bottleneck import ACTIVATIONS, BottleneckAdapter, stack_bottlenecks, stackable
from adaptspeech.adapters.fusion import (
    FUSION_RESIDUALS,
    SimAdapterFusion,
    simadapter_output,
    stacked_simadapter_output,
)
from adaptspeech.adapters.layer_forward import fuse, reference_path
from adaptspeech.adapters.peft_method import SpeechAdapterConfig
from adaptspeech.testing import tiny_config, tiny_inputs

pytestmark = pytest.mark.filterwarnings("ignore:`is_gradient_checkpointing` is deprecated:FutureWarning")

#: float32, two summation orders (see the module docstring)
TOL = 1e-5
#: through a tiny model and its CTC loss (see the module docstring)
MODEL_TOL = PATHS_RTOL
#: bfloat16 (8 mantissa bits, eps 7.8e-3): a few roundings in a different order
BF16_TOL = 3e-2
D = 16
#: (width, bias, trains): two width-8 adapters apart (entries 0 and 2, one frozen, one training: one stack with
#: mixed training and non-consecutive entries), and adapters of other widths
ADAPTERS = [(8, False, False), (4, True, True), (8, False, True), (6, False, False)]


def make_adapters(layer_norm=True, activation="relu", dropout=0.0, spec=ADAPTERS, seed=0):
    gen = torch.Generator().manual_seed(seed)
    adapters = []
    for width, bias, trains in spec:
        adapter = BottleneckAdapter(D, width, activation=activation, layer_norm=layer_norm, bias=bias, dropout=dropout)
        with torch.no_grad():
            for name, param in adapter.named_parameters():
                param.copy_(torch.randn(param.shape, generator=gen) * 0.3 + (name == "layer_norm.weight"))
        adapter.requires_grad_(trains)
        adapters.append(adapter)
    return adapters


def make_fusion(entries, seed=1):
    torch.manual_seed(seed)
    fusion = SimAdapterFusion(D, entries, temperature=0.7)
    with torch.no_grad():
        fusion.linear_v.weight.add_(torch.randn(D, D) * 0.2)  # away from the identity: the fusion matters
    return fusion


def run(path, fusion, settings, adapters, dtype=torch.float32, **kwargs):
    """Forward with ``path``, backward of fixed random projections of output and weights; every value by name."""
    gen = torch.Generator().manual_seed(2)
    z = torch.randn(2, 5, D, generator=gen).to(dtype).requires_grad_()
    residual = torch.randn(2, 5, D, generator=gen).to(dtype).requires_grad_()
    modules = {"fusion": fusion, **{f"adapter{i}": a for i, a in enumerate(adapters)}}
    for module in modules.values():
        module.zero_grad(set_to_none=True)
    output, weights = path(fusion, settings, adapters, z, residual, **kwargs)
    loss = (output.float() * torch.randn(output.shape, generator=gen)).sum()
    loss = loss + (weights.float() * torch.randn(weights.shape, generator=gen)).sum()
    loss.backward()
    values = {"output": output.detach(), "weights": weights.detach(), "z.grad": z.grad, "residual.grad": residual.grad}
    for prefix, module in modules.items():
        for name, param in module.named_parameters():
            values[f"{prefix}.{name}.grad"] = param.grad
    return values


def assert_same_values(actual, expected, tol=TOL):
    assert actual.keys() == expected.keys()
    for name, value in expected.items():
        if value is None:
            assert actual[name] is None, name  # no gradient where none was before (frozen adapters, unused residual)
            continue
        scale = max(1.0, float(value.abs().max()))
        if name == "fusion.linear_k.bias.grad":  # zero in exact arithmetic (see the module docstring)
            scale = max(1.0, float(expected["fusion.linear_k.weight.grad"].abs().max()))
        torch.testing.assert_close(actual[name].float(), value.float(), rtol=tol, atol=tol * scale, msg=name)


@pytest.mark.parametrize("recompute", [False, True])
@pytest.mark.parametrize("layer_norm", [True, False])
@pytest.mark.parametrize("residual", FUSION_RESIDUALS)
@pytest.mark.parametrize("include_self", [False, True])
def test_stacked_path_equals_the_reference(include_self, residual, layer_norm, recompute):
    adapters = make_adapters(layer_norm=layer_norm)
    assert stackable(adapters)
    settings = SimpleNamespace(include_self=include_self, residual=residual)
    fusion = make_fusion(len(adapters) + include_self)
    expected = run(simadapter_output, fusion, settings, adapters)
    actual = run(stacked_simadapter_output, fusion, settings, adapters, recompute=recompute)
    assert_same_values(actual, expected)
    assert expected["adapter0.down.weight.grad"] is None and expected["adapter2.down.weight.grad"] is not None


@pytest.mark.parametrize("activation", sorted(ACTIVATIONS))
def test_every_activation_and_one_stack_of_equal_adapters(activation):
    adapters = make_adapters(activation=activation, spec=[(8, True, True), (8, True, False), (8, True, True)])
    assert len(stack_bottlenecks(adapters)) == 1
    settings = SimpleNamespace(include_self=True, residual="query")
    fusion = make_fusion(len(adapters) + 1)
    assert_same_values(run(stacked_simadapter_output, fusion, settings, adapters),
                       run(simadapter_output, fusion, settings, adapters))


def test_stacks_do_not_depend_on_which_adapters_train():
    """The grouping fixes the order of the sums: a model computes the same bits whether its adapters train or not
    (a trained model and its saved and reloaded copy agree exactly)."""
    frozen = make_adapters()
    trained = make_adapters()
    for adapter in trained:
        adapter.requires_grad_(True)
    assert [s.indices for s in stack_bottlenecks(frozen)] == [s.indices for s in stack_bottlenecks(trained)]
    assert [s.indices for s in stack_bottlenecks(frozen)] == [[0, 2], [1], [3]]
    settings = SimpleNamespace(include_self=False, residual="none")
    fusion = make_fusion(len(frozen))
    z = torch.randn(2, 5, D)
    with torch.no_grad():
        a = stacked_simadapter_output(fusion, settings, frozen, z, None)
        b = stacked_simadapter_output(fusion, settings, trained, z, None)
    assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])


def test_dropout_that_acts_takes_the_reference_path_and_eval_mode_the_stacked_one():
    adapters = make_adapters(dropout=0.3)
    settings = SimpleNamespace(include_self=False, residual="query", languages=[str(i) for i in range(4)])
    by_name = dict(zip(settings.languages, adapters, strict=True))
    fusion = make_fusion(len(adapters))
    z = torch.randn(2, 5, D)
    assert not stackable(adapters)  # training mode: a dropout mask per adapter output
    torch.manual_seed(3)
    fused = fuse(z, fusion, settings, by_name, None)
    torch.manual_seed(3)
    reference = simadapter_output(fusion, settings, adapters, z, None)
    assert torch.equal(fused[0], reference[0])  # literally the same computation, the same masks
    for adapter in adapters:
        adapter.eval()
    assert stackable(adapters)  # dropout is the identity in eval mode
    assert_same_values(run(stacked_simadapter_output, fusion, settings, adapters),
                       run(simadapter_output, fusion, settings, adapters))


def test_bfloat16_agrees_within_its_rounding():
    adapters = [a.to(torch.bfloat16) for a in make_adapters()]
    settings = SimpleNamespace(include_self=True, residual="ffn_input")
    fusion = make_fusion(len(adapters) + 1).to(torch.bfloat16)
    expected = run(simadapter_output, fusion, settings, adapters, dtype=torch.bfloat16)
    actual = run(stacked_simadapter_output, fusion, settings, adapters, dtype=torch.bfloat16)
    assert actual["output"].dtype == torch.bfloat16 and actual["weights"].dtype == torch.bfloat16
    assert_same_values(actual, expected, tol=BF16_TOL)


@pytest.fixture
def stacked_calls(monkeypatch):
    """How often the engine took the stacked path."""
    from adaptspeech.adapters import layer_forward

    calls = []

    def counted(*args, **kwargs):
        calls.append(kwargs.get("recompute"))
        return stacked_simadapter_output(*args, **kwargs)

    monkeypatch.setattr(layer_forward, "stacked_simadapter_output", counted)
    return calls


def fused_model(residual="ffn_input"):
    """A tiny wav2vec2 model fusing adapters of widths 8, 4 and 8 (and itself); fusion and the ``pl`` adapter
    train."""
    torch.manual_seed(0)
    model = AdaptSpeechForCTC(tiny_config("wav2vec2", stable_layer_norm=True))
    for language, width in (("ro", 8), ("cs", 4), ("pl", 8)):
        model.add_language_adapter(language, bottleneck=width)
    model.add_fusion(["ro", "cs", "pl"], target_language="pl", include_self=True, residual=residual)
    gen = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if ".adapters." in name or "linear_v" in name:
                param.add_(torch.randn(param.shape, generator=gen) * 0.2)
    model.set_trainable(adapters=["pl"], fusion=True)
    return model.train()


def gradients(model, inputs, reference):
    with reference_path() if reference else contextlib.nullcontext():
        out = model(**inputs, labels=torch.tensor([[4, 5, 6], [5, 6, -100]]), output_fusion_weights=True)
        out.loss.backward()
    values = {"loss": out.loss.detach(), "logits": out.logits.detach()}
    values.update({f"weights{i}": w.detach() for i, w in enumerate(out.fusion_weights)})
    values.update({f"{n}.grad": p.grad for n, p in model.named_parameters() if p.requires_grad})
    model.zero_grad(set_to_none=True)
    return values


@pytest.mark.parametrize(
    ("checkpointing", "recompute", "residual"),
    [
        (None, False, "ffn_input"),
        (None, True, "ffn_input"),
        (False, False, "ffn_input"),
        (False, True, "ffn_input"),
        (True, True, "query"),
    ],
)
def test_native_block_in_a_model_equals_the_reference(checkpointing, recompute, residual, stacked_calls):
    """``checkpointing``: activation checkpointing of whole layers off (None), non-re-entrant (False) or
    re-entrant (True); ``recompute``: the fusion block alone recomputed in backward."""
    model = fused_model(residual)
    inputs = tiny_inputs(model.config)
    expected = gradients(model, inputs, reference=True)
    assert not stacked_calls
    if checkpointing is not None:
        model.activation_checkpointing_enable(activation_checkpointing_kwargs={"use_reentrant": checkpointing})
    model.set_fusion_recompute(recompute)
    actual = gradients(model, inputs, reference=False)
    assert stacked_calls and set(stacked_calls) == {recompute}
    assert any(".adapters.pl." in name for name in actual) and any("linear_q" in name for name in actual)
    assert_same_values(actual, expected, tol=MODEL_TOL)


@pytest.mark.xfail(
    strict=True,
    reason="known: under re-entrant activation checkpointing the first layer's fusion with the ffn_input residual "
    "gets other gradients than without checkpointing, on the reference path too (non-re-entrant is exact)",
)
def test_reentrant_checkpointing_with_the_ffn_input_residual_keeps_the_gradients():
    model = fused_model("ffn_input")
    inputs = tiny_inputs(model.config)
    with reference_path():
        expected = gradients(model, inputs, reference=True)
        model.activation_checkpointing_enable(activation_checkpointing_kwargs={"use_reentrant": True})
        assert_same_values(gradients(model, inputs, reference=True), expected, tol=MODEL_TOL)


def test_peft_layer_equals_the_reference(stacked_calls):
    torch.manual_seed(0)
    base = AdaptSpeechForCTC(tiny_config("wav2vec2"))
    model = get_peft_model(base, SpeechAdapterConfig(bottleneck=8), adapter_name="ro")
    model.add_adapter("cs", SpeechAdapterConfig(bottleneck=4))
    model.add_adapter("fusion", SpeechAdapterConfig(fusion_of=["ro", "cs"], fusion_residual="ffn_input"))
    gen = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if "speech_adapter" in name:
                param.add_(torch.randn(param.shape, generator=gen) * 0.2)
    model.set_adapter("fusion")
    model.train()
    inputs = tiny_inputs(base.config)

    def values(reference):
        with reference_path() if reference else contextlib.nullcontext():
            out = model(**inputs, labels=torch.tensor([[4, 5, 6], [5, 6, -100]]))
            out.loss.backward()
        found = {"loss": out.loss.detach(), "logits": out.logits.detach()}
        found.update({f"{n}.grad": p.grad for n, p in model.named_parameters() if p.requires_grad})
        model.zero_grad(set_to_none=True)
        return found

    expected = values(reference=True)
    assert any("speech_adapter_fusion" in name for name in expected) and not stacked_calls
    assert_same_values(values(reference=False), expected, tol=MODEL_TOL)
    assert stacked_calls


def test_recompute_without_a_fusion_is_refused():
    model = AdaptSpeechForCTC(tiny_config("wav2vec2", adapter_languages=["ro"]))
    with pytest.raises(ValueError, match=r"no fusion to recompute: call add_fusion\(languages\) first"):
        model.set_fusion_recompute(True)
