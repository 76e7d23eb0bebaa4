"""The demo's ``self_training`` section with the new teachers, filters and students at toy scale: SimAdapter fusion
labels for the adapter alone, the kept share rises per round (``keep_fraction_schedule``), an entropy confidence with
its N-best temperature fitted on dev, students of a wider bottleneck that are the average of their two best
checkpoints by dev CER (TopIPL), and the rounds stop when dev CER stops improving, the best round chosen."""

from __future__ import annotations

import json

import pytest
from helpers.recipes import DEMO
from helpers.recipes import ST_POOL_CLIPS as POOL_CLIPS
from helpers.recipes import self_training_overrides as _overrides

from adaptspeech.recipes import RecipeError, load_recipe, run_recipe
from adaptspeech.recipes.simadapter.self_training import same_round
from adaptspeech.saved_model import model_fingerprint

ADAPTER = "target adapter alone"
SCHEDULE = [0.5, 0.75, 1.0]
NEW = ["self_training.rounds=3", f"self_training.keep_fraction_schedule={SCHEDULE}", "self_training.keep_fraction=null",
       "self_training.teacher=fusion",
       "self_training.confidence=tsallis_exp@0.33/min", "self_training.fit_nbest_temperature=true",
       "self_training.average_top_n=2", "self_training.adapter_bottleneck=16"]


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    out = tmp_path_factory.mktemp("st_teachers")
    return out, run_recipe(load_recipe(DEMO, _overrides(out, *NEW)))


def test_fusion_labels_the_rising_share_and_the_rounds_stop_on_dev_cer(run):
    out, result = run
    entry = result["self_training"]["systems"][ADAPTER]
    rounds = entry["rounds"]
    first = json.loads((out / "self_training" / "target_adapter" / "round_1" / "round.json").read_text())
    assert first["record"]["teacher"] == str(out / "fusion" / "model")  # SimAdapter labels for the adapter
    assert first["key"]["teacher"] == model_fingerprint(out / "fusion" / "model")
    assert entry["teacher_dev_cer"] == json.loads((out / "target_adapter" / "stage_summary.json").read_text())[
        "dev"]["overall"]["cer"]  # a student must beat the adapter itself, not the fusion
    for r in rounds:
        labels = r["labels"]
        share = SCHEDULE[r["round"] - 1]
        assert labels["filter"] == f"keep fraction {share:g}"
        assert labels["kept"] <= round(share * POOL_CLIPS) and labels["kept"] <= labels["lm_agreeing"]
        assert labels["nbest_temperature"] > 0
    best = entry["teacher_dev_cer"]
    for r in rounds[:-1]:  # every round but the last improved on the best so far; the last ran out or did not
        assert r["improved"] and r["dev_cer"] < best
        best = r["dev_cer"]
    assert len(rounds) == 3 or not rounds[-1]["improved"]
    dev = [entry["teacher_dev_cer"]] + [r["dev_cer"] for r in rounds]
    assert dev[entry["chosen_round"]] == min(dev)
    if len(rounds) > 1:  # round 2 labels with round 1's student, the latest one
        second = json.loads((out / "self_training" / "target_adapter" / "round_2" / "round.json").read_text())
        assert second["record"]["teacher"] == rounds[0]["student"]


def test_students_are_wider_and_the_average_of_their_best_checkpoints(run):
    out, result = run
    student = out / "self_training" / "target_adapter" / "round_1" / "student"
    spec = json.loads((student / "stage_spec.json").read_text())
    assert spec["model"]["add_adapters"]["sk"]["bottleneck"] == 16
    assert spec["training"]["save_steps"] == spec["training"]["eval_steps"] == 1  # 6 steps // (2 x 2)
    summary = json.loads((student / "stage_summary.json").read_text())
    averaged = summary["averaged_checkpoints"]
    assert len(averaged["averaged"]) == 2 and averaged["metrics"] == sorted(averaged["metrics"])
    # the round's dev CER is the averaged model's, evaluated after averaging
    assert result["self_training"]["systems"][ADAPTER]["rounds"][0]["dev_cer"] == summary["dev"]["overall"]["cer"]
    assert json.loads((student / "model" / "config.json").read_text())["adapters"]["sk"]["bottleneck"] == 16


def test_rounds_of_before_the_new_settings_are_still_reused():
    old = {"teacher": "a", "settings": {"keep_fraction": 0.8, "rounds": 1}}
    assert same_round(old, {**old, "settings": {"keep_fraction": 0.8, "teacher": "own", "average_top_n": None,
                                                 "confidence": "max_prob/min", "rounds": 3}})
    assert not same_round(old, {**old, "settings": {"keep_fraction": 0.8, "teacher": "fusion"}})


@pytest.mark.parametrize(("override", "message"), [
    ("self_training.teacher=adapter", "self_training.teacher: expected one of own, fusion, got 'adapter'"),
    ("self_training.keep_fraction_schedule=[0.8, 0.6]", "self_training.keep_fraction_schedule: expected a non-empty "
                                                         "rising list of numbers in (0, 1] or null"),
    ("self_training.confidence=margin/min", "self_training.confidence: expected a confidence method"),
    ("self_training.average_top_n=1", "self_training.average_top_n: expected an integer >= 2 or null, got 1"),
    ("self_training.max_lm_disagreement=0", "self_training.max_lm_disagreement: expected a number in (0, 1]"),
    ("self_training.adapter_bottleneck=0", "self_training.adapter_bottleneck: expected a positive integer or null"),
    ("self_training.adapter_lora=0", "self_training.adapter_lora: expected a positive integer or null, got 0"),
    ("self_training.adapter_lora=4.5", "self_training.adapter_lora: expected a positive integer or null, got 4.5"),
])
def test_bad_settings_are_one_line_at_load(tmp_path, override, message):
    with pytest.raises(RecipeError, match=None) as err:
        load_recipe(DEMO, [f"output_dir={tmp_path}", override])
    assert message in str(err.value) and "\n" not in str(err.value)


@pytest.mark.parametrize("override", ["self_training.max_lm_disagreement=0.1",
                                      "self_training.fit_nbest_temperature=true"])
def test_lm_settings_without_the_lm_are_refused(tmp_path, override):
    with pytest.raises(RecipeError, match="needs use_lm: true"):
        load_recipe(DEMO, [f"output_dir={tmp_path}", "self_training.use_lm=false", override])
    with pytest.raises(RecipeError, match="min_confidence or keep_fraction_schedule"):
        load_recipe(DEMO, [f"output_dir={tmp_path}", "self_training.keep_fraction=null",
                           "self_training.min_confidence=0.5", "self_training.keep_fraction_schedule=[0.5]"])
