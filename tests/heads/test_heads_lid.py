"""The language-ID head: both poolings against loop references, its settings checked once, the save / load round
trip, the encoder stopped at the pooled layer without adapters, and a stage that trains it on a frozen encoder."""

from __future__ import annotations

import json
import math

import pytest
import torch
from helpers.lid import two_language_corpus

from adaptspeech import AdaptSpeechForCTC
from adaptspeech.heads.lid import (
    LID_POOLINGS,
    AttentiveStatsOptions,
    AttentiveStatsPooling,
    LIDConfig,
    MeanStdPooling,
    NoOptions,
    UtteranceTooShortError,
    aam_softmax_loss,
)
from adaptspeech.testing import tiny_config

# two implementations of the same statistics (vectorised vs a loop over frames): float32 summation order differs
TOLERANCE = dict(atol=1e-5, rtol=1e-5)


def _loop_stats(hidden: torch.Tensor, weights: list[float]) -> torch.Tensor:
    mean = sum(w * h for w, h in zip(weights, hidden, strict=False))
    second = sum(w * h * h for w, h in zip(weights, hidden, strict=False))
    return torch.cat([mean, (second - mean * mean).clamp_min(1e-5).sqrt()])


def test_mean_std_pooling_matches_a_loop_over_the_real_frames() -> None:
    torch.manual_seed(0)
    hidden, mask = torch.randn(2, 6, 4), torch.tensor([[1] * 6, [1] * 3 + [0] * 3], dtype=torch.bool)
    pooled = MeanStdPooling(4, NoOptions())(hidden, mask)
    for row in range(2):
        n = int(mask[row].sum())
        torch.testing.assert_close(pooled[row], _loop_stats(hidden[row], [1 / n] * n), **TOLERANCE)


def test_attentive_stats_pooling_weights_frames_by_the_softmax_of_the_scorer() -> None:
    torch.manual_seed(0)
    pooling = AttentiveStatsPooling(4, AttentiveStatsOptions(attention_dim=3))
    hidden, mask = torch.randn(1, 5, 4), torch.tensor([[1, 1, 1, 1, 0]], dtype=torch.bool)
    with torch.no_grad():
        scores = [float(pooling.scorer(hidden[0, t])) for t in range(4)]
    total = sum(math.exp(s) for s in scores)
    expected = _loop_stats(hidden[0], [math.exp(s) / total for s in scores])
    torch.testing.assert_close(pooling(hidden, mask)[0], expected, **TOLERANCE)
    assert sum(p.numel() for p in pooling.parameters()) == 4 * 3 + 3 + 3 + 1


@pytest.mark.parametrize("pooling", LID_POOLINGS.names())
def test_an_utterance_of_one_frame_is_refused_naming_its_row(pooling: str) -> None:
    module = LID_POOLINGS.get(pooling)(4, LID_POOLINGS.options(pooling)())
    mask = torch.tensor([[1, 1, 1], [1, 0, 0]], dtype=torch.bool)
    with pytest.raises(UtteranceTooShortError, match="utterance 1 of the batch has 1 frame"):
        module(torch.randn(2, 3, 4), mask)


def test_settings_are_checked_once_naming_the_setting() -> None:
    assert LIDConfig.from_dict({"pooling": "mean_std", "layer": 0}).to_dict() == {"pooling": "mean_std", "layer": 0}
    with pytest.raises(ValueError, match=r"lid: unknown setting.*attention_dim; allowed settings: pooling, layer, "
                                         r"layer_mix, loss, margin, scale, crop_seconds$"):
        LIDConfig.from_dict({"pooling": "mean_std", "attention_dim": 8})
    with pytest.raises(ValueError, match=r"lid\.pooling: unknown lid pooling 'xvector'"):
        LIDConfig.from_dict({"pooling": "xvector"})
    with pytest.raises(ValueError, match=r"lid\.attention_dim must be a positive integer"):
        LIDConfig.from_dict({"attention_dim": 0})
    with pytest.raises(ValueError, match=r"lid\.layer 2 is outside the encoder's layers 0\.\.1"):
        tiny_config("wav2vec2", adapter_languages=["ro", "cs"], lid_languages=["ro", "cs"], lid={"layer": 2})
    with pytest.raises(ValueError, match="lid_languages names \\['ro'\\] more than once"):
        tiny_config("wav2vec2", lid_languages=["ro", "ro"])


