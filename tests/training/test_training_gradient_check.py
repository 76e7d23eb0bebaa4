"""A run in which a parameter reported as trainable receives no gradient stops with one line naming its group;
LayerDrop and per-utterance routing, which legitimately skip parameters on a step, do not trip it."""

from __future__ import annotations

import pytest
import torch
from helpers.training import LANGS, make_dataset, training_args

from adaptspeech import AdaptSpeechForCTC
from adaptspeech.data import DataCollatorCTCWithPadding
from adaptspeech.testing import tiny_config
from adaptspeech.training import AdaptSpeechTrainer, TrainingError


def model_with_adapters(**backbone_overrides) -> AdaptSpeechForCTC:
    torch.manual_seed(0)
    config = tiny_config("fbank_conformer", adapter_languages=LANGS, adapter_defaults={"bottleneck": 8},
                         backbone_overrides=backbone_overrides)
    return AdaptSpeechForCTC(config)


def train(model, processor, tmp_path, routed: bool = False, rows=None, **kwargs) -> AdaptSpeechTrainer:
    collator = DataCollatorCTCWithPadding(
        processor, feature_type="fbank", language_to_id=model.language_to_id if routed else None
    )
    trainer = AdaptSpeechTrainer(
        model=model, args=training_args(tmp_path, **kwargs.pop("args", {})), train_dataset=rows or make_dataset(),
        data_collator=collator, **kwargs
    )
    trainer.train()
    return trainer


def test_a_trainable_adapter_that_is_not_active_stops_the_run(tmp_path, processor):
    model = model_with_adapters()
    model.set_trainable(adapters=["ro"], head=True)
    model.set_active_languages([])  # no adapter runs (set_trainable refuses or activates; this switches it off after)
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    with pytest.raises(TrainingError) as info:
        train(model, processor, tmp_path)
    message = str(info.value)
    assert message.startswith("step 1: adapter:ro (8 tensors, e.g. backbone.encoder.layers.0.language_adapters.")
    assert "receives no gradient although reported as trainable" in message and "\n" not in message
    # stopped before the first optimizer step: nothing changed
    assert all(torch.equal(p, before[n]) for n, p in model.named_parameters())


def test_a_trainable_fusion_that_is_switched_off_stops_the_run(tmp_path, processor):
    model = model_with_adapters()
    model.add_fusion(LANGS, target_language="ro")
    model.set_trainable(fusion=True, adapters=["ro"])
    model.set_active_languages(["ro"])  # switches the fusion off
    with pytest.raises(TrainingError, match=r"^step 1: fusion \(\d+ tensors, e\.g\. .*\) receives no gradient"):
        train(model, processor, tmp_path)


def test_layerdrop_and_routing_skip_parameters_without_stopping_the_run(tmp_path, processor):
    """LayerDrop 0.7 skips whole layers on most steps and batches of 2 leave languages out: the excused parameters are
    not reported, and the check ran over all 8 steps."""
    model = model_with_adapters(layerdrop=0.7)
    model.set_active_languages(LANGS)
    model.set_trainable(adapters=LANGS, backbone=True, head=True)
    skipped: list[int] = []
    layers = model._encoder_layers()
    hook = layers[0].register_forward_pre_hook(lambda m, a: skipped.append(0))
    trainer = train(model, processor, tmp_path, routed=True, args={"per_device_train_batch_size": 2, "max_steps": 8},
                    gradient_check_steps=8)
    hook.remove()
    assert trainer.state.global_step == 8 and trainer.gradient_check.checked == 8
    assert len(skipped) < 8  # layer 0 was really dropped on some steps


def test_the_check_can_be_disabled(tmp_path, processor):
    model = model_with_adapters()
    model.set_trainable(adapters=["ro"], head=True)
    model.set_active_languages([])
    trainer = train(model, processor, tmp_path, gradient_check_steps=0)
    assert trainer.state.global_step == 6
