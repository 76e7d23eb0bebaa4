"""``rel_pos`` in query blocks: outputs and gradients equal the full path and transformers' relative
attention; masks per block; dropout; the automatic switch; nothing quadratic in T is kept for backward."""

from __future__ import annotations

import pytest
import torch
from transformers import Wav2Vec2ConformerConfig
from transformers.masking_utils import create_bidirectional_mask
from transformers.models.wav2vec2_conformer.modeling_wav2vec2_conformer import (
    Wav2Vec2ConformerRelPositionalEmbedding,
    Wav2Vec2ConformerSelfAttention,
)

from adaptspeech.attention import AttentionConfig, RelPositionSelfAttention
from adaptspeech.attention import rel_pos as rel_pos_module
from adaptspeech.attention.blockwise import blockwise_relative_attention, dropout_keep
from adaptspeech.attention.masks import attention_mask, attention_mask_rows, key_padding_mask
from adaptspeech.attention.positional import relative_scores_prepadded, relative_scores_prepadded_backward

HIDDEN, HEADS, FRAMES = 32, 4, 13
LENGTHS = [13, 9, 2]  # the third utterance: 11 padded frames, so chunk masks leave some rows with no real key


def pair(block: int = 4, **settings: object) -> tuple[RelPositionSelfAttention, RelPositionSelfAttention]:
    """The full path and the blockwise path with the same weights (random position biases)."""
    torch.manual_seed(0)
    common = {"kind": "rel_pos", "hidden_size": HIDDEN, "num_heads": HEADS, **settings}
    full = RelPositionSelfAttention(AttentionConfig(**common, memory_efficient=False)).eval()
    torch.nn.init.normal_(full.pos_bias_u)
    torch.nn.init.normal_(full.pos_bias_v)
    blockwise = RelPositionSelfAttention(
        AttentionConfig(**common, memory_efficient=True, query_block_size=block)
    ).eval()
    blockwise.load_state_dict(full.state_dict())
    return full, blockwise


def padding(frames: int = FRAMES) -> torch.Tensor:
    return torch.arange(frames)[None, :] < torch.tensor(LENGTHS)[:, None]


def output_and_gradients(
    module: torch.nn.Module, x: torch.Tensor, padding_mask: torch.Tensor | None, call=None
) -> tuple[torch.Tensor, torch.Tensor, dict[str, torch.Tensor]]:
    """Output, input gradient and parameter gradients of ``sum(out * w)`` with a fixed random ``w``."""
    x = x.detach().clone().requires_grad_(True)
    module.zero_grad(set_to_none=True)
    out = module(x, padding_mask) if call is None else call(module, x)
    weights = torch.randn(out.shape, generator=torch.Generator().manual_seed(7))
    (out * weights).sum().backward()
    grads = {name: p.grad.detach().clone() for name, p in module.named_parameters() if p.grad is not None}
    return out.detach(), x.grad.detach(), grads


def assert_same(expected: tuple, actual: tuple, atol: float = 1e-5) -> None:
    torch.testing.assert_close(actual[0], expected[0], atol=atol, rtol=0)  # output
    torch.testing.assert_close(actual[1], expected[1], atol=atol, rtol=0)  # input gradient
    assert set(actual[2]) == set(expected[2]) and len(expected[2]) == 11  # q/k/v/out weight+bias, pos, u, v
    for name in expected[2]:
        torch.testing.assert_close(actual[2][name], expected[2][name], atol=atol, rtol=0, msg=name)


@pytest.mark.parametrize(("chunk_size", "num_left_chunks"), [(0, -1), (4, -1), (4, 0), (3, 2), (5, 1), (3, 0)])
@pytest.mark.parametrize("padded", [False, True])
@pytest.mark.parametrize("block", [4, 5, 13, 20])
def test_blockwise_equals_the_full_path(chunk_size: int, num_left_chunks: int, padded: bool, block: int) -> None:
    """T = 13 is no multiple of the blocks 4 and 5 (last block shorter); 13 and 20 are one block."""
    full, blockwise = pair(block, chunk_size=chunk_size, num_left_chunks=num_left_chunks)
    torch.manual_seed(1)
    x = torch.randn(3, FRAMES, HIDDEN)
    mask = padding() if padded else None
    assert_same(output_and_gradients(full, x, mask), output_and_gradients(blockwise, x, mask))