@pytest.mark.parametrize("backbone", ["wav2vec2", "fbank_conformer"])
def test_the_head_is_saved_with_the_model_and_loads_to_the_same_logits(backbone: str, tmp_path) -> None:
    torch.manual_seed(0)
    config = tiny_config(backbone, adapter_languages=["ro", "cs"], active_languages=["ro"])
    model = AdaptSpeechForCTC(config).eval()
    model.add_lid_head(["ro", "cs", "pl"], pooling="attentive_stats", attention_dim=8, layer=0)
    inputs = torch.randn(2, 3200) if backbone == "wav2vec2" else torch.randn(2, 60, 16)
    logits = model.lid_logits(inputs)
    model.save_pretrained(tmp_path)
    saved = json.loads((tmp_path / "config.json").read_text())
    assert saved["lid_languages"] == ["ro", "cs", "pl"]
    assert saved["lid"] == {"pooling": "attentive_stats", "layer": 0, "attention_dim": 8}
    loaded = AdaptSpeechForCTC.from_pretrained(tmp_path).eval()
    assert torch.equal(loaded.lid_logits(inputs), logits)  # the same weights, the same computation
    assert loaded.trainable_parameters()["groups"]["lid"]["total"] == 32 * 8 + 8 + 8 + 1 + 64 * 3 + 3


def test_a_model_without_the_head_saves_the_config_it_always_did(tmp_path) -> None:
    AdaptSpeechForCTC(tiny_config("wav2vec2", adapter_languages=["ro"])).save_pretrained(tmp_path)
    saved = json.loads((tmp_path / "config.json").read_text())
    assert "lid" not in saved and "lid_languages" not in saved


def test_the_head_reads_the_encoder_without_adapters_up_to_its_layer() -> None:
    torch.manual_seed(0)
    model = AdaptSpeechForCTC(tiny_config("wav2vec2", adapter_languages=["ro", "cs"], active_languages=["ro"])).eval()
    model.add_lid_head(["ro", "cs"], pooling="mean_std", layer=0)
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if "adapter" in name:
                parameter.normal_(0.0, 0.5)
    inputs = torch.randn(1, 3200)
    captured = []
    layers = model.config.backbone_spec.encoder_layers(model.backbone)
    handles = [layer.register_forward_hook(lambda m, a, o: captured.append(o)) for layer in layers]
    logits = model.lid_logits(inputs)
    for handle in handles:
        handle.remove()
    assert len(captured) == 1  # the second layer never ran
    model.set_active_languages([])
    hidden = model.backbone(inputs, output_hidden_states=True).hidden_states[1]
    torch.testing.assert_close(logits, model.lid_head(hidden, torch.ones(1, hidden.shape[1], dtype=torch.bool)))
    model.set_active_languages(["ro"])
    assert model.lid_logits(inputs).equal(logits) and model.config.active_languages == ["ro"]  # settings restored


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory):
    return two_language_corpus(tmp_path_factory.mktemp("lid_corpus"))


