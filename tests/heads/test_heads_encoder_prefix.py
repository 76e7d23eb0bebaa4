"""The encoder prefix the language-ID pass shares with the recognition pass: a routed pass that starts from it gives
exactly today's outputs (the same modules on the same tensors: bitwise equal), runs neither the front end nor the
layers below the first adapter layer again, and is left alone where the batch or the model state differs."""

from __future__ import annotations

import pytest
import torch

from adaptspeech import AdaptSpeechForCTC
from adaptspeech.heads.encoder_prefix import shared_start
from adaptspeech.testing import tiny_config, tiny_inputs

LANGUAGES = ["cs", "ro"]


def _model(backbone: str, adapter_layers: list[int] | None, lid_layer: int, fusion: bool = False,
           stable: bool = False) -> AdaptSpeechForCTC:
    torch.manual_seed(0)
    config = tiny_config(backbone, stable_layer_norm=stable, adapter_languages=LANGUAGES,
                         adapter_layers=adapter_layers, backbone_overrides={"num_hidden_layers": 4})
    model = AdaptSpeechForCTC(config).eval()
    for block in model.adapter_blocks.values():  # adapters start as the identity: make them change the output
        for parameter in block.parameters():
            torch.nn.init.normal_(parameter, std=0.2)
    if fusion:
        model.add_fusion(LANGUAGES, target_language="ro")
    else:
        model.set_target_language("ro")
    model.add_lid_head(LANGUAGES, pooling="mean_std", layer=lid_layer)
    return model


class _Calls:
    """Counts the forward calls of modules."""

    def __init__(self, modules: dict[str, torch.nn.Module]) -> None:
        self.counts = dict.fromkeys(modules, 0)
        self.handles = [m.register_forward_hook(self._hook(name)) for name, m in modules.items()]

    def _hook(self, name: str):
        def count(module, args, output) -> None:
            self.counts[name] += 1
        return count

    def remove(self) -> None:
        for handle in self.handles:
            handle.remove()


def _front_end(model: AdaptSpeechForCTC) -> torch.nn.Module:
    backbone = model.backbone
    for name in ("subsampling", "feature_extractor", "feature_projection"):  # fbank, wav2vec2, w2v-BERT
        if hasattr(backbone, name):
            return getattr(backbone, name)
    raise AssertionError(f"no front end on {type(backbone).__name__}")


@pytest.mark.parametrize(("backbone", "stable", "adapter_layers", "lid_layer", "start"), [
    ("fbank_conformer", False, None, 1, 0),  # the demo's shape: adapters on every layer, only the front end shared
    ("fbank_conformer", False, [2, 3], 3, 2),  # layers 0-1 carry no adapter: shared too
    ("wav2vec2", False, [2, 3], 0, 1),  # pooled at 0: the layer above it is where the recognition pass starts
    ("wav2vec2", True, [1, 2, 3], 2, 1),
    ("wav2vec2_conformer", False, None, -1, 0),
    ("wav2vec2_bert", False, [1, 2, 3], 1, 1),
])
def test_a_routed_pass_from_the_prefix_equals_the_pass_without_it(backbone, stable, adapter_layers, lid_layer,
                                                                   start) -> None:
    model = _model(backbone, adapter_layers, lid_layer, stable=stable)
    inputs = tiny_inputs(model.config, batch=3, seconds=0.5)
    key = model.main_input_name
    with torch.no_grad():
        expected_logits = model.lid_logits(inputs[key], inputs["attention_mask"])
        expected = model(**inputs).logits
        logits, prefix = model.lid_logits_with_prefix(inputs[key], inputs["attention_mask"])
        assert prefix.start == start == shared_start(model, model.config.lid.resolved_layer(4))
        layers = model.config.backbone_spec.encoder_layers(model.backbone)
        calls = _Calls({"front end": _front_end(model), **{f"layer {i}": layer for i, layer in enumerate(layers)}})
        with model.reusing_encoder_prefix(prefix):
            got = model(**inputs).logits
        calls.remove()
    assert torch.equal(logits, expected_logits)
    assert torch.equal(got, expected)  # literally the same computation: bitwise equal
    assert calls.counts == {"front end": 0, **{f"layer {i}": int(i >= start) for i in range(4)}}
    assert len(model.config.backbone_spec.encoder_layers(model.backbone)) == 4  # the layer list is restored


def test_the_fusion_and_per_utterance_routing_start_from_the_prefix_too() -> None:
    model = _model("fbank_conformer", None, 1, fusion=True)
    inputs = tiny_inputs(model.config, batch=2, seconds=0.5)
    with torch.no_grad():
        expected = model(**inputs).logits
        _, prefix = model.lid_logits_with_prefix(inputs["input_features"], inputs["attention_mask"])
        with model.reusing_encoder_prefix(prefix):
            assert torch.equal(model(**inputs).logits, expected)
        model.set_fusion_active(False)
        model.set_active_languages(LANGUAGES)
        lang_ids = torch.tensor([0, 1])
        expected = model(**inputs, lang_ids=lang_ids).logits
        with model.reusing_encoder_prefix(prefix):
            assert torch.equal(model(**inputs, lang_ids=lang_ids).logits, expected)


def test_another_batch_training_or_hidden_states_run_the_whole_encoder() -> None:
    model = _model("fbank_conformer", None, 1)
    inputs = tiny_inputs(model.config, batch=2, seconds=0.5)
    other = {**inputs, "input_features": inputs["input_features"] + 1.0}
    with torch.no_grad():
        _, prefix = model.lid_logits_with_prefix(inputs["input_features"], inputs["attention_mask"])
        expected_other = model(**other).logits
        calls = _Calls({"front end": _front_end(model)})
        with model.reusing_encoder_prefix(prefix):
            assert torch.equal(model(**other).logits, expected_other)  # not the prefix's batch
            model(**inputs, output_hidden_states=True)  # asks for every layer's output
            unmasked = {"input_features": inputs["input_features"]}
            model(**unmasked)  # the same features without the mask are another batch
            model.train()
            model(**inputs)
            model.eval()
        calls.remove()
    assert calls.counts["front end"] == 4


@pytest.mark.parametrize("backbone", ["fbank_conformer", "wav2vec2"])
def test_one_utterance_identified_with_a_mask_and_transcribed_without_one_starts_from_its_prefix(backbone) -> None:
    model = _model(backbone, None, 1)
    inputs = tiny_inputs(model.config, batch=1, seconds=0.5)  # one utterance: its mask holds no padding
    key = model.main_input_name
    with torch.no_grad():
        expected = model(**{key: inputs[key]}).logits
        _, prefix = model.lid_logits_with_prefix(inputs[key], inputs["attention_mask"])
        calls = _Calls({"front end": _front_end(model)})
        with model.reusing_encoder_prefix(prefix):
            got = model(**{key: inputs[key]}).logits
        calls.remove()
    assert calls.counts["front end"] == 0 and torch.equal(got, expected)