def test_rows_without_an_allowed_key_are_zero_and_finite() -> None:
    """Chunk size 3 with no left chunk: the third utterance's queries past frame 2 see only padded keys."""
    allowed = attention_mask(padding(), FRAMES, chunk_size=3, num_left_chunks=0)
    assert not bool(allowed[2, 0, 5].any())  # the case exists
    _, blockwise = pair(4, chunk_size=3, num_left_chunks=0)
    x = torch.randn(3, FRAMES, HIDDEN)
    out, x_grad, grads = output_and_gradients(blockwise, x, padding())
    context = blockwise.linear_out(torch.zeros(HIDDEN))  # zero weights: only the output projection's bias
    torch.testing.assert_close(out[2, 5], context, atol=1e-6, rtol=0)
    assert all(bool(g.isfinite().all()) for g in [out, x_grad, *grads.values()])


@pytest.mark.parametrize("implementation", ["eager", "sdpa"])
@pytest.mark.parametrize("padded", [False, True])
def test_blockwise_equals_transformers_relative_attention(implementation: str, padded: bool) -> None:
    """Output, input gradient and every parameter gradient against ``Wav2Vec2ConformerSelfAttention`` with the same
    weights (the state dicts share keys)."""
    torch.manual_seed(0)
    config = Wav2Vec2ConformerConfig(hidden_size=HIDDEN, num_attention_heads=HEADS, position_embeddings_type="relative")
    config._attn_implementation = implementation
    hf = Wav2Vec2ConformerSelfAttention(config).eval()
    torch.nn.init.normal_(hf.pos_bias_u)
    torch.nn.init.normal_(hf.pos_bias_v)
    ours = RelPositionSelfAttention(
        AttentionConfig(kind="rel_pos", hidden_size=HIDDEN, num_heads=HEADS, memory_efficient=True, query_block_size=4)
    ).eval()
    assert len(ours.init_from_hf(hf)) == 11
    torch.manual_seed(1)
    x = torch.randn(3, FRAMES, HIDDEN)
    mask = padding() if padded else None

    def hf_call(module: torch.nn.Module, inputs: torch.Tensor) -> torch.Tensor:
        hf_mask = create_bidirectional_mask(config=config, inputs_embeds=inputs, attention_mask=mask)
        positions = Wav2Vec2ConformerRelPositionalEmbedding(config)(inputs)
        return module(inputs, attention_mask=hf_mask, relative_position_embeddings=positions)[0]

    assert_same(output_and_gradients(hf, x, mask, hf_call), output_and_gradients(ours, x, mask))


def test_dropout_in_eval_mode_changes_nothing() -> None:
    full, blockwise = pair(4, dropout=0.3, chunk_size=4, num_left_chunks=1)
    assert blockwise.dropout == 0.3 and not blockwise.training
    x = torch.randn(3, FRAMES, HIDDEN)
    assert_same(output_and_gradients(full, x, padding()), output_and_gradients(blockwise, x, padding()))


def blockwise_inputs(frames: int = 7, dtype: torch.dtype = torch.float64) -> list[torch.Tensor]:
    """query, key, value ``[2, 2, T, 3]``, u, v ``[2, 3]``, positions ``[2, 2T, 3]``, requiring grad."""
    generator = torch.Generator().manual_seed(3)
    shapes = [(2, 2, frames, 3)] * 3 + [(2, 3)] * 2 + [(2, 2 * frames, 3)]
    return [torch.randn(*shape, generator=generator, dtype=dtype, requires_grad=True) for shape in shapes]


def test_dropout_in_training_backward_matches_its_forward() -> None:
    """With dropout the backward regenerates each block's keep-mask: gradcheck (float64, numerical vs analytical)
    with chunk masks, padding and a last block shorter than the others."""
    inputs = blockwise_inputs()
    mask = torch.tensor([[True] * 7, [True] * 4 + [False] * 3])

    def attend(*tensors: torch.Tensor) -> torch.Tensor:
        torch.manual_seed(11)  # the per-call seed comes from the global generator
        return blockwise_relative_attention(*tensors, mask, chunk_size=2, num_left_chunks=1, block_size=3, dropout=0.4)

    assert torch.autograd.gradcheck(attend, inputs, eps=1e-6, atol=1e-6)
    dropped = attend(*inputs)
    kept = blockwise_relative_attention(*inputs, mask, chunk_size=2, num_left_chunks=1, block_size=3)
    assert not torch.allclose(dropped, kept)  # the dropout is applied


def test_gradcheck_without_dropout() -> None:
    inputs = blockwise_inputs(frames=6)
    assert torch.autograd.gradcheck(lambda *t: blockwise_relative_attention(*t, None, block_size=4), inputs)