def test_a_stage_trains_the_head_alone_and_it_tells_two_clearly_different_languages(corpus, tmp_path) -> None:
    from helpers.lid import lid_stage

    from adaptspeech.training.stage import run_stage

    torch.set_num_threads(1)
    result = run_stage(lid_stage(corpus, tmp_path / "run"), progress=False)
    trainable = result.trainable["groups"]
    assert trainable["lid"]["trainable"] == trainable["lid"]["total"] > 0
    assert all(v["trainable"] == 0 for g, v in trainable.items() if g != "lid")
    assert result.eval["lid"]["accuracy"] == 1.0 and result.eval["lid"]["num_utterances"] == 8
    losses = [entry["loss_lid"] for entry in result.log_history if "loss_lid" in entry]
    assert losses[-1] < losses[0]
    model = AdaptSpeechForCTC.from_pretrained(result.model_dir)
    assert model.config.lid_languages == ["ro", "cs"] and model.config.lid.pooling == "attentive_stats"


def test_a_stage_s_lid_settings_are_checked_before_training(tmp_path) -> None:
    from helpers.lid import lid_stage

    from adaptspeech.errors import StageConfigError
    from adaptspeech.training.stage import StageSpec

    spec = lid_stage(tmp_path / "prepared", tmp_path / "run", lid={"languages": ["ro", "cs"], "pooling": "mean_std"})
    assert StageSpec.from_dict(spec).model["lid"]["pooling"] == "mean_std"
    for lid, message in (({"pooling": "xvector"}, "model.lid.pooling: unknown lid pooling 'xvector'"),
                         ({"pooling": "mean_std", "attention_dim": 8}, "model.lid: unknown setting(s) attention_dim"),
                         ({"languages": "RO"}, "model.lid.languages: expected a list of language codes")):
        with pytest.raises(StageConfigError) as err:
            StageSpec.from_dict(lid_stage(tmp_path / "prepared", tmp_path / "run", lid=lid))
        assert str(err.value).startswith(message)


def test_the_trainer_still_finds_labels_only_among_the_forward_arguments() -> None:
    """transformers' Trainer takes every forward argument named ``*label*`` as a label: a ``lid_labels`` argument made
    ``trainer.evaluate()`` skip the loss of every batch without it (``eval_loss`` vanished)."""
    from transformers.utils import find_labels

    assert find_labels(AdaptSpeechForCTC) == ["labels"]


def test_a_head_that_would_not_train_or_would_replace_the_model_s_own_is_refused(corpus, tmp_path) -> None:
    from helpers.lid import lid_stage, model_with_lid_head

    from adaptspeech.errors import StageConfigError
    from adaptspeech.training.stage import run_stage

    spec = lid_stage(corpus, tmp_path / "a", lid={"pooling": "mean_std"})
    spec["model"]["trainable"] = {"backbone": False, "head": True}
    with pytest.raises(StageConfigError, match=r"model\.lid adds a language-ID head that would not train: set "
                                               r"model\.trainable\.lid: true"):
        run_stage(spec, progress=False)
    folder = model_with_lid_head(tmp_path / "with_head")  # mean_std over ro, cs
    spec = lid_stage(corpus, tmp_path / "b", lid={"pooling": "attentive_stats"})
    spec["model"] = {"init": "pretrained", "path": str(folder), "lid": {"pooling": "attentive_stats"},
                     "trainable": {"lid": True}}
    with pytest.raises(StageConfigError, match=r"model\.lid: the model already has a language-ID head over \['ro', "
                                               r"'cs'\] \(.*'mean_std'.*\); remove model.lid to train it further"):
        run_stage(spec, progress=False)


def test_with_transcripts_the_language_id_cross_entropy_is_added_to_the_ctc_loss() -> None:
    torch.manual_seed(0)
    model = AdaptSpeechForCTC(tiny_config("wav2vec2", adapter_languages=["ro", "cs"], active_languages=["ro"])).eval()
    model.add_lid_head(["ro", "cs"], pooling="mean_std")
    inputs, labels, targets = torch.randn(2, 3200), torch.tensor([[5, 6], [7, -100]]), torch.tensor([0, 1])
    out = model(input_values=inputs, labels=labels, lid_targets=targets)
    expected = torch.nn.functional.cross_entropy(model.lid_logits(inputs), targets)
    assert torch.equal(out.loss_lid, expected) and torch.equal(out.loss, out.loss_ctc + out.loss_lid)
    alone = model(input_values=inputs, lid_targets=targets)  # no transcripts: the language-ID pass only
    assert alone.logits is None and torch.equal(alone.loss, expected)


