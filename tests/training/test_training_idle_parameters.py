"""Backbone parameters that the backbone's own forward never uses: reported as trainable they would
receive no gradient, so ``run_stage`` freezes them and lists them; the gradient check names them otherwise."""

from __future__ import annotations

import pytest
import torch
from helpers.training import training_args, waveforms

from adaptspeech import AdaptSpeechForCTC
from adaptspeech.data import DataCollatorCTCWithPadding
from adaptspeech.testing import tiny_config, tiny_inputs
from adaptspeech.training import AdaptSpeechTrainer, TrainingError
from adaptspeech.training.distributed import idle_backbone_parameters
from adaptspeech.training.stage import _freeze_unused_backbone_parameters


def conformer() -> AdaptSpeechForCTC:
    torch.manual_seed(0)
    model = AdaptSpeechForCTC(tiny_config("wav2vec2_conformer", adapter_languages=["ro"],
                                          adapter_defaults={"bottleneck": 8}))
    model.set_trainable(backbone=True, head=True)
    return model


def test_the_unused_modules_of_the_backbone_are_listed():
    model = conformer()
    idle = idle_backbone_parameters(model, tiny_inputs(model.config))
    assert idle and all(name.startswith("backbone.encoder.pos_conv_embed.") for name in idle)
    torch.manual_seed(0)
    wav2vec2 = AdaptSpeechForCTC(tiny_config("wav2vec2", backbone_overrides={"mask_feature_prob": 0.1}))
    wav2vec2.set_trainable(backbone=True, head=True)
    assert idle_backbone_parameters(wav2vec2, tiny_inputs(wav2vec2.config)) == ["backbone.masked_spec_embed"]
    model.set_trainable(head=True)  # frozen ones are not listed
    assert idle_backbone_parameters(model, tiny_inputs(model.config)) == []


def test_frozen_unused_parameters_let_the_backbone_train(tmp_path, processor):
    collator = DataCollatorCTCWithPadding(processor, feature_type="waveform")
    model = conformer()
    with pytest.raises(TrainingError, match=r"^step 1: backbone \(\d+ tensors, e\.g\. backbone\.encoder\.pos_conv"):
        AdaptSpeechTrainer(model=model, args=training_args(tmp_path, max_steps=2), train_dataset=waveforms(),
                           data_collator=collator).train()
    model = conformer()
    frozen = _freeze_unused_backbone_parameters(model, collator([waveforms()[i] for i in range(2)]))
    assert frozen == idle_backbone_parameters(conformer(), tiny_inputs(model.config))
    trainer = AdaptSpeechTrainer(model=model, args=training_args(tmp_path, max_steps=2), train_dataset=waveforms(),
                                 data_collator=collator)
    trainer.train()
    assert trainer.state.global_step == 2