def test_dropout_keep_factors() -> None:
    factors = dropout_keep(torch.empty(200_000), 0.25, seed=5)
    assert torch.equal(factors.unique(), torch.tensor([0.0, 1 / 0.75]))  # one correctly rounded division
    assert abs(float((factors == 0).float().mean()) - 0.25) < 0.005
    assert torch.equal(factors, dropout_keep(torch.empty(200_000), 0.25, seed=5))  # same seed, same draw


def test_dropout_under_activation_checkpointing() -> None:
    """Checkpointing restores the global generator before recomputing, so the recomputed forward draws the same
    seed: gradients equal those of the plain module in training mode with dropout."""
    _, blockwise = pair(4, dropout=0.5)
    blockwise.train()
    x = torch.randn(2, FRAMES, HIDDEN)

    def checkpointed(module: torch.nn.Module, inputs: torch.Tensor) -> torch.Tensor:
        return torch.utils.checkpoint.checkpoint(module, inputs, use_reentrant=False)

    torch.manual_seed(4)
    plain = output_and_gradients(blockwise, x, None)
    torch.manual_seed(4)
    assert_same(plain, output_and_gradients(blockwise, x, None, checkpointed), atol=1e-6)
    blockwise.eval()
    assert not torch.allclose(blockwise(x), plain[0])


