"""Behaviour every attention kind shares, parametrised over ``ATTENTION.names()`` (plus the kinds' options):
output shape, gradients reaching every parameter, padding invariance, and the chunk-mask dependency structure."""

from __future__ import annotations

import pytest
import torch
from helpers.attention import influence

from adaptspeech.attention import ATTENTION, AttentionConfig, EncoderAttention, settings_for_kind

HIDDEN, HEADS = 16, 4

#: every registered kind with its default settings, plus the options that change the computation.
VARIANTS: dict[str, dict] = {
    **{name: {"kind": name} for name in ATTENTION.names()},
    "ldsa_hybrid": {"kind": "ldsa", "hybrid": True},
    "ldsa_no_bias": {"kind": "ldsa", "bias": False, "context_width": 3},
    "synthesizer_fixed": {"kind": "synthesizer_random", "synthesizer_init": "fixed_patterns"},
    "synthesizer_fixed_frozen": {
        "kind": "synthesizer_random",
        "synthesizer_init": "fixed_patterns",
        "synthesizer_freeze": True,
    },
}

#: kinds whose exact dependency structure is not "every frame of the allowed chunks": the shared-QK kinds leave a
#: frame's own key out (Reformer), so a frame with one other visible key does not depend on itself, and the LSH
#: kinds' keys depend on the hashes. tests/attention/test_attention_table1_kinds.py checks their structure.
NOT_DENSE_STRUCTURE = {
    "shared_qk", "sparse_strided", "sparse_fixed",
    "lsh_sign_alsh", "lsh_xbox", "lsh_xbox_qnf", "lsh_simple", "lsh_simple_alsh",
}
DENSE_STRUCTURE_VARIANTS = [v for v in VARIANTS if VARIANTS[v]["kind"] not in NOT_DENSE_STRUCTURE]


def build(variant: str, **overrides: object) -> EncoderAttention:
    torch.manual_seed(0)
    settings = {"hidden_size": HIDDEN, "num_heads": HEADS, "context_width": 5, "synthesizer_max_len": 32}
    settings.update(VARIANTS[variant])
    settings.update(overrides)
    config = AttentionConfig(**settings_for_kind(str(settings["kind"]), settings))
    module = ATTENTION.get(config.kind)(config).eval()
    if "pos_bias_u" in dict(module.named_parameters()):  # make the position terms matter
        torch.nn.init.normal_(module.pos_bias_u)
        torch.nn.init.normal_(module.pos_bias_v)
    return module


@pytest.mark.parametrize("variant", VARIANTS)
def test_output_shape(variant: str) -> None:
    module = build(variant)
    x = torch.randn(3, 11, HIDDEN)
    padding = torch.arange(11)[None, :] < torch.tensor([[11], [7], [1]])
    for mask in (None, padding):
        out = module(x, mask)
        assert out.shape == (3, 11, HIDDEN)
        assert torch.isfinite(out).all()


@pytest.mark.parametrize("variant", VARIANTS)
def test_gradients_reach_every_parameter(variant: str) -> None:
    module = build(variant).train()
    x = torch.randn(2, 9, HIDDEN, requires_grad=True)
    padding = torch.tensor([[True] * 9, [True] * 6 + [False] * 3])
    (module(x, padding) * torch.randn(2, 9, HIDDEN) * padding[..., None]).sum().backward()  # loss on real frames
    params = dict(module.named_parameters())
    assert params
    for name, param in params.items():
        assert param.grad is not None, f"{variant}: no gradient for {name}"
        assert param.grad.abs().sum() > 0, f"{variant}: zero gradient for {name}"
    assert x.grad is not None and x.grad[1, 6:].abs().sum() == 0  # padded inputs never reach real frames


def test_frozen_fixed_patterns_are_a_buffer() -> None:
    module = build("synthesizer_fixed_frozen")
    assert "logits" not in dict(module.named_parameters())
    assert "logits" in dict(module.named_buffers()) and "logits" in module.state_dict()
    assert "logits" in dict(build("synthesizer_fixed").named_parameters())


