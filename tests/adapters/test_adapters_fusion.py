"""SimAdapter fusion against Hou et al. 2021 ("Exploiting adapters for cross-lingual low-resource speech
recognition"): W_V initialisation, L_reg, attention over languages, guide loss."""

import pytest
import torch

from adaptspeech import AdaptSpeechForCTC
from adaptspeech.adapters.fusion import SimAdapterFusion, guide_loss
from adaptspeech.testing import tiny_config, tiny_inputs

LANGS = ["ro", "cs", "pl"]


def fused_model(**fusion_settings):
    torch.manual_seed(0)
    config = tiny_config(adapter_languages=LANGS, adapter_defaults={"bottleneck": 8})
    model = AdaptSpeechForCTC(config)
    model.add_fusion(LANGS, target_language="ro", **fusion_settings)
    return model


def test_value_projection_is_the_paper_initialisation():
    model = fused_model()
    d = model.config.hidden_size
    expected = torch.full((d, d), 1e-6)
    expected.fill_diagonal_(1.0)
    for block in model.adapter_blocks.values():
        assert torch.equal(block.fusion.linear_v.weight.detach(), expected)
        assert block.fusion.linear_v.bias is None


def test_regulariser_equals_hand_computation_and_grows_when_w_v_moves():
    model = fused_model(reg_weight=0.01)
    d, layers = model.config.hidden_size, len(model.adapter_blocks)
    hand = layers * d * (d - 1) * (1e-6) ** 2  # only the off-diagonal 1e-6 entries differ from I
    assert model.fusion_regularizer().item() == pytest.approx(hand, rel=1e-4)

    inputs = tiny_inputs(model.config)
    labels = torch.tensor([[4, 5, 6, -100], [5, 6, 7, 8]])
    out = model(**inputs, labels=labels)
    assert out.loss_fusion_reg.item() == pytest.approx(0.01 * hand, rel=1e-4)
    assert torch.allclose(out.loss, out.loss_ctc + out.loss_fusion_reg)

    w_v = model.adapter_blocks[0].fusion.linear_v.weight
    with torch.no_grad():
        w_v[0, 1] += 0.5
    perturbed = model.fusion_regularizer()
    assert perturbed.item() == pytest.approx(hand + (0.5 + 1e-6) ** 2 - (1e-6) ** 2, rel=1e-4)
    assert perturbed.item() > hand
    model.zero_grad()
    model(**inputs, labels=labels).loss.backward()
    grad = w_v.grad
    assert grad is not None and grad[0, 1].abs() > 0
    # d/dW (reg_weight * (w - I)^2) is part of the gradient: check it on the regulariser alone
    model.zero_grad()
    model.fusion_regularizer().backward()
    assert w_v.grad[0, 1].item() == pytest.approx(2 * (0.5 + 1e-6), rel=1e-4)


def test_fusion_weights_are_a_distribution_over_languages():
    model = fused_model()
    model.eval()
    inputs = tiny_inputs(model.config)
    out = model(**inputs, output_fusion_weights=True)
    assert len(out.fusion_weights) == model.config.num_encoder_layers
    for weights in out.fusion_weights:
        assert weights.shape[-1] == len(LANGS)
        assert (weights >= 0).all()
        assert torch.allclose(weights.sum(-1), torch.ones_like(weights.sum(-1)), atol=1e-6)


def naive_simadapter(fusion: SimAdapterFusion, z, entries, tau):
    """Hou et al. 2021 with explicit loops: sum_i softmax_i((z W_Q)(a_i W_K)^T / tau) (a_i W_V)."""
    B, T, N, D = entries.shape
    out = torch.zeros(B, T, D)
    weights = torch.zeros(B, T, N)
    for b in range(B):
        for t in range(T):
            q = fusion.linear_q(z[b, t])
            scores = torch.stack([q @ fusion.linear_k(entries[b, t, i]) / tau for i in range(N)])
            p = torch.softmax(scores, dim=0)
            weights[b, t] = p
            for i in range(N):
                out[b, t] += p[i] * fusion.linear_v(entries[b, t, i])
    return out, weights