@pytest.mark.parametrize("backbone", ["wav2vec2", "fbank_conformer"])
def test_the_layer_mix_with_one_hot_weights_is_the_single_layer_head(backbone: str) -> None:
    def model_with(**lid: object) -> AdaptSpeechForCTC:
        torch.manual_seed(0)  # the same encoder and head weights
        model = AdaptSpeechForCTC(tiny_config(backbone, adapter_languages=["ro", "cs"], active_languages=["ro"]))
        model.add_lid_head(["ro", "cs"], pooling="attentive_stats", attention_dim=8, **lid)
        return model.eval()

    mixed = model_with(layer=1, layer_mix=True)
    assert mixed.lid_head.layer_mix.weights.shape == (2,)
    inputs = torch.randn(2, 3200) if backbone == "wav2vec2" else torch.randn(2, 60, 16)
    with torch.no_grad():
        for layer, weights in ((0, [0.0, -float("inf")]), (1, [-float("inf"), 0.0])):
            single = model_with(layer=layer)
            single.lid_head.load_state_dict(mixed.lid_head.state_dict(), strict=False)
            mixed.lid_head.layer_mix.weights.copy_(torch.tensor(weights))
            assert torch.equal(mixed.lid_logits(inputs), single.lid_logits(inputs))
        if backbone == "wav2vec2":  # equal shares: the mean of the two layers' outputs (hidden_states[i + 1])
            mixed.lid_head.layer_mix.weights.zero_()
            with mixed.without_adapters():
                states = mixed.backbone(inputs, output_hidden_states=True).hidden_states
            mean, mask = (states[1] + states[2]) / 2, torch.ones(2, states[1].shape[1], dtype=torch.bool)
            expected = mixed.lid_head.classifier(mixed.lid_head.pooling(mean, mask))
            torch.testing.assert_close(mixed.lid_logits(inputs), expected, **TOLERANCE)


def test_a_layer_mix_runs_the_encoder_up_to_its_depth_and_round_trips_bit_identically(tmp_path) -> None:
    torch.manual_seed(0)
    model = AdaptSpeechForCTC(tiny_config("wav2vec2", adapter_languages=["ro", "cs"], active_languages=["ro"],
                                          backbone_overrides={"num_hidden_layers": 3})).eval()
    model.add_lid_head(["ro", "cs"], pooling="mean_std", layer=1, layer_mix=True, loss="aam_softmax", margin=0.3,
                       scale=20, crop_seconds=[1, 4])
    with torch.no_grad():
        model.lid_head.layer_mix.weights.copy_(torch.tensor([0.3, -0.7]))
    ran = []
    layers = model.config.backbone_spec.encoder_layers(model.backbone)
    handles = [layer.register_forward_hook(lambda m, a, o, i=i: ran.append(i)) for i, layer in enumerate(layers)]
    inputs = torch.randn(2, 3200)
    logits = model.lid_logits(inputs)
    for handle in handles:
        handle.remove()
    assert ran == [0, 1]  # the layer above the mix's depth never ran
    model.save_pretrained(tmp_path)
    saved = json.loads((tmp_path / "config.json").read_text())
    assert saved["lid"] == {"pooling": "mean_std", "layer": 1, "layer_mix": True, "loss": "aam_softmax",
                            "margin": 0.3, "scale": 20, "crop_seconds": [1.0, 4.0]}
    loaded = AdaptSpeechForCTC.from_pretrained(tmp_path).eval()
    assert loaded.config.lid == model.config.lid
    assert torch.equal(loaded.lid_head.layer_mix.weights, model.lid_head.layer_mix.weights)
    assert torch.equal(loaded.lid_logits(inputs), logits)
    assert loaded.lid_head.classifier.bias is None  # cosine logits: no bias
    assert float(logits.detach().abs().max()) <= 20.0 + 1e-4  # scale * cosine


