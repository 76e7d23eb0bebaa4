"""LASDecoder: sos/eos handling, loss, step API, state re-indexing, padding, gradients, sampling."""

from __future__ import annotations

import math

import pytest
import torch

from adaptspeech.heads.las import LASDecoder
from adaptspeech.heads.las_config import LASConfig

V, D = 7, 8  # vocabulary (0 = pad, 6 = sos/eos), encoder width
VARIANTS = [dict(), dict(attention_heads=2), dict(location_aware=True, location_kernel_size=3),
            dict(attention_heads=2, location_aware=True, location_kernel_size=3, decoder_layers=2)]


def make_decoder(seed: int = 0, **overrides) -> LASDecoder:
    torch.manual_seed(seed)
    settings = dict(vocab_size=V, encoder_hidden_size=D, listener_layers=1, listener_hidden=6, decoder_hidden=12,
                    embedding_dim=5, attention_dim=8, max_target_length=20)
    settings.update(overrides)
    return LASDecoder(LASConfig(**settings)).eval()


def batch(seed: int = 1):
    generator = torch.Generator().manual_seed(seed)
    hidden = torch.randn(2, 9, D, generator=generator)
    mask = torch.arange(9)[None, :] < torch.tensor([9, 5])[:, None]
    labels = torch.tensor([[1, 2, 3, 4], [5, 1, -100, -100]])
    return hidden, mask, labels


def test_inputs_start_with_sos_and_targets_end_with_eos():
    decoder = make_decoder()
    inputs, targets = decoder.build_targets(torch.tensor([[1, 2, 3], [4, -100, -100]]))
    assert inputs.tolist() == [[6, 1, 2, 3], [6, 4, 0, 0]]
    assert targets.tolist() == [[1, 2, 3, 6], [4, 6, -100, -100]]


@pytest.mark.parametrize("overrides", VARIANTS)
def test_forward_shapes_weights_and_loss_against_an_explicit_cross_entropy(overrides):
    decoder = make_decoder(**overrides)
    hidden, mask, labels = batch()
    out = decoder(hidden, mask, labels)
    assert out.logits.shape == (2, 5, V)
    assert out.attention_weights.shape == (2, 5, 5)  # 9 frames -> 5 listener frames
    listener_mask = out.listener_padding_mask
    assert listener_mask.sum(1).tolist() == [5, 3]
    assert (out.attention_weights.masked_select(~listener_mask[:, None, :]) == 0).all()
    torch.testing.assert_close(out.attention_weights.sum(-1), torch.ones(2, 5))
    total, count = 0.0, 0
    for b, target_row in enumerate([[1, 2, 3, 4, 6], [5, 1, 6]]):
        for i, target in enumerate(target_row):
            total -= float(torch.log_softmax(out.logits.detach()[b, i], -1)[target])
            count += 1
    assert out.loss.item() == pytest.approx(total / count, rel=1e-5)


def test_label_smoothing_loss_matches_its_formula():
    epsilon = 0.2
    decoder = make_decoder(label_smoothing=epsilon)
    hidden, mask, labels = batch()
    out = decoder(hidden, mask, labels)
    total, count = 0.0, 0
    for b, target_row in enumerate([[1, 2, 3, 4, 6], [5, 1, 6]]):
        for i, target in enumerate(target_row):
            log_p = torch.log_softmax(out.logits.detach()[b, i], -1)
            total += (1 - epsilon) * -float(log_p[target]) + epsilon * -float(log_p.mean())
            count += 1
    assert out.loss.item() == pytest.approx(total / count, rel=1e-5)


@pytest.mark.parametrize("overrides", VARIANTS)
def test_step_api_reproduces_teacher_forcing(overrides):
    decoder = make_decoder(**overrides)
    hidden, mask, labels = batch()
    out = decoder(hidden, mask, labels)
    inputs, _ = decoder.build_targets(labels)
    state = decoder.init_state(hidden, mask)
    for i in range(inputs.shape[1]):
        log_probs, state = decoder.step(inputs[:, i], state)
        torch.testing.assert_close(log_probs, torch.log_softmax(out.logits[:, i], -1))
        torch.testing.assert_close(state.attention_weights, out.attention_weights[:, i])


