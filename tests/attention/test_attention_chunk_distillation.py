"""Dual-mode in-place distillation (``attention.chunk_distillation``, Yu et al. ICLR 2021): in the chunked batches of
dynamic chunk training, the full-context posteriors of the same weights and the same augmented batch teach the chunked
ones."""

from __future__ import annotations

import math

import pytest
import torch

from adaptspeech import AdaptSpeechForCTC
from adaptspeech.attention import AttentionConfig
from adaptspeech.attention.chunking import chunk_attention, draw_dynamic_chunk
from adaptspeech.testing.tiny_models import tiny_config, tiny_inputs
from adaptspeech.training import LOSS_TERMS

MAX_CHUNK = 3
#: SpecAugment and dropout on, so that the teacher seeing the student's augmentation is tested
AUGMENTED = {"spec_augment_time_masks": 2, "spec_augment_time_width": 4, "spec_augment_freq_masks": 1,
             "hidden_dropout": 0.1, "attention_dropout": 0.1, "conv_lookahead": "chunk"}


def _model(weight: float | None, **config_kwargs: object) -> AdaptSpeechForCTC:
    attention = {"kind": "rel_pos", "dynamic_chunks": True, "max_chunk_size": MAX_CHUNK, "chunk_distillation": weight}
    config = tiny_config("fbank_conformer", attention=attention, backbone_overrides=AUGMENTED, final_dropout=0.1,
                         **config_kwargs)
    torch.manual_seed(0)
    return AdaptSpeechForCTC(config).train()


def _batch(model: AdaptSpeechForCTC) -> tuple[dict[str, torch.Tensor], int]:
    inputs = tiny_inputs(model.config, batch=2, seconds=0.8)  # the second row padded: padded frames are left out
    inputs["labels"] = torch.tensor([[1, 2, 3, 4], [5, 6, -100, -100]])
    return inputs, int(model._get_feat_extract_output_lengths(inputs["input_features"].shape[1]))


def _seed_drawing(frames: int, chunked: bool) -> int:
    """A seed whose first draw of dynamic chunk training is chunks (``chunked``) or full context."""
    for seed in range(100):
        torch.manual_seed(seed)
        if (draw_dynamic_chunk(frames, MAX_CHUNK)[0] > 0) == chunked:
            return seed
    raise AssertionError("no such seed")


def test_config_accepts_a_weight_and_refuses_bad_ones() -> None:
    config = AttentionConfig(kind="rel_pos", dynamic_chunks=True, chunk_distillation=1)
    assert config.chunk_distillation == 1.0 and isinstance(config.chunk_distillation, float)
    assert AttentionConfig.from_dict(config.to_diff_dict()) == config
    assert "chunk_distillation" not in AttentionConfig(kind="rel_pos", dynamic_chunks=True).to_diff_dict()
    for bad in (-0.5, math.nan, math.inf, True, "1"):
        with pytest.raises(ValueError, match=r"^attention\.chunk_distillation must be a finite weight >= 0"):
            AttentionConfig(kind="rel_pos", dynamic_chunks=True, chunk_distillation=bad)
    with pytest.raises(ValueError, match=r"^attention\.chunk_distillation=0\.5 .*needs attention\.dynamic_chunks"):
        AttentionConfig(kind="rel_pos", chunk_distillation=0.5)


def test_chunked_batch_loss_is_ctc_plus_weighted_kl_and_the_teacher_gets_no_gradient() -> None:
    """The loss of a chunked draw is CTC + w * KL(p_full || p_chunk), KL computed here by hand over the valid frames
    with the teacher run by hand from the same random state (same SpecAugment and dropout masks) without gradient;
    the parameters' gradients are those of that loss."""
    weight = 0.7
    model = _model(weight)
    inputs, frames = _batch(model)
    seed = _seed_drawing(frames, chunked=True)

    torch.manual_seed(seed)
    out = model(**inputs)
    out.loss.backward()
    grads = {name: p.grad.clone() for name, p in model.named_parameters() if p.grad is not None}
    model.zero_grad()

    model.config.attention.chunk_distillation = None  # by hand from here on: the model's plain forward
    torch.manual_seed(seed)
    drawn = draw_dynamic_chunk(frames, MAX_CHUNK)
    state = torch.get_rng_state()
    with torch.no_grad(), chunk_attention(0):
        teacher = model(input_features=inputs["input_features"], attention_mask=inputs["attention_mask"]).logits
    torch.set_rng_state(state)
    with chunk_attention(*drawn):
        student = model(**inputs)
    log_p, log_q = teacher.log_softmax(-1), student.logits.log_softmax(-1)
    per_frame = (log_p.exp() * (log_p - log_q)).sum(-1)  # [B, T]
    valid = torch.arange(per_frame.shape[1])[None, :] < student.frame_lengths[:, None]
    assert not valid.all()  # padded frames exist and are left out
    kl = per_frame[valid].mean()
    assert float(kl.detach()) > 1e-4  # the chunks change the posteriors
    by_hand = student.loss_ctc + weight * kl
    by_hand.backward()

    torch.testing.assert_close(out.loss_ctc, student.loss_ctc, atol=0, rtol=0)  # the same augmented forward
    torch.testing.assert_close(out.loss_distill, weight * kl, atol=1e-6, rtol=1e-5)
    torch.testing.assert_close(out.loss, by_hand, atol=1e-6, rtol=1e-5)
    for name, param in model.named_parameters():
        if name in grads:
            torch.testing.assert_close(grads[name], param.grad, atol=1e-6, rtol=1e-4, msg=name)
    assert "loss_distill" in LOSS_TERMS  # logged beside loss_ctc