def test_the_layer_mix_keeps_the_shared_encoder_prefix_for_recognition() -> None:
    torch.manual_seed(0)
    model = AdaptSpeechForCTC(tiny_config("fbank_conformer", adapter_languages=["ro", "cs"], active_languages=["ro"],
                                          adapter_layers=[1])).eval()
    model.add_lid_head(["ro", "cs"], pooling="mean_std", layer=1, layer_mix=True)
    features = torch.randn(1, 50, 16)
    with torch.no_grad():
        logits, prefix = model.lid_logits_with_prefix(features)
        assert prefix.start == 1 and torch.equal(logits, model.lid_logits(features))
        with model.reusing_encoder_prefix(prefix):
            routed = model(input_features=features).logits
        assert torch.equal(routed, model(input_features=features).logits)


def test_aam_softmax_loss_matches_the_angular_formula() -> None:
    torch.manual_seed(0)
    cosine, labels, margin, scale = torch.rand(5, 4) * 1.6 - 0.8, torch.tensor([0, 3, 1, 2, 3]), 0.25, 12.0
    expected = []
    for row, label in zip(cosine.tolist(), labels.tolist(), strict=True):
        logits = [scale * (math.cos(math.acos(c) + margin) if j == label else c) for j, c in enumerate(row)]
        expected.append(-logits[label] + math.log(sum(math.exp(v) for v in logits)))
    loss = aam_softmax_loss(cosine, labels, margin, scale)
    assert loss.item() == pytest.approx(sum(expected) / len(expected), rel=1e-5)
    assert aam_softmax_loss(cosine, labels, 0.0, scale).item() == pytest.approx(
        torch.nn.functional.cross_entropy(scale * cosine, labels).item(), rel=1e-6)
    # past pi - margin the target logit keeps falling: cos(theta) - margin * sin(margin)
    far = torch.tensor([[-0.999, 0.0]])
    widened = -0.999 - 0.25 * math.sin(0.25)
    reference = -scale * widened + math.log(math.exp(scale * widened) + 1.0)
    assert aam_softmax_loss(far, torch.tensor([0]), 0.25, scale).item() == pytest.approx(reference, rel=1e-5)


def test_the_aam_head_trains_with_the_margin_loss() -> None:
    torch.manual_seed(0)
    model = AdaptSpeechForCTC(tiny_config("wav2vec2", adapter_languages=["ro", "cs"])).eval()
    model.add_lid_head(["ro", "cs"], pooling="mean_std", loss="aam_softmax", margin=0.2, scale=10)
    inputs, targets = torch.randn(2, 3200), torch.tensor([0, 1])
    out = model(input_values=inputs, lid_targets=targets)
    cosine = model.lid_logits(inputs) / 10
    assert torch.equal(out.loss, aam_softmax_loss(cosine, targets, 0.2, 10.0))
    assert out.loss > torch.nn.functional.cross_entropy(10 * cosine, targets)  # the margin makes it harder


