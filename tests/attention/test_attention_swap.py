"""Layer surgery into tiny transformers encoders: wav2vec2 (both layer-norm variants) and wav2vec2-conformer
(relative and no position embeddings). Swaps work, train, round-trip through a saved state dict, and with
``mhsa`` / ``rel_pos`` and copied weights reproduce the original model."""

from __future__ import annotations

import copy
import pickle
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file
from transformers import PreTrainedModel, Wav2Vec2Config, Wav2Vec2ConformerConfig, Wav2Vec2ConformerModel, Wav2Vec2Model
from transformers.masking_utils import create_bidirectional_mask

from adaptspeech.attention import (
    ATTENTION,
    AttentionConfig,
    EncoderAttention,
    padding_mask_from_hf,
    settings_for_kind,
    swap_encoder_attention,
)

SMALL = {
    "hidden_size": 32,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "intermediate_size": 48,
    "conv_dim": (16, 16),
    "conv_stride": (5, 4),
    "conv_kernel": (10, 4),
    "num_conv_pos_embeddings": 8,
    "num_conv_pos_embedding_groups": 4,
    "hidden_dropout": 0.0,
    "attention_dropout": 0.0,
    "activation_dropout": 0.0,
    "feat_proj_dropout": 0.0,
    "layerdrop": 0.0,
    "mask_time_prob": 0.0,
}

#: backbone name -> (factory, attribute of the attention in each layer)
BACKBONES = {
    "wav2vec2_post_ln": (lambda impl: Wav2Vec2Model(wav2vec2_config(False, impl)), "attention"),
    "wav2vec2_stable_ln": (lambda impl: Wav2Vec2Model(wav2vec2_config(True, impl)), "attention"),
    "conformer_relative": (lambda impl: Wav2Vec2ConformerModel(conformer_config("relative", impl)), "self_attn"),
    "conformer_none": (lambda impl: Wav2Vec2ConformerModel(conformer_config(None, impl)), "self_attn"),
}


def wav2vec2_config(stable: bool, implementation: str) -> Wav2Vec2Config:
    config = Wav2Vec2Config(**SMALL, do_stable_layer_norm=stable, feat_extract_norm="layer" if stable else "group")
    config._attn_implementation = implementation
    return config


def conformer_config(positions: str | None, implementation: str) -> Wav2Vec2ConformerConfig:
    config = Wav2Vec2ConformerConfig(**SMALL, position_embeddings_type=positions, conv_depthwise_kernel_size=3)
    config._attn_implementation = implementation
    return config


def build(backbone: str, implementation: str = "sdpa") -> tuple[PreTrainedModel, str]:
    torch.manual_seed(0)
    factory, attr = BACKBONES[backbone]
    model = factory(implementation).eval()
    for module in model.modules():  # transformers initialises the position biases; make them matter
        if hasattr(module, "pos_bias_u"):
            torch.nn.init.normal_(module.pos_bias_u)
            torch.nn.init.normal_(module.pos_bias_v)
    return model, attr


def inputs() -> tuple[torch.Tensor, torch.Tensor]:
    torch.manual_seed(1)
    audio = torch.randn(2, 1600)
    mask = torch.ones(2, 1600, dtype=torch.long)
    mask[1, 1000:] = 0
    return audio, mask


def frame_mask(model: PreTrainedModel, mask: torch.Tensor, frames: int) -> torch.Tensor:
    return model._get_feature_vector_attention_mask(frames, mask)


def attention_config(kind: str, **settings: object) -> AttentionConfig:
    defaults = {"synthesizer_max_len": 128, "context_width": 5}
    defaults.update(settings)
    return AttentionConfig(kind=kind, **settings_for_kind(kind, defaults))