@pytest.mark.parametrize("overrides", VARIANTS)
def test_select_state_reindexes_rows(overrides):
    decoder = make_decoder(**overrides)
    hidden, mask, _ = batch()
    state = decoder.init_state(hidden, mask)
    _, state = decoder.step(torch.tensor([6, 6]), state)
    index, tokens = torch.tensor([1, 0, 1]), torch.tensor([3, 2, 4])
    picked, _ = decoder.step(tokens, decoder.select_state(state, index))
    for j, (row, token) in enumerate(zip(index.tolist(), tokens.tolist())):
        reference, _ = decoder.step(torch.full((2,), token), state)
        torch.testing.assert_close(picked[j], reference[row])


def test_padding_in_frames_and_labels_changes_nothing():
    decoder = make_decoder()
    hidden, mask, labels = batch()
    hidden[1, 5:] = 1e3
    batched = decoder(hidden, mask, labels)
    alone = decoder(hidden[1:, :5], mask[1:, :5], labels[1:, :2])
    torch.testing.assert_close(batched.logits[1, :3], alone.logits[0])
    torch.testing.assert_close(batched.attention_weights[1, :3, :3], alone.attention_weights[0])


@pytest.mark.parametrize("overrides", VARIANTS)
def test_gradients_reach_every_parameter_but_not_padded_frames(overrides):
    decoder = make_decoder(**overrides).train()
    hidden, mask, labels = batch()
    hidden.requires_grad_(True)
    decoder(hidden, mask, labels).loss.backward()
    for name, parameter in decoder.named_parameters():
        assert parameter.grad is not None and parameter.grad.abs().sum() > 0, name
    assert (hidden.grad[1, 5:] == 0).all()
    assert (hidden.grad[1, :5].abs().sum(-1) > 0).all()


def test_scheduled_sampling_one_feeds_back_the_argmax():
    decoder = make_decoder(scheduled_sampling=1.0).train()  # dropout is 0, so train() only enables sampling
    hidden, mask, labels = batch()
    out = decoder(hidden, mask, labels)
    state = decoder.init_state(hidden, mask)
    prev = torch.full((2,), 6)
    for i in range(labels.shape[1] + 1):
        log_probs, state = decoder.step(prev, state)
        torch.testing.assert_close(log_probs, torch.log_softmax(out.logits[:, i], -1))
        prev = log_probs.argmax(-1)
    teacher = decoder.eval()(hidden, mask, labels)  # no sampling in eval mode
    assert not torch.allclose(teacher.logits, out.logits)


def test_loss_is_finite_for_a_batch_of_one_token_and_empty_labels():
    decoder = make_decoder()
    hidden, mask, _ = batch()
    out = decoder(hidden, mask, torch.tensor([[3], [-100]]))
    assert out.targets.tolist() == [[3, 6], [6, -100]]
    assert math.isfinite(out.loss.item())


def test_bad_inputs_are_refused_with_clear_errors():
    decoder = make_decoder()
    hidden, mask, _ = batch()
    with pytest.raises(ValueError, match="labels row 0 must be right-padded with -100"):
        decoder(hidden, mask, torch.tensor([[1, -100, 2], [1, 2, 3]]))
    with pytest.raises(ValueError, match="labels row 1 position 0 holds 6; allowed values: ids in"):
        decoder(hidden, mask, torch.tensor([[1, 2], [6, -100]]))
    with pytest.raises(ValueError, match="labels row 0 position 1 holds 7"):
        decoder(hidden, mask, torch.tensor([[1, 7], [1, 2]]))
    with pytest.raises(ValueError, match=r"\[batch, frames, 8\] \(LASConfig.encoder_hidden_size\)"):
        decoder(hidden[..., :4], mask, torch.tensor([[1], [2]]))
    with pytest.raises(ValueError, match=r"exceed LASConfig\.max_target_length=20"):
        decoder(hidden, mask, torch.ones(2, 21, dtype=torch.long))
    with pytest.raises(ValueError, match="needs labels"):
        decoder(hidden, mask)
