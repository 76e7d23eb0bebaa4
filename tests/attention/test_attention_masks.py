"""Chunk masks, local windows and the masked softmax, checked element by element against their definitions."""

from __future__ import annotations

import pytest
import torch

from adaptspeech.attention.masks import attention_mask, chunk_mask, local_window_mask, masked_softmax


def allowed_by_definition(query: int, key: int, chunk_size: int, num_left_chunks: int) -> bool:
    """WeNet's chunk rule: a frame sees its own chunk and ``num_left_chunks`` previous ones (-1 = all)."""
    if chunk_size <= 0:
        return True
    diff = query // chunk_size - key // chunk_size
    return diff >= 0 and (num_left_chunks < 0 or diff <= num_left_chunks)


@pytest.mark.parametrize("chunk_size", [1, 2, 3, 4, 7, 9, 20])
@pytest.mark.parametrize("num_left_chunks", [-1, 0, 1, 2])
def test_chunk_mask_matches_the_definition(chunk_size: int, num_left_chunks: int) -> None:
    frames = 9
    mask = chunk_mask(frames, chunk_size, num_left_chunks)
    expected = torch.tensor(
        [[allowed_by_definition(i, j, chunk_size, num_left_chunks) for j in range(frames)] for i in range(frames)]
    )
    assert torch.equal(mask, expected)


def test_one_chunk_is_full_attention() -> None:
    assert chunk_mask(6, 0) is None
    for num_left_chunks in (-1, 0, 3):
        assert bool(chunk_mask(6, 6, num_left_chunks).all())
        assert bool(chunk_mask(6, 10, num_left_chunks).all())
        assert attention_mask(None, 6, chunk_size=6, num_left_chunks=num_left_chunks) is None


def test_attention_mask_combines_keys_and_chunks() -> None:
    padding = torch.tensor([[True] * 6, [True] * 4 + [False] * 2])
    mask = attention_mask(padding, 6, chunk_size=2, num_left_chunks=0)
    assert mask.shape == (2, 1, 6, 6)
    for b in range(2):
        for i in range(6):
            for j in range(6):
                expected = bool(padding[b, j]) and allowed_by_definition(i, j, 2, 0)
                assert bool(mask[b, 0, i, j]) == expected
    assert attention_mask(torch.ones(2, 6, dtype=torch.bool), 6) is None
    keys_only = attention_mask(padding, 6)
    assert keys_only.shape == (2, 1, 1, 6) and torch.equal(keys_only[:, 0, 0], padding)


@pytest.mark.parametrize(("chunk_size", "num_left_chunks"), [(0, -1), (3, 0), (3, 1), (2, -1)])
def test_local_window_mask_matches_the_definition(chunk_size: int, num_left_chunks: int) -> None:
    frames, width, half = 8, 5, 2
    padding = torch.tensor([[True] * 8, [True] * 5 + [False] * 3])
    mask = local_window_mask(padding, frames, width, chunk_size, num_left_chunks)
    assert mask.shape == (2, frames, width)
    for b in range(2):
        for t in range(frames):
            for j in range(width):
                n = t + j - half
                expected = (
                    0 <= n < frames and bool(padding[b, n]) and allowed_by_definition(t, n, chunk_size, num_left_chunks)
                )
                assert bool(mask[b, t, j]) == expected, (b, t, j)


def test_masked_softmax_gives_masked_entries_zero_weight_and_empty_rows_zeros() -> None:
    scores = torch.randn(2, 3, 4, requires_grad=True)
    allowed = torch.tensor([[True, False, True, False], [False, False, False, False], [True, True, True, True]])
    probs = masked_softmax(scores, allowed)
    assert torch.all(probs[:, ~allowed] == 0)
    assert torch.allclose(probs[:, 0, [0, 2]], torch.softmax(scores[:, 0, [0, 2]], -1))
    assert torch.allclose(probs[:, 2], torch.softmax(scores[:, 2], -1))
    assert torch.all(probs[:, 1] == 0)
    probs.sum().backward()
    assert torch.isfinite(scores.grad).all()


def test_a_chunk_mask_without_padding_is_built_on_the_modules_device():
    """Without a padding mask the chunk mask was always built on the CPU (a device mismatch under a GPU model); the
    meta device stands in for a GPU here."""
    from adaptspeech.attention import ATTENTION
    from adaptspeech.attention.config import AttentionConfig

    module = ATTENTION.get("mhsa")(AttentionConfig(kind="mhsa", hidden_size=8, num_heads=2, chunk_size=2)).to("meta")
    mask = module.attention_mask(None, 6)
    assert mask is not None and mask.device.type == "meta" and tuple(mask.shape[-2:]) == (6, 6)