@pytest.mark.parametrize("implementation", ["sdpa", "eager"])
@pytest.mark.parametrize(
    ("backbone", "kind"),
    [
        ("wav2vec2_post_ln", "mhsa"),
        ("wav2vec2_stable_ln", "mhsa"),
        ("conformer_none", "mhsa"),
        ("conformer_relative", "rel_pos"),
        ("wav2vec2_post_ln", "rel_pos"),
        ("conformer_none", "rel_pos"),
    ],
)
def test_copied_weights_reproduce_the_original(backbone: str, kind: str, implementation: str) -> None:
    """``mhsa`` in plain-attention layers and ``rel_pos`` in relative ones compute what the original did;
    ``rel_pos`` copied from plain attention starts with zeroed position terms, so it does too."""
    model, attr = build(backbone, implementation)
    audio, mask = inputs()
    with torch.no_grad():
        expected = model(audio, attention_mask=mask).last_hidden_state
        assert swap_encoder_attention(model.encoder.layers, attr, attention_config(kind)) == [0, 1]
        out = model(audio, attention_mask=mask).last_hidden_state
    assert all(type(getattr(layer, attr)).__name__.startswith("HF") for layer in model.encoder.layers)
    torch.testing.assert_close(out, expected, atol=1e-5, rtol=0)


@pytest.mark.parametrize("backbone", list(BACKBONES))
@pytest.mark.parametrize("kind", ATTENTION.names())
def test_every_kind_swaps_trains_and_round_trips(backbone: str, kind: str, tmp_path: Path) -> None:
    model, attr = build(backbone)
    audio, mask = inputs()
    swapped = swap_encoder_attention(model.encoder.layers, attr, attention_config(kind, layers=[1]))
    assert swapped == [1]
    assert not isinstance(getattr(model.encoder.layers[0], attr), EncoderAttention)
    new = getattr(model.encoder.layers[1], attr)
    assert isinstance(new, ATTENTION.get(kind))

    model.train()
    out = model(audio, attention_mask=mask).last_hidden_state
    frames = frame_mask(model, mask, out.shape[1])
    (out * frames[..., None]).pow(2).mean().backward()
    for name, param in new.named_parameters():
        assert param.grad is not None, f"{kind} in {backbone}: no gradient for {name}"
    assert any(param.grad.abs().sum() > 0 for param in new.parameters())

    # save the whole model, rebuild it from the config, swap (no copying), load: same outputs
    model.eval()
    model.save_pretrained(tmp_path)
    rebuilt, _ = build(backbone)
    swap_encoder_attention(rebuilt.encoder.layers, attr, attention_config(kind, layers=[1], init_from_pretrained=False))
    rebuilt.load_state_dict(load_file(tmp_path / "model.safetensors"), strict=True)
    with torch.no_grad():
        torch.testing.assert_close(
            rebuilt(audio, attention_mask=mask).last_hidden_state,
            model(audio, attention_mask=mask).last_hidden_state,
        )


@pytest.mark.parametrize(("backbone", "kind"), [("wav2vec2_stable_ln", "mhsa"), ("conformer_relative", "rel_pos")])
def test_checkpoint_keys_are_unchanged(backbone: str, kind: str) -> None:
    """Same-meaning weights keep transformers' names, so the backbone's own checkpoints load into the swap."""
    model, attr = build(backbone)
    keys = set(model.state_dict())
    swap_encoder_attention(model.encoder.layers, attr, attention_config(kind, init_from_pretrained=False))
    assert set(model.state_dict()) == keys
    original, _ = build(backbone)
    model.load_state_dict(original.state_dict(), strict=True)
    audio, mask = inputs()
    with torch.no_grad():
        torch.testing.assert_close(
            model(audio, attention_mask=mask).last_hidden_state,
            original(audio, attention_mask=mask).last_hidden_state,
            atol=1e-5,
            rtol=0,
        )