@pytest.mark.parametrize(("settings", "message"), [
    ({"layer_mix": "yes"}, r"lid\.layer_mix must be true or false, got 'yes'"),
    ({"loss": "arcface"}, r"lid\.loss: unknown value 'arcface'; allowed values: cross_entropy, aam_softmax"),
    ({"loss": "aam_softmax", "margin": 2.0}, r"lid\.margin must be an angle in radians from 0 to below pi/2"),
    ({"loss": "aam_softmax", "margin": -0.1}, r"lid\.margin must be an angle"),
    ({"loss": "aam_softmax", "scale": 0}, r"lid\.scale must be a positive number, got 0"),
    ({"loss": "aam_softmax", "scale": float("nan")}, r"lid: scale must be a finite number, got nan"),
    ({"margin": 0.2}, r"lid\.margin: a setting of loss aam_softmax; this head has loss 'cross_entropy'"),
    ({"crop_seconds": [4, 1]}, r"lid\.crop_seconds must be \[shortest, longest\] seconds with 0 < shortest <= "
                               r"longest, got \[4, 1\]"),
    ({"crop_seconds": 2}, r"lid\.crop_seconds must be \[shortest, longest\]"),
    ({"crop_seconds": [0, 2]}, r"lid\.crop_seconds must be"),
])
def test_each_new_setting_refuses_a_bad_value_in_one_line(settings: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message) as err:
        LIDConfig.from_dict(settings)
    assert "\n" not in str(err.value)


def test_aam_defaults_are_filled_in_and_saved() -> None:
    lid = LIDConfig.from_dict({"loss": "aam_softmax"})
    assert (lid.margin, lid.scale) == (0.2, 30.0)
    assert LIDConfig.from_dict(lid.to_dict()) == lid


def test_the_training_batches_of_a_head_trained_alone_carry_its_crops(tmp_path) -> None:
    from adaptspeech.data.collator import model_collator
    from adaptspeech.data.processor import build_processor
    from adaptspeech.data.text import build_vocab

    processor = build_processor(build_vocab(["ab"]), tmp_path, feature_type="waveform")
    model = AdaptSpeechForCTC(tiny_config("wav2vec2", adapter_languages=["ro", "cs"]))
    model.add_lid_head(["ro", "cs"], pooling="mean_std", crop_seconds=[1, 4])
    assert model_collator(model, processor, lid_targets=True, ctc_labels=False).lid_crop_seconds == (1.0, 4.0)
    assert model_collator(model, processor).lid_crop_seconds is None  # recognition batches: whole utterances
    with pytest.raises(ValueError, match=r"lid\.crop_seconds \[1\.0, 4\.0\]: random crops cut the audio away"):
        model_collator(model, processor, lid_targets=True, ctc_labels=True)


@pytest.mark.parametrize("backbone", ["wav2vec2", "fbank_conformer"])
@pytest.mark.parametrize("layer_mix", [False, True], ids=["pooled_layer", "layer_mix"])
def test_layerdrop_in_training_mode_never_skips_the_pooled_layers(backbone: str, layer_mix: bool) -> None:
    """``layerdrop > 0`` in training mode skipped the hooked layer at random: the capture hook never ran, the pass
    ended in ``IndexError: list index out of range`` (or, with the layer mix, stacked fewer layers than it weighs). The
    language-ID pass runs every layer up to the pooled one: the training-mode logits are the full encoder's, and the
    recognition passes around it still drop layers (the setting is restored)."""
    from adaptspeech.testing import tiny_inputs

    torch.manual_seed(0)
    model = AdaptSpeechForCTC(tiny_config(backbone, backbone_overrides={"layerdrop": 1.0}))
    model.add_lid_head(["ro", "cs"], pooling="mean_std", layer=1, layer_mix=layer_mix)
    inputs = tiny_inputs(model.config, pad_last=False)
    encoder_config = model.config.backbone_spec.encoder_module(model.backbone).config
    model.train()
    with torch.no_grad():
        encoder_config.layerdrop = 0.0  # the reference: the same training-mode pass without LayerDrop
        torch.manual_seed(1)
        reference = model.lid_logits(inputs[model.main_input_name])
        encoder_config.layerdrop = 1.0
        torch.manual_seed(1)
        logits = model.lid_logits(inputs[model.main_input_name])
        assert torch.equal(logits, reference)
        assert encoder_config.layerdrop == 1.0
        # the recognition pass drops every layer (layerdrop 1.0): its output is not the full encoder's
        dropped = model(**inputs).logits
        full = model.eval()(**inputs).logits
    assert not torch.allclose(dropped, full)