@pytest.mark.parametrize("tau", [1.0, 3.0])
def test_fusion_equals_the_paper_equation(tau):
    torch.manual_seed(1)
    fusion = SimAdapterFusion(8, 3, temperature=tau)
    with torch.no_grad():
        fusion.linear_v.weight.add_(0.1 * torch.randn(8, 8))
    z = torch.randn(2, 4, 8)
    entries = torch.randn(2, 4, 3, 8)
    got, weights = fusion(z, entries)
    ref, ref_weights = naive_simadapter(fusion, z, entries, tau)
    assert torch.allclose(got, ref, atol=1e-5)
    assert torch.allclose(weights, ref_weights, atol=1e-6)
    residual = torch.randn(2, 4, 8)
    with_residual, _ = fusion(z, entries, residual)
    assert torch.allclose(with_residual, ref + residual, atol=1e-5)


@pytest.mark.parametrize("residual", ["ffn_input", "query", "none"])
def test_fused_layer_output_uses_the_documented_residual(residual):
    """The layer output after fusion equals the SimAdapter equation on the captured tensors."""
    model = fused_model(residual=residual)
    model.eval()
    layer = model.backbone.encoder.layers[1]
    captured = {}
    layer.layer_norm.register_forward_hook(lambda m, a, o: captured.__setitem__("ffn_input", o))
    handle = layer.register_forward_hook(lambda m, a, o: captured.__setitem__("out", o))
    # the raw layer output z (before the adapter hook) is the final_layer_norm's output in post-LN layers
    layer.final_layer_norm.register_forward_hook(lambda m, a, o: captured.__setitem__("z", o))
    model(**tiny_inputs(model.config))
    handle.remove()
    block = layer.language_adapters
    z = captured["z"]
    entries = torch.stack([block.adapters[lang](z) for lang in LANGS], dim=2)
    expected, _ = block.fusion(z, entries, {"ffn_input": captured["ffn_input"], "query": z, "none": None}[residual])
    assert torch.allclose(captured["out"], expected, atol=1e-6)


def test_include_self_adds_the_layer_output_as_an_entry():
    model = fused_model(include_self=True)
    out = model(**tiny_inputs(model.config), output_fusion_weights=True)
    assert out.fusion_weights[0].shape[-1] == len(LANGS) + 1


def test_guide_loss_pulls_toward_the_target_language():
    weights = torch.tensor([[[0.2, 0.3, 0.5], [0.6, 0.2, 0.2]]])
    mask = torch.tensor([[True, False]])
    assert guide_loss(weights, 0, mask).item() == pytest.approx(-torch.log(torch.tensor(0.2)).item())
    assert guide_loss(weights, 0).item() == pytest.approx(-torch.log(torch.tensor(0.4)).item())

    model = fused_model(guide_weight=0.5)
    inputs = tiny_inputs(model.config)
    out = model(**inputs, labels=torch.tensor([[4, 5, -100], [5, 6, 7]]), output_fusion_weights=True)
    mask = torch.ones(2, out.logits.shape[1], dtype=torch.bool)
    mask[1, out.frame_lengths[1] :] = False
    hand = 0.5 * sum(guide_loss(w, 0, mask) for w in out.fusion_weights)
    assert out.loss_fusion_guide.item() == pytest.approx(hand.item(), rel=1e-5)
    assert torch.allclose(out.loss, out.loss_ctc + out.loss_fusion_reg + out.loss_fusion_guide)


def test_fusion_gradients_equal_the_paper_equations():
    """The forward computes the paper's equation in a cheaper order; every gradient (fusion parameters, query,
    adapter outputs) equals the naive per-frame implementation's."""
    torch.manual_seed(2)
    fusion = SimAdapterFusion(8, 3, temperature=2.0)
    with torch.no_grad():
        fusion.linear_v.weight.add_(0.1 * torch.randn(8, 8))
    z = torch.randn(2, 4, 8, requires_grad=True)
    entries = torch.randn(2, 4, 3, 8, requires_grad=True)
    upstream, upstream_weights = torch.randn(2, 4, 8), torch.randn(2, 4, 3)
    got, weights = fusion(z, entries)
    (got * upstream).sum().add((weights * upstream_weights).sum()).backward()
    fast = [p.grad.clone() for p in (z, entries, *fusion.parameters())]
    for p in (z, entries, *fusion.parameters()):
        p.grad = None
    ref, ref_weights = naive_simadapter(fusion, z, entries, 2.0)
    (ref * upstream).sum().add((ref_weights * upstream_weights).sum()).backward()
    slow = [p.grad for p in (z, entries, *fusion.parameters())]
    for a, b in zip(fast, slow, strict=True):
        assert torch.allclose(a, b, atol=1e-5)