def test_padding_does_not_leak_through_the_swapped_model() -> None:
    model, attr = build("wav2vec2_stable_ln")
    swap_encoder_attention(model.encoder.layers, attr, attention_config("ldsa"))
    torch.manual_seed(2)
    hidden = torch.randn(2, 9, 32)
    mask = torch.tensor([[1] * 9, [1] * 6 + [0] * 3])
    noisy = hidden.clone()
    noisy[1, 6:] = 50 * torch.randn(3, 32)
    with torch.no_grad():
        a = model.encoder(hidden.clone(), attention_mask=mask.bool()).last_hidden_state
        b = model.encoder(noisy, attention_mask=mask.bool()).last_hidden_state
    torch.testing.assert_close(a[1, :6], b[1, :6], atol=1e-5, rtol=0)


def test_default_kind_swaps_nothing() -> None:
    model, attr = build("wav2vec2_post_ln")
    before = [getattr(layer, attr) for layer in model.encoder.layers]
    assert swap_encoder_attention(model.encoder.layers, attr, AttentionConfig()) == []
    assert [getattr(layer, attr) for layer in model.encoder.layers] == before


def test_attention_settings_are_used_and_checked() -> None:
    model, attr = build("conformer_relative")
    swap_encoder_attention(model.encoder.layers, attr, attention_config("ldsa", num_heads=8, context_width=3))
    layer_attention = model.encoder.layers[0].self_attn
    assert (layer_attention.num_heads, layer_attention.hidden_size, layer_attention.context_width) == (8, 32, 3)
    assert layer_attention.w2.shape == (8, 4, 3)
    with pytest.raises(ValueError, match="no attribute 'attention'"):
        swap_encoder_attention(model.encoder.layers, "attention", attention_config("mhsa"))
    with pytest.raises(ValueError, match=r"\[2\] out of range"):
        swap_encoder_attention(model.encoder.layers, "self_attn", attention_config("mhsa", layers=[2]))


def test_swapped_modules_copy_and_pickle() -> None:
    model, attr = build("wav2vec2_post_ln")
    swap_encoder_attention(model.encoder.layers, attr, attention_config("synthesizer_dense"))
    clone = copy.deepcopy(model)
    again = pickle.loads(pickle.dumps(model.encoder.layers[0].attention))
    x = torch.randn(1, 5, 32)
    with torch.no_grad():
        expected = model.encoder.layers[0].attention(x)[0]
        torch.testing.assert_close(clone.encoder.layers[0].attention(x)[0], expected)
        torch.testing.assert_close(again(x)[0], expected)


@pytest.mark.parametrize("implementation", ["sdpa", "eager"])
def test_padding_mask_from_transformers_masks(implementation: str) -> None:
    config = wav2vec2_config(False, implementation)
    hidden = torch.randn(3, 6, 32)
    padding = torch.tensor([[True] * 6, [True] * 4 + [False] * 2, [True] + [False] * 5])
    hf_mask = create_bidirectional_mask(config=config, inputs_embeds=hidden, attention_mask=padding)
    assert hf_mask.shape == (3, 1, 6, 6)
    assert torch.equal(padding_mask_from_hf(hf_mask, hidden), padding)
    assert torch.equal(padding_mask_from_hf(padding.long(), hidden), padding)  # flash attention passes 2D
    no_padding = create_bidirectional_mask(config=config, inputs_embeds=hidden, attention_mask=torch.ones(3, 6))
    if no_padding is not None:
        assert bool(padding_mask_from_hf(no_padding, hidden).all())
    assert padding_mask_from_hf(None, hidden) is None


def test_unreadable_masks_are_refused() -> None:
    hidden = torch.randn(2, 4, 32)
    with pytest.raises(TypeError, match="BlockMask is not supported"):
        padding_mask_from_hf(object(), hidden)
    with pytest.raises(ValueError, match="2D"):
        padding_mask_from_hf(torch.ones(2, 4, 4, dtype=torch.bool), hidden)
    with pytest.raises(ValueError, match="does not match"):
        padding_mask_from_hf(torch.ones(2, 5, dtype=torch.bool), hidden)