@pytest.mark.parametrize("variant", VARIANTS)
def test_padding_invariance(variant: str) -> None:
    """Appending padded frames (filled with garbage) leaves the real frames' outputs unchanged."""
    module = build(variant)
    real = torch.randn(1, 8, HIDDEN)
    alone = module(real)
    padded = torch.cat([real, 100 * torch.randn(1, 5, HIDDEN)], dim=1)
    mask = torch.tensor([[True] * 8 + [False] * 5])
    torch.testing.assert_close(module(padded, mask)[:, :8], alone, atol=1e-5, rtol=0)
    # and in a batch with a longer sequence
    other = torch.randn(1, 13, HIDDEN)
    batch = torch.cat([padded, other])
    batch_mask = torch.cat([mask, torch.ones(1, 13, dtype=torch.bool)])
    out = module(batch, batch_mask)
    torch.testing.assert_close(out[:1, :8], alone, atol=1e-5, rtol=0)
    torch.testing.assert_close(out[1:], module(other), atol=1e-5, rtol=0)


def expected_influence(variant: str, frames: int, chunk_size: int, num_left_chunks: int) -> torch.Tensor:
    i = torch.arange(frames)[:, None]
    j = torch.arange(frames)[None, :]
    diff = i // chunk_size - j // chunk_size
    allowed = (diff >= 0) & ((diff <= num_left_chunks) if num_left_chunks >= 0 else True)
    if VARIANTS[variant]["kind"] != "ldsa":
        return allowed
    width = VARIANTS[variant].get("context_width", 5)
    local = allowed & ((j - i).abs() <= width // 2)
    if VARIANTS[variant].get("hybrid"):  # MHSA(LDSA(x)): frame i sees the LDSA outputs of its allowed frames
        return (allowed.float() @ local.float()) > 0
    return local


@pytest.mark.parametrize("variant", DENSE_STRUCTURE_VARIANTS)
@pytest.mark.parametrize(("chunk_size", "num_left_chunks"), [(3, 0), (3, 1), (2, -1), (4, 2), (10, 0), (50, -1)])
def test_chunk_masks_restrict_what_each_frame_sees(variant: str, chunk_size: int, num_left_chunks: int) -> None:
    """No frame depends on frames outside its allowed chunks, and it does depend on every allowed one (so one
    chunk as long as the sequence is full attention)."""
    frames = 10
    module = build(variant, chunk_size=chunk_size, num_left_chunks=num_left_chunks)
    expected = expected_influence(variant, frames, chunk_size, num_left_chunks)
    assert torch.equal(influence(module, frames, HIDDEN), expected)  # bool masks


@pytest.mark.parametrize("variant", VARIANTS)
def test_one_chunk_equals_full_attention(variant: str) -> None:
    x = torch.randn(2, 10, HIDDEN)
    mask = torch.tensor([[True] * 10, [True] * 7 + [False] * 3])
    full = build(variant)(x, mask)
    for chunk_size in (10, 64):
        torch.testing.assert_close(build(variant, chunk_size=chunk_size)(x, mask), full, atol=1e-6, rtol=0)


def test_bad_padding_mask_shape_is_refused() -> None:
    module = build("mhsa")
    with pytest.raises(ValueError, match=r"padding_mask must be \[B, T\] = \(2, 5\)"):
        module(torch.randn(2, 5, HIDDEN), torch.ones(2, 6, dtype=torch.bool))


def test_synthesizer_refuses_sequences_longer_than_max_len() -> None:
    for variant in ("synthesizer_dense", "synthesizer_random"):
        with pytest.raises(ValueError, match=r"40 frames is longer than attention\.synthesizer_max_len=32"):
            build(variant)(torch.randn(1, 40, HIDDEN))
