"""A training step in which LayerDrop skips every layer that holds a trainable parameter (adapter-only training, the
head frozen): the loss then has no autograd graph. The step must not crash with torch's "element 0 of tensors does
not require grad" (what the recipe dry run hit once the frozen wav2vec2 front end stopped marking the waveform as
requiring grad); the trainable parameters get zero gradients, as they would under DDP, and nothing moves except by
the optimizer's own rules (no weight decay here: they stay exactly as they were)."""

from __future__ import annotations

import pytest
import torch
from helpers.training import make_dataset, training_args, waveforms

from adaptspeech import AdaptSpeechForCTC
from adaptspeech.data import DataCollatorCTCWithPadding
from adaptspeech.testing import tiny_config
from adaptspeech.training import AdaptSpeechTrainer


@pytest.mark.parametrize("backbone", ["fbank_conformer", "wav2vec2"])
def test_a_step_with_every_adapter_layer_dropped_trains_on(tmp_path, processor, backbone):
    torch.manual_seed(0)
    config = tiny_config(backbone, adapter_languages=["ro"], active_languages=["ro"],
                         adapter_defaults={"bottleneck": 8}, vocab_size=len(processor.tokenizer),
                         backbone_overrides={"layerdrop": 1.0})
    model = AdaptSpeechForCTC(config)
    model.set_trainable(adapters=["ro"])
    if backbone == "fbank_conformer":
        data, feature_type = make_dataset(8, languages=["ro"]), "fbank"
    else:
        data, feature_type = waveforms(), "waveform"
    before = {k: v.detach().clone() for k, v in model.named_parameters() if v.requires_grad}
    assert before
    trainer = AdaptSpeechTrainer(
        model=model, args=training_args(tmp_path, max_steps=2, weight_decay=0.0),
        train_dataset=data, data_collator=DataCollatorCTCWithPadding(processor, feature_type=feature_type),
    )
    trainer.train()
    assert trainer.state.global_step == 2
    for name, param in model.named_parameters():
        if param.requires_grad:
            assert torch.equal(param.detach(), before[name]), name
    # with LayerDrop off the same setting trains the adapter
    model.config.backbone_config.layerdrop = 0.0
    model.backbone.config.layerdrop = 0.0
    AdaptSpeechTrainer(
        model=model, args=training_args(tmp_path / "on", max_steps=2, weight_decay=0.0),
        train_dataset=data, data_collator=DataCollatorCTCWithPadding(processor, feature_type=feature_type),
    ).train()
    assert any(not torch.equal(p.detach(), before[n]) for n, p in model.named_parameters() if p.requires_grad)
