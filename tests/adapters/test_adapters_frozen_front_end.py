"""A frozen front end is frozen for autograd too: ``set_trainable`` without the backbone clears transformers'
``Wav2Vec2FeatureEncoder._requires_grad``, which otherwise marks the waveform as requiring grad in training mode and
makes autograd record and back-propagate the 16 kHz convolutions although no parameter there trains."""

import torch

from adaptspeech import AdaptSpeechForCTC
from adaptspeech.testing import tiny_config, tiny_inputs


def front_end_output_requires_grad(model) -> bool:
    seen = []
    handle = model.backbone.feature_extractor.register_forward_hook(lambda m, a, out: seen.append(out.requires_grad))
    model.train()
    model(**tiny_inputs(model.config), labels=torch.tensor([[4, 5], [5, -100]]))
    handle.remove()
    return seen[0]


def test_adapter_training_records_no_graph_through_the_frozen_front_end():
    torch.manual_seed(0)
    model = AdaptSpeechForCTC(tiny_config("wav2vec2", adapter_languages=["ro"], active_languages=["ro"]))
    model.set_trainable(adapters=["ro"])
    assert model.backbone.feature_extractor._requires_grad is False
    assert not front_end_output_requires_grad(model)
    model.set_trainable(adapters=["ro"], backbone=True)  # training the backbone again turns it back on
    assert model.backbone.feature_extractor._requires_grad is True and front_end_output_requires_grad(model)
    model.set_trainable(adapters=["ro"], backbone=True, feature_encoder=False)
    assert not front_end_output_requires_grad(model)
    assert not any(p.requires_grad for p in model.backbone.feature_extractor.parameters())
    model.set_trainable(backbone=True)
    model.freeze_base_model()
    assert model.backbone.feature_extractor._requires_grad is False
