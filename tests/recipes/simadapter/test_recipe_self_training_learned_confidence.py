"""The demo's ``self_training`` section with its default word confidence at toy scale: with the LM, ``learned``: each
teacher's estimator is fitted on the LM beam's words of the target's dev split, saved in the round's folder (not in
the teacher's model folder), recorded in ``round.json`` and in the round's key, and it scores the pool's labels;
without the LM the default stays ``max_prob/min`` and ``learned`` is refused at load.

The toy teacher (3 steps) gets no word of dev right, so nothing can be fitted on its words: the default then labels
with ``max_prob/min`` (recorded), a ``learned`` set in the recipe is refused in one line. To fit one, the rounds run
again from the toy run with one dev row's reference made the teacher's own LM hypothesis (what a teacher that knows
those words says): dev then has right and wrong words."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest
from helpers.recipes import DEMO
from helpers.recipes import self_training_overrides as _overrides

from adaptspeech.data.pools import load_pool
from adaptspeech.data.prepared_data import load_prepared
from adaptspeech.decoding.confidence import ConfidenceMethod
from adaptspeech.decoding.confidence_estimator import ESTIMATOR_FILE, LM_BEAM, load_estimator
from adaptspeech.inference.pseudo_labels.confidence_comparison import decode_split, fit_split_estimator
from adaptspeech.inference.pseudo_labels.labelling import label_batches
from adaptspeech.lm.decoder import LMDecoder, build_decoder
from adaptspeech.modeling import AdaptSpeechForCTC
from adaptspeech.recipes import RecipeError, load_recipe, run_recipe
from adaptspeech.recipes.simadapter.self_training import LMSetup, SelfTrainingRunner, same_round
from adaptspeech.recipes.simadapter.self_training_settings import SelfTrainingSettings
from adaptspeech.saved_model import model_fingerprint

BEAM = 8  # self_training.beam_size of the toy run


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    out = tmp_path_factory.mktemp("st_learned")
    overrides = _overrides(out, "self_training.rounds=1")
    return out, run_recipe(load_recipe(DEMO, overrides)), overrides


def _decoder(out, processor, alpha, beta):
    decoder = LMDecoder(build_decoder(processor.tokenizer, out / "lm"), beam_width=BEAM)
    decoder.set_weights(alpha, beta)
    return decoder


def _runner(out, overrides, settings=None):
    spec = load_recipe(DEMO, overrides)
    settings = settings or spec.self_training
    lm = LMSetup(out / "lm", spec.lm.alphas, spec.lm.betas, spec.lm.beam_size)
    return SelfTrainingRunner(spec, settings, out / "prepared", out / "self_training" / "pool", lm)


def _teachable_dev(out, dev):
    """``dev`` with row 0's reference the toy teacher's LM hypothesis (alpha = beta = 1)."""
    _, processor = load_prepared(out / "prepared")
    model = AdaptSpeechForCTC.from_pretrained(out / "target_adapter" / "model")
    said = decode_split(model, processor, dev.select([0]), _decoder(out, processor, 1.0, 1.0), BEAM).lm_texts[0]
    assert said.strip()
    return dev.map(lambda row, i: {"text": said if i == 0 else row["text"]}, with_indices=True)


@pytest.fixture(scope="module")
def fitted(run, tmp_path_factory):
    out, _, overrides = run
    runner = _runner(out, overrides)
    runner.dev = _teachable_dev(out, runner.dev)
    folder = tmp_path_factory.mktemp("st_learned_rounds")
    runner.run_system("target_adapter", folder=folder)
    round_dir = folder / "round_1"
    return out, runner, round_dir, json.loads((round_dir / "round.json").read_text())


def test_an_unfittable_default_labels_with_max_prob_and_says_so(run):
    out, result, _ = run
    stored = json.loads((out / "self_training" / "target_adapter" / "round_1" / "round.json").read_text())
    assert result["self_training"]["settings"]["confidence"] == "learned"
    assert stored["key"]["settings"]["confidence"] == "learned"
    skipped = stored["record"]["labels"]["confidence_estimator"]
    assert skipped["labelled_with"] == "max_prob/min" and "0 are correct" in skipped["skipped"]
    assert not (out / "self_training" / "target_adapter" / "round_1" / ESTIMATOR_FILE).exists()


def test_an_unfittable_learned_set_in_the_recipe_is_one_line(run, tmp_path):
    out, _, overrides = run
    spec = load_recipe(DEMO, overrides)
    runner = _runner(out, overrides, dataclasses.replace(spec.self_training, confidence="learned"))
    with pytest.raises(RecipeError) as err:
        runner.run_system("target_adapter", folder=tmp_path)
    message = str(err.value)
    assert message.startswith("self_training.confidence: learned: the learned word confidence of ")
    assert "sk dev split" in message and "0 are correct" in message and "\n" not in message
    assert not (tmp_path / "round_1" / "labels").exists()  # refused before the pool is labelled


def test_the_estimator_is_fitted_on_dev_and_saved_in_the_round(fitted):
    out, runner, round_dir, stored = fitted
    record = stored["record"]
    saved = load_estimator(round_dir / ESTIMATOR_FILE)
    assert stored["key"]["settings"]["confidence"] == "learned"
    assert stored["key"]["confidence_estimator"] == {"fitted_on": "dev", "features": list(saved.features),
                                                     "l2": saved.fitted_on["l2"]}
    assert record["labels"]["confidence_estimator"]["file"] == str(round_dir / ESTIMATOR_FILE)
    assert record["labels"]["confidence_estimator"]["weights"] == list(saved.weights)
    teacher = out / "target_adapter" / "model"
    assert not (teacher / ESTIMATOR_FILE).exists()  # the teacher's folder (and fingerprint) is left as it was
    assert stored["key"]["teacher"] == model_fingerprint(teacher)
    assert 0 < saved.fitted_on["correct_share"] < 1 and saved.fitted_on["split"] == "dev"
    # refitted here on that dev, decoded by the teacher with the LM at the round's weights: the same estimator
    _, processor = load_prepared(out / "prepared")
    model = AdaptSpeechForCTC.from_pretrained(teacher)
    split = decode_split(model, processor, runner.dev, _decoder(out, processor, record["alpha"], record["beta"]), BEAM)
    refit = fit_split_estimator(split, processor.tokenizer, LM_BEAM)
    assert saved.decoder == LM_BEAM and saved.features == refit.features
    assert saved.weights == pytest.approx(refit.weights, abs=1e-6)
    assert saved.bias == pytest.approx(refit.bias, abs=1e-6)
    assert saved.fitted_on["words"] == refit.fitted_on["words"]


def test_the_labels_carry_the_estimator_s_confidences(fitted):
    out, _, round_dir, stored = fitted
    record = stored["record"]
    labels = {r["index"]: r for r in map(json.loads, (round_dir / "labels" / "labels.jsonl").read_text().splitlines())}
    _, processor = load_prepared(out / "prepared")
    model = AdaptSpeechForCTC.from_pretrained(out / "target_adapter" / "model")
    decoder = _decoder(out, processor, record["alpha"], record["beta"])
    rows, _ = load_pool(out / "self_training" / "pool")
    indices = sorted(labels)
    scored = []
    for method in (ConfidenceMethod(estimator=str(round_dir / ESTIMATOR_FILE)), ConfidenceMethod()):
        batches = label_batches(model, processor, rows, indices, decoder, beam_size=BEAM, method=method)
        scored.append({r["index"]: r for batch in batches for r in batch})
    learned, plain = scored
    words = [c for i in indices for _, c in labels[i]["words"]]
    assert words, "the toy teacher labelled no word"
    assert words == pytest.approx([c for i in indices for _, c in learned[i]["words"]], abs=1e-5)
    assert not np.allclose(words, [c for i in indices for _, c in plain[i]["words"]], atol=1e-3)
    assert [labels[i]["confidence"] for i in indices] == pytest.approx(
        [learned[i]["confidence"] for i in indices], abs=1e-5)


def test_the_key_tells_a_learned_round_from_a_max_prob_round(fitted):
    key = fitted[3]["key"]
    other = {**key, "settings": {**key["settings"], "confidence": "max_prob/min"}}
    other.pop("confidence_estimator")
    assert same_round(key, json.loads(json.dumps(key)))
    assert not same_round(key, other)


def test_without_the_lm_the_default_stays_max_prob_and_learned_is_refused_at_load(tmp_path):
    assert SelfTrainingSettings(use_lm=False).resolved(False).confidence == "max_prob/min"
    assert SelfTrainingSettings().resolved(True).confidence == "learned"
    assert SelfTrainingSettings(confidence="tsallis_exp@0.33/min").resolved(True).confidence == "tsallis_exp@0.33/min"
    with pytest.raises(RecipeError) as err:
        load_recipe(DEMO, [f"output_dir={tmp_path}", "self_training.use_lm=false", "self_training.confidence=learned"])
    assert "self_training.confidence: learned" in str(err.value) and "use_lm: true" in str(err.value)
    assert "\n" not in str(err.value)
    with pytest.raises(RecipeError, match=r"^self_training\.confidence: learned .*no n-gram LM[^\n]*$"):
        SelfTrainingSettings(confidence="learned").resolved(False)
