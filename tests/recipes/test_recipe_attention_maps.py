"""The attention study's maps (recipes/attention_study/attention_maps.py): effective attention read by one-hot probe
values, exact for every kind (A V equals the module's own context), equal to the explicit matrices where a kind has
one, zero outside a kind's pattern; and the per-model reading."""

from __future__ import annotations

import math

import pytest
import torch
from helpers.recipes import STUDY

from adaptspeech.attention import ATTENTION, AttentionConfig
from adaptspeech.recipes import recipe_module

attention_maps = recipe_module(STUDY, "attention_maps.py")
attention_context, effective_attention = attention_maps.attention_context, attention_maps.effective_attention
model_attention_maps, plot_attention_maps = attention_maps.model_attention_maps, attention_maps.plot_attention_maps
probe_values, reconstruction_error = attention_maps.probe_values, attention_maps.reconstruction_error

FRAMES, REAL = 19, 15  # 19 frames of which the last 4 are padding; head_dim 8 -> 3 probes, the last one partial
SETTINGS = {
    "sparse_strided": {"sparse_block_size": 4},
    "sparse_fixed": {"sparse_block_size": 4},
    "ldsa": {"context_width": 5},
    **{k: {"lsh_num_keys": 5} for k in ("lsh_sign_alsh", "lsh_xbox", "lsh_xbox_qnf", "lsh_simple", "lsh_simple_alsh")},
}
CASES = [{"kind": k, **SETTINGS.get(k, {})} for k in ATTENTION.names()] + [
    {"kind": "ldsa", "context_width": 5, "hybrid": True},
    {"kind": "synthesizer_random", "synthesizer_init": "fixed_patterns"},
]


def _module(dropout: float = 0.0, **settings):
    torch.manual_seed(0)
    extra = {"synthesizer_max_len": 40} if settings["kind"].startswith("synthesizer") else {}
    config = AttentionConfig(**settings, **extra, hidden_size=16, num_heads=2, dropout=dropout)
    return ATTENTION.get(config.kind)(config)


def _inputs():
    generator = torch.Generator().manual_seed(1)
    hidden = torch.randn(1, FRAMES, 16, generator=generator)
    mask = torch.zeros(1, FRAMES, dtype=torch.bool)
    mask[0, :REAL] = True
    return hidden, mask


def test_probe_values_put_each_value_row_in_one_probe_column():
    probe = probe_values(frames=11, num_heads=2, head_dim=4).view(3, 11, 2, 4)  # ceil(11 / 4) = 3 probes
    assert probe.sum() == 11 * 2
    for row in range(11):
        for head in range(2):
            assert probe[row // 4, row, head, row % 4] == 1


@pytest.mark.parametrize("settings", CASES, ids=lambda s: "_".join(str(v) for v in s.values()))
def test_weights_reproduce_the_module_context_and_ignore_padding(settings):
    module = _module(dropout=0.3, **settings).train()  # read in eval mode whatever the module's mode
    hidden, mask = _inputs()
    weights = effective_attention(module, hidden, mask)
    assert weights.shape == (2, FRAMES, FRAMES)
    assert module.training  # mode restored
    assert reconstruction_error(module, hidden, mask, weights) < 1e-5
    # A V with the real values is the module's own context, computed independently here
    context = attention_context(module, hidden, mask)[0]
    values = module.split_heads(module.value_proj(hidden))[0]
    assert torch.allclose(module.merge_heads((weights @ values)[None])[0], context, atol=1e-5)
    real_rows = weights[:, :REAL]
    assert torch.allclose(real_rows.sum(-1), torch.ones(2, REAL), atol=1e-5)
    assert real_rows.min() >= 0
    assert real_rows[:, :, REAL:].abs().max() == 0  # no weight on padded keys


def test_mhsa_weights_are_the_scaled_dot_product_softmax():
    module = _module(kind="mhsa").eval()
    hidden, _ = _inputs()
    weights = effective_attention(module, hidden)
    query = module.split_heads(module.q_proj(hidden))[0]
    key = module.split_heads(module.k_proj(hidden))[0]
    expected = torch.softmax(query @ key.transpose(-1, -2) / math.sqrt(module.head_dim), dim=-1)
    assert torch.allclose(weights, expected, atol=1e-6)


def test_ldsa_weights_are_its_local_weights_on_the_band():
    module = _module(kind="ldsa", context_width=5).eval()
    hidden, _ = _inputs()
    weights = effective_attention(module, hidden)
    local = module.local_weights(hidden, None)[0]  # [T, h, c]
    for i in range(FRAMES):
        for j in range(FRAMES):
            offset = j - i + 2
            expected = local[i, :, offset] if 0 <= offset < 5 else torch.zeros(2)
            assert torch.allclose(weights[:, i, j], expected, atol=1e-6), (i, j)


def test_random_synthesizer_weights_are_its_logits_softmax_whatever_the_input():
    module = _module(kind="synthesizer_random").eval()
    hidden, _ = _inputs()
    expected = torch.softmax(module.logits[:, :FRAMES, :FRAMES], dim=-1)
    assert torch.allclose(effective_attention(module, hidden), expected, atol=1e-6)
    assert torch.allclose(effective_attention(module, hidden * 3 + 1), expected, atol=1e-6)


def test_sparse_strided_weights_stay_inside_the_pattern():
    module = _module(kind="sparse_strided", sparse_block_size=4).eval()
    hidden, _ = _inputs()
    weights = effective_attention(module, hidden)
    i, j = torch.arange(FRAMES)[:, None], torch.arange(FRAMES)[None]
    local, strided = (i - j).abs() < 4, (i - j) % 4 == 0
    assert weights[0][~local].abs().max() == 0
    assert weights[1][~strided].abs().max() == 0
    assert (weights[0][local & (i != j)] > 0).all()  # every other frame of the window gets weight


def test_effective_attention_reads_one_utterance():
    module = _module(kind="mhsa")
    with pytest.raises(ValueError, match=r"one utterance"):
        effective_attention(module, torch.randn(2, 5, 16))


def test_model_maps_label_layers_and_nested_stages(tmp_path):
    from adaptspeech import AdaptSpeechForCTC
    from adaptspeech.configuration import AdaptSpeechConfig

    config = AdaptSpeechConfig(
        backbone_type="fbank_conformer",
        backbone_config={
            "hidden_size": 16,
            "num_hidden_layers": 2,
            "num_attention_heads": 2,
            "intermediate_size": 32,
            "conv_depthwise_kernel_size": 3,
        },
        vocab_size=12,
        attention={"kind": "ldsa", "context_width": 3, "hybrid": True},
    )
    model = AdaptSpeechForCTC(config).train()
    features = torch.randn(1, 40, 80)
    maps = model_attention_maps(model, {"input_features": features})
    assert model.training
    assert [m.label for m in maps] == ["L0", "L0 mhsa", "L1", "L1 mhsa"]
    frames = 10  # 40 filterbank frames -> two stride-2 convolutions
    for item in maps:
        assert item.weights.shape == (2, frames, frames)
        assert item.error < 1e-5
    # the LDSA stage is banded (c = 3), its MHSA stage is dense
    band = torch.ones(frames, frames).triu(-1).tril(1).bool().numpy()
    assert abs(maps[0].weights[:, ~band]).max() == 0
    assert (maps[1].weights > 0).all()
    path = plot_attention_maps(maps, tmp_path / "maps.png", "tiny")
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
