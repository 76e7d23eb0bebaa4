"""The pyramidal BLSTM listener: halving, odd lengths, padding, identity, gradients."""

from __future__ import annotations

import pytest
import torch

from adaptspeech.heads.las_config import LASConfig
from adaptspeech.heads.listener import PyramidalBLSTM, join_pairs, padding_mask_to_lengths


def listener(layers: int, seed: int = 0) -> PyramidalBLSTM:
    torch.manual_seed(seed)
    return PyramidalBLSTM(LASConfig(encoder_hidden_size=6, listener_layers=layers, listener_hidden=5)).eval()


def mask_of(lengths: list[int], frames: int) -> torch.Tensor:
    return torch.arange(frames)[None, :] < torch.tensor(lengths)[:, None]


def test_join_pairs_matches_a_loop():
    x = torch.randn(2, 7, 3)
    lengths = torch.tensor([7, 4])
    joined, new_lengths = join_pairs(x, lengths)
    assert joined.shape == (2, 4, 6)
    assert new_lengths.tolist() == [4, 2]
    for b in range(2):
        for i in range(4):
            left = x[b, 2 * i] if 2 * i < lengths[b] else torch.zeros(3)
            right = x[b, 2 * i + 1] if 2 * i + 1 < lengths[b] else torch.zeros(3)
            assert torch.equal(joined[b, i], torch.cat([left, right]))


@pytest.mark.parametrize("layers", [1, 2, 3])
@pytest.mark.parametrize("frames", [16, 13])
def test_each_layer_halves_the_frames_rounding_up(layers, frames):
    lengths = [frames, frames - 3, 1]
    out = listener(layers)(torch.randn(3, frames, 6), mask_of(lengths, frames))
    expected_frames, expected_lengths = frames, lengths
    for _ in range(layers):
        expected_frames = (expected_frames + 1) // 2
        expected_lengths = [(n + 1) // 2 for n in expected_lengths]
    assert out.hidden_states.shape == (3, expected_frames, 10)
    assert out.padding_mask.sum(1).tolist() == expected_lengths
    assert torch.equal(out.padding_mask, mask_of(expected_lengths, expected_frames))
    assert listener(layers).output_lengths(torch.tensor(lengths)).tolist() == expected_lengths
    assert (out.hidden_states[~out.padding_mask] == 0).all()


def test_odd_length_keeps_its_last_frame():
    model = listener(1)
    x = torch.randn(1, 5, 6)
    mask = torch.ones(1, 5, dtype=torch.bool)
    before = model(x, mask).hidden_states
    x2 = x.clone()
    x2[0, 4] += 1.0  # the unpaired last frame
    after = model(x2, mask).hidden_states
    assert before.shape[1] == 3
    assert not torch.allclose(before[0, 2], after[0, 2])


def test_zero_layers_is_the_identity():
    model = listener(0)
    x = torch.randn(2, 5, 6)
    mask = mask_of([5, 3], 5)
    out = model(x, mask)
    assert model.output_size == 6
    assert out.hidden_states is x
    assert torch.equal(out.padding_mask, mask)


def test_padding_never_leaks_into_real_frames():
    model = listener(2)
    x = torch.randn(2, 11, 6)
    mask = mask_of([11, 6], 11)
    x[1, 6:] = 1e3 * torch.randn(5, 6)  # garbage in the padding
    batched = model(x, mask)
    alone = model(x[1:, :6], mask[1:, :6])
    real = int(alone.padding_mask.sum())
    torch.testing.assert_close(batched.hidden_states[1, :real], alone.hidden_states[0, :real])
    assert (batched.hidden_states[1, real:] == 0).all()


def test_gradients_reach_real_frames_and_parameters_only():
    model = listener(2).train()
    x = torch.randn(2, 9, 6, requires_grad=True)
    mask = mask_of([9, 5], 9)
    out = model(x, mask)
    out.hidden_states.pow(2).sum().backward()
    assert (x.grad[1, 5:] == 0).all()
    assert (x.grad[0].abs().sum(-1) > 0).all() and (x.grad[1, :5].abs().sum(-1) > 0).all()
    assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in model.parameters())


def test_bad_masks_are_refused_naming_the_row():
    with pytest.raises(ValueError, match="row 1 must be right-padded"):
        padding_mask_to_lengths(torch.tensor([[1, 1, 0], [1, 0, 1]]))
    with pytest.raises(ValueError, match="row 0 must be right-padded with at least one real frame"):
        padding_mask_to_lengths(torch.tensor([[0, 0, 0]]))
