"""Dynamic chunk training (the U2 rule, Zhang et al. 2020, as WeNet's ``add_optional_chunk_mask`` draws it), the chunk
size chosen at decoding time, and chunk-by-chunk streaming of every kind that can stream."""

from __future__ import annotations

import pytest
import torch

from adaptspeech import AdaptSpeechForCTC
from adaptspeech.attention import ATTENTION, AttentionConfig
from adaptspeech.attention.chunking import (
    active_chunking,
    chunk_attention,
    draw_dynamic_chunk,
    dynamic_chunk_training,
    streaming_kinds,
)
from adaptspeech.testing.tiny_models import tiny_config, tiny_inputs

HIDDEN, HEADS = 32, 4


def wenet_draw(max_len: int, use_dynamic_left_chunk: bool, max_chunk_size: int = 25) -> tuple[int, int]:
    """WeNet's ``add_optional_chunk_mask`` training branch (``decoding_chunk_size == 0``, ``enable_full_context``),
    copied line by line; full context returned as chunk 0."""
    chunk_size = torch.randint(1, max_len, (1,)).item()
    num_left_chunks = -1
    if chunk_size > max_len // 2:
        chunk_size = max_len
    else:
        chunk_size = chunk_size % max_chunk_size + 1
        if use_dynamic_left_chunk:
            max_left_chunks = (max_len - 1) // chunk_size
            num_left_chunks = torch.randint(0, max_left_chunks, (1,)).item()
    return (0 if chunk_size == max_len else chunk_size), num_left_chunks


@pytest.mark.parametrize("left", [False, True])
def test_draws_follow_wenet(left: bool) -> None:
    """The same random stream gives the same chunks as WeNet's code, draw by draw (lengths where WeNet's randint
    has room for a left chunk)."""
    for max_len in (7, 40, 150):
        torch.manual_seed(max_len)
        ours = [draw_dynamic_chunk(max_len, 25, left) for _ in range(200)]
        torch.manual_seed(max_len)
        theirs = [wenet_draw(max_len, left) for _ in range(200)]
        assert ours == theirs


def test_about_half_the_batches_are_full_context() -> None:
    gen = torch.Generator().manual_seed(0)
    draws = [draw_dynamic_chunk(100, 25, False, gen) for _ in range(2000)]
    full = sum(chunk == 0 for chunk, _ in draws) / len(draws)
    assert 0.45 < full < 0.55  # n > T // 2 for n ~ U{1..99}: 49 / 99
    assert {chunk for chunk, _ in draws if chunk} == set(range(1, 26))
    assert draw_dynamic_chunk(1) == (0, -1)  # one frame: nothing to chunk


def test_config_refuses_kinds_that_cannot_stream() -> None:
    assert {"mhsa", "rel_pos", "ldsa"} <= set(streaming_kinds())
    with pytest.raises(ValueError, match=r"attention\.dynamic_chunks needs an attention kind that can stream.*ldsa"):
        AttentionConfig(kind="synthesizer_dense", dynamic_chunks=True)
    with pytest.raises(ValueError, match="kinds that can: "):
        AttentionConfig(kind="default", dynamic_chunks=True)
    with pytest.raises(ValueError, match=r"attention\.chunk_size=4 would fix it"):
        AttentionConfig(kind="mhsa", dynamic_chunks=True, chunk_size=4)
    with pytest.raises(ValueError, match=r"attention\.max_chunk_size must be a positive"):
        AttentionConfig(kind="mhsa", dynamic_chunks=True, max_chunk_size=0)
    config = AttentionConfig(kind="rel_pos", dynamic_chunks=True, max_chunk_size=16)
    assert AttentionConfig.from_dict(config.to_diff_dict()) == config
    assert AttentionConfig(kind="mhsa").to_diff_dict() == {"kind": "mhsa"}  # existing config.json unchanged


def _module(kind: str, **settings: object) -> torch.nn.Module:
    torch.manual_seed(0)
    module = ATTENTION.get(kind)(AttentionConfig(kind=kind, hidden_size=HIDDEN, num_heads=HEADS, **settings)).eval()
    for name, param in module.named_parameters():
        if "pos_bias" in name:
            torch.nn.init.normal_(param)
    return module