@pytest.mark.parametrize("weight", [None, 0.0])
def test_off_is_bitwise_the_training_without_distillation(weight: float | None) -> None:
    """Weight None or 0: the same loss and gradients as a model without the setting, on chunked draws too."""
    model, plain = _model(weight), _model(None)
    inputs, frames = _batch(model)
    seed = _seed_drawing(frames, chunked=True)
    outs = []
    for m in (model, plain):
        torch.manual_seed(seed)
        out = m(**inputs)
        out.loss.backward()
        outs.append((out, [p.grad for p in m.parameters() if p.grad is not None], torch.get_rng_state()))
    (out, grads, state), (ref, ref_grads, ref_state) = outs
    assert out.loss_distill is None
    torch.testing.assert_close(out.loss, ref.loss, atol=0, rtol=0)
    for grad, ref_grad in zip(grads, ref_grads, strict=True):
        torch.testing.assert_close(grad, ref_grad, atol=0, rtol=0)
    assert torch.equal(state, ref_state)


def test_full_context_draws_and_the_random_stream_are_unchanged() -> None:
    """A batch drawing full context trains exactly as without distillation (no teacher, no term); a chunked batch
    leaves the random stream where training without distillation leaves it (the teacher's draws are given back)."""
    model, plain = _model(0.5), _model(None)
    inputs, frames = _batch(model)
    for chunked in (False, True):
        seed = _seed_drawing(frames, chunked=chunked)
        torch.manual_seed(seed)
        out = model(**inputs)
        state = torch.get_rng_state()
        torch.manual_seed(seed)
        ref = plain(**inputs)
        assert torch.equal(state, torch.get_rng_state())
        torch.testing.assert_close(out.loss_ctc, ref.loss_ctc, atol=0, rtol=0)
        if chunked:
            assert out.loss_distill is not None and float(out.loss_distill) > 0
        else:
            assert out.loss_distill is None
            torch.testing.assert_close(out.loss, ref.loss, atol=0, rtol=0)
    model.eval()
    with torch.no_grad():
        assert model(**inputs).loss_distill is None  # evaluation: full context, no teacher


def test_a_joint_ctc_attention_model_weighs_the_term_by_chunk_distillation_not_ctc_weight() -> None:
    """With the LAS decoder beside CTC the loss mixes ``ctc_weight``; the distillation term keeps its own weight."""
    weight, ctc_weight = 0.7, 0.3
    model = _model(weight, head="ctc_las", ctc_weight=ctc_weight)
    inputs, frames = _batch(model)
    inputs["labels"] = torch.tensor([[1, 4, 5, 6], [7, 8, -100, -100]])  # no sos / eos id (2, 3) in the text
    seed = _seed_drawing(frames, chunked=True)
    torch.manual_seed(seed)
    out = model(**inputs)
    model.config.attention.chunk_distillation = None
    torch.manual_seed(seed)
    drawn = draw_dynamic_chunk(frames, MAX_CHUNK)
    state = torch.get_rng_state()
    with torch.no_grad(), chunk_attention(0):
        teacher = model(input_features=inputs["input_features"], attention_mask=inputs["attention_mask"]).logits
    torch.set_rng_state(state)
    with chunk_attention(*drawn):
        student = model(**inputs)
    log_p, log_q = teacher.log_softmax(-1), student.logits.log_softmax(-1)
    valid = torch.arange(log_p.shape[1])[None, :] < student.frame_lengths[:, None]
    kl = (log_p.exp() * (log_p - log_q)).sum(-1)[valid].mean()
    torch.testing.assert_close(out.loss_distill, weight * kl, atol=1e-6, rtol=1e-5)
    joint = ctc_weight * student.loss_ctc + (1 - ctc_weight) * student.loss_att
    torch.testing.assert_close(out.loss, joint + weight * kl, atol=1e-6, rtol=1e-5)