def test_automatic_switch_honours_the_threshold(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[int] = []
    original = rel_pos_module.blockwise_relative_attention

    def spy(query: torch.Tensor, *args: object, **kwargs: object) -> torch.Tensor:
        calls.append(query.shape[2])
        return original(query, *args, **kwargs)

    monkeypatch.setattr(rel_pos_module, "blockwise_relative_attention", spy)
    settings = {"kind": "rel_pos", "hidden_size": HIDDEN, "num_heads": HEADS}
    auto = RelPositionSelfAttention(AttentionConfig(**settings, memory_efficient_threshold=8, query_block_size=3))
    assert AttentionConfig(**settings).memory_efficient is None  # automatic by default
    assert AttentionConfig(**settings).memory_efficient_threshold == 2048
    auto(torch.randn(1, 8, HIDDEN))
    assert calls == []  # T = threshold: the full path
    auto(torch.randn(1, 9, HIDDEN))
    assert calls == [9]  # above it: blockwise
    never = RelPositionSelfAttention(AttentionConfig(**settings, memory_efficient=False, memory_efficient_threshold=8))
    never(torch.randn(1, 30, HIDDEN))
    always = RelPositionSelfAttention(AttentionConfig(**settings, memory_efficient=True))
    always(torch.randn(1, 2, HIDDEN))
    assert calls == [9, 2]
    assert [auto.uses_blockwise(t) for t in (1, 8, 9, 5000)] == [False, False, True, True]
    assert never.uses_blockwise(10**6) is False and always.uses_blockwise(1) is True


def saved_numels(module: torch.nn.Module, x: torch.Tensor) -> list[int]:
    """Sizes of the tensors autograd keeps for backward during one forward."""
    sizes: list[int] = []

    def pack(tensor: torch.Tensor) -> torch.Tensor:
        sizes.append(tensor.numel())
        return tensor

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
        module(x, padding(x.shape[1])[:1].expand(x.shape[0], -1))
    return sizes


def test_nothing_quadratic_in_t_is_kept_for_backward() -> None:
    """The blockwise path keeps only O(T D) tensors (q, k, v, output, the 2T-row position table); the full path
    keeps h x T x T scores (the check can fail)."""
    frames = 64
    full, blockwise = pair(8, chunk_size=16)
    x = torch.randn(1, frames, HIDDEN, requires_grad=True)
    assert max(saved_numels(full, x)) >= HEADS * frames * frames
    assert max(saved_numels(blockwise, x)) <= 2 * frames * HIDDEN


def test_training_after_inference_mode() -> None:
    """The cached sinusoid table is never an inference tensor (it was: a training pass after an evaluation under
    ``torch.inference_mode()`` failed with "Inference tensors cannot be saved for backward")."""
    full, blockwise = pair(4)
    x = torch.randn(1, 6, HIDDEN)
    for module in (full, blockwise):
        with torch.inference_mode():
            expected = module(x)
        out = module(x.requires_grad_(True))
        out.sum().backward()
        # recording autograd may pick other kernels (scaled_dot_product_attention) than inference mode does
        torch.testing.assert_close(out.detach(), expected, atol=1e-6, rtol=0)


def test_inference_mode_and_bfloat16() -> None:
    full, blockwise = pair(4, chunk_size=4)
    x = torch.randn(3, FRAMES, HIDDEN)
    with torch.inference_mode():
        torch.testing.assert_close(blockwise(x, padding()), full(x, padding()), atol=1e-5, rtol=0)
    expected = full(x, padding())
    blockwise.to(torch.bfloat16)
    x16 = x.to(torch.bfloat16).requires_grad_(True)
    out = blockwise(x16, padding())
    out.float().sum().backward()
    assert out.dtype == torch.bfloat16 and bool(x16.grad.isfinite().all())
    torch.testing.assert_close(out.float(), expected, atol=5e-2, rtol=5e-2)


def test_autocast_bfloat16_like_the_full_path() -> None:
    """Under CPU autocast the blockwise path computes in bfloat16 (its inputs cast once, autocast off inside the
    autograd function; before that it failed mixing float32 and bfloat16), close to the full path's result."""
    full, blockwise = pair(4, chunk_size=4)
    x = torch.randn(3, FRAMES, HIDDEN)
    results = []
    for module in (full, blockwise):
        inputs = x.clone().requires_grad_(True)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            out = module(inputs, padding())
        out.float().sum().backward()
        results.append((out, inputs.grad, module.linear_pos.weight.grad))
    assert results[1][0].dtype == torch.bfloat16 == results[0][0].dtype
    for expected, actual in zip(results[0], results[1]):
        torch.testing.assert_close(actual.float(), expected.float(), atol=5e-2, rtol=5e-2)


@pytest.mark.parametrize(("chunk_size", "num_left_chunks"), [(0, -1), (3, -1), (3, 1), (4, 0), (20, 0)])
def test_mask_rows_are_rows_of_the_full_mask(chunk_size: int, num_left_chunks: int) -> None:
    """Per-block masks from frame indices equal the rows of the T x T mask."""
    for mask in (padding(), None):
        full = attention_mask(mask, FRAMES, chunk_size, num_left_chunks)
        for start, stop in [(0, 4), (4, 8), (12, 13), (0, 13)]:
            rows = attention_mask_rows(key_padding_mask(mask), start, stop, FRAMES, chunk_size, num_left_chunks)
            if full is None:
                assert rows is None
            else:
                expected = full.expand(3 if mask is not None else 1, 1, FRAMES, FRAMES)[:, :, start:stop]
                assert torch.equal(rows.expand_as(expected), expected)


def test_prepadded_shift_backward_equals_autograd() -> None:
    """The scatter written for the blockwise backward is the gradient of the relative shift (unread entries zero,
    whatever the buffer held before)."""
    for queries, keys in [(4, 13), (1, 5), (5, 5), (3, 8)]:
        padded = torch.randn(2, 3, queries, queries + keys, requires_grad=True)
        grad = torch.randn(2, 3, queries, keys)
        relative_scores_prepadded(padded, keys).backward(grad)
        out = torch.full((2, 3, queries, queries + keys), float("nan"))
        assert torch.equal(relative_scores_prepadded_backward(grad, out), padded.grad)  # a scatter: no arithmetic


@pytest.mark.parametrize(
    ("settings", "words"),
    [
        ({"kind": "rel_pos", "memory_efficient": "yes"}, ["attention.memory_efficient", "true", "false", "null"]),
        ({"kind": "rel_pos", "memory_efficient_threshold": -1}, ["attention.memory_efficient_threshold", ">= 0"]),
        ({"kind": "rel_pos", "memory_efficient_threshold": 2.5}, ["attention.memory_efficient_threshold"]),
        ({"kind": "rel_pos", "query_block_size": 0}, ["attention.query_block_size", "positive integer"]),
        ({"kind": "rel_pos", "query_block_size": True}, ["attention.query_block_size"]),
        ({"kind": "mhsa", "memory_efficient": True}, ["attention.memory_efficient", "rel_pos", "'mhsa'"]),
    ],
)
def test_config_refuses_bad_memory_settings(settings: dict, words: list[str]) -> None:
    with pytest.raises(ValueError) as error:
        AttentionConfig(**settings)
    for word in words:
        assert word in str(error.value)


def test_config_round_trip_with_memory_settings() -> None:
    config = AttentionConfig(kind="rel_pos", memory_efficient=True, memory_efficient_threshold=0, query_block_size=64)
    assert AttentionConfig.from_dict(config.to_dict()) == config