KINDS = [
    ("mhsa", {}),
    ("rel_pos", {}),
    ("rel_pos", {"memory_efficient": True, "query_block_size": 3}),
    ("ldsa", {"context_width": 5}),
    ("ldsa", {"context_width": 7, "hybrid": True}),
]


@pytest.mark.parametrize(("kind", "settings"), KINDS)
def test_chunks_chosen_at_decoding_equal_a_static_chunk_config(kind: str, settings: dict) -> None:
    dynamic = _module(kind, dynamic_chunks=True, **settings)
    static = _module(kind, chunk_size=4, num_left_chunks=1, **settings)
    x = torch.randn(2, 13, HIDDEN)
    with chunk_attention(4, 1):
        chosen = dynamic(x)
    torch.testing.assert_close(chosen, static(x), atol=0, rtol=0)  # the same computation
    assert not torch.allclose(dynamic(x), chosen)  # outside: full context


@pytest.mark.parametrize(("kind", "settings"), KINDS)
@pytest.mark.parametrize(("chunk_size", "num_left_chunks"), [(4, -1), (4, 1), (3, 0), (5, 2)])
def test_streaming_equals_the_chunk_masked_forward(
    kind: str, settings: dict, chunk_size: int, num_left_chunks: int
) -> None:
    """Chunk by chunk with a cache equals the whole sequence under the same chunk mask; 1e-5: the same sums in another
    order (a cache concatenated to the chunk, SDPA on fewer keys)."""
    module = _module(kind, dynamic_chunks=True, **settings)
    x = torch.randn(2, 14, HIDDEN)  # the last chunk is shorter
    with chunk_attention(chunk_size, num_left_chunks):
        full = module(x)
        cache, outputs = None, []
        for start in range(0, 14, chunk_size):
            out, cache = module.forward_chunk(x[:, start : start + chunk_size], cache)
            outputs.append(out)
    torch.testing.assert_close(torch.cat(outputs, dim=1), full, atol=1e-5, rtol=0)


def test_kinds_that_cannot_stream_say_so() -> None:
    module = _module("synthesizer_dense")
    with pytest.raises(NotImplementedError, match="cannot stream"):
        module.forward_chunk(torch.randn(1, 4, HIDDEN))


def test_training_draws_one_chunking_per_batch_for_every_layer() -> None:
    """A training forward of a dynamic-chunk model equals the same forward under the drawn chunks, chosen by hand."""
    config = tiny_config("fbank_conformer", attention={"kind": "rel_pos", "dynamic_chunks": True, "max_chunk_size": 3})
    torch.manual_seed(0)
    model = AdaptSpeechForCTC(config).train()
    inputs = tiny_inputs(config, batch=2, seconds=0.6, pad_last=False)
    frames = int(model._get_feat_extract_output_lengths(inputs["input_features"].shape[1]))
    for seed in range(6):
        torch.manual_seed(seed)
        drawn = draw_dynamic_chunk(frames, 3)
        torch.manual_seed(seed)
        trained = model(**inputs).logits
        torch.manual_seed(seed)
        with chunk_attention(*drawn):
            torch.randint(1, frames, (1,))  # the draw the model would have made (dropout then sees the same stream)
            by_hand = model(**inputs).logits
        torch.testing.assert_close(trained, by_hand, atol=0, rtol=0)
    model.eval()
    with dynamic_chunk_training(config.attention, frames, training=False) as chosen:
        assert chosen == (0, -1) == active_chunking(config.attention)  # decoding: full context unless chosen


def test_projected_positions_are_kept_while_decoding_and_dropped_when_the_weights_change() -> None:
    module = _module("rel_pos")
    fresh = module.linear_pos(module.positions(9, torch.float32, torch.device("cpu"))).detach()
    with torch.no_grad():
        module.projected_positions(20, torch.float32, torch.device("cpu"))  # a longer table first
        kept = module.projected_positions(9, torch.float32, torch.device("cpu"))
        torch.testing.assert_close(kept, fresh, atol=1e-6, rtol=0)  # a slice of a larger product: rounding only
        module.linear_pos.weight.mul_(2.0)  # an optimizer step would do the same: a new version
        torch.testing.assert_close(module.projected_positions(9, torch.float32, torch.device("cpu")), 2 * fresh,
                                   atol=1e-6, rtol=0)
    assert module.projected_positions(9, torch.float32, torch.device("cpu")).requires_grad  # training: no cache
