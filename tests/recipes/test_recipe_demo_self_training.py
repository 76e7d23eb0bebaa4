"""The demo's ``self_training`` section at toy scale (a tiny base, 3 steps a stage, a pool of 8 unlabelled clips):
the rounds label the pool with the teacher, keep the confident labels, train a student with speed perturbation on
the labelled and pseudo-labelled rows and stop when dev CER stops improving; the table gains ``<system> +
self-training`` with the paired bootstrap against the same system without it; ``only=["self_training"]`` reuses the
finished rounds and trains nothing; the pool shares no clip or sentence with dev / test and what its clips say is read
only to score the labels."""

from __future__ import annotations

import itertools
import json
import shutil
from pathlib import Path

import pytest
import torch
from helpers.files import folder_bytes
from helpers.recipes import DEMO, ST_POOL_CLIPS, self_training_overrides
from safetensors.torch import load_file

from adaptspeech.recipes import RecipeError, load_recipe, recipe_module, run_recipe
from adaptspeech.recipes.simadapter.self_training import CONFIDENCE_BINS, same_round, student_spec
from adaptspeech.recipes.simadapter.self_training_rows import VS_NO_SELF_TRAINING_COLUMN
from adaptspeech.recipes.simadapter.self_training_settings import SelfTrainingSettings

ADAPTER = "target adapter alone"
SELF_TRAINED = f"{ADAPTER} + self-training"
POOL_CLIPS = ST_POOL_CLIPS
_overrides = self_training_overrides


@pytest.fixture(scope="module")
def st_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("demo_self_training")
    return out, run_recipe(load_recipe(DEMO, _overrides(out)))


def test_rounds_label_filter_train_and_stop_on_dev_cer(st_run):
    out, result = st_run
    summary = result["self_training"]
    entry = summary["systems"][ADAPTER]
    rounds = entry["rounds"]
    assert 1 <= len(rounds) <= 2 and [r["round"] for r in rounds] == list(range(1, len(rounds) + 1))
    teacher_dev = entry["teacher_dev_cer"]
    best = teacher_dev
    for r in rounds[:-1]:  # every round but the last improved on the best dev CER so far; the last may not have
        assert r["improved"] and r["dev_cer"] < best
        best = r["dev_cer"]
    if len(rounds) < 2:
        assert not rounds[-1]["improved"]
    chosen = entry["chosen_round"]
    dev = [teacher_dev] + [r["dev_cer"] for r in rounds]
    assert dev[chosen] == min(dev[: len(rounds) + 1])
    labels = rounds[0]["labels"]
    assert labels["rows"] == POOL_CLIPS and labels["kept"] == 6  # keep_fraction 0.75 of 8
    quality = labels["quality"]  # against what the clips say (synthetic pool), never read by training
    assert [(b["low"], b["high"]) for b in quality["bins"]] == list(itertools.pairwise(CONFIDENCE_BINS))
    assert sum(b["count"] for b in quality["bins"]) == POOL_CLIPS and quality["cer_all"] >= 0
    student = json.loads((out / "self_training" / "target_adapter" / "round_1" / "student" / "stage_spec.json")
                         .read_text())
    assert student["data"]["speed_perturb"] == [0.9, 1.0, 1.1] and student["data"]["pseudo_labelled_share"] == 0.5
    assert student["training"]["max_steps"] == 6  # steps_scale 2 x the stage's 3
    assert student["model"]["path"] == json.loads((out / "target_adapter" / "stage_spec.json").read_text())[
        "model"]["path"]  # the student starts where the system's stage started, not from the teacher
    for r in rounds:  # each round records what its student trained
        trained = json.loads((out / "self_training" / "target_adapter" / f"round_{r['round']}" / "student" /
                              "stage_summary.json").read_text())["trainable"]
        assert r["trainable_params"] == trained["trainable"] > 0
        assert r["trainable_share"] == pytest.approx(trained["trainable_share"])


def test_the_table_gains_the_self_trained_row_with_its_bootstrap(st_run):
    out, result = st_run
    rows = {row["system"]: row for row in result["rows"]}
    assert SELF_TRAINED in rows
    versus = result["self_training"]["significance_vs_no_self_training"][SELF_TRAINED]
    assert versus["cer_delta"] == pytest.approx(rows[SELF_TRAINED]["cer"] - rows[ADAPTER]["cer"])
    assert versus["ci_low"] <= versus["cer_delta"] <= versus["ci_high"]
    assert rows[SELF_TRAINED][VS_NO_SELF_TRAINING_COLUMN].startswith(f"{100 * versus['cer_delta']:+.2f}")
    md = (out / "results.md").read_text()
    assert "Self-training on" in md and "pseudo-label CER" in md
    entry = result["self_training"]["systems"][ADAPTER]
    # the row counts the parameters its chosen student trained (the adapter's own when no round was chosen)
    chosen = entry["rounds"][entry["chosen_round"] - 1] if entry["chosen_round"] else None
    assert rows[SELF_TRAINED]["trainable_params"] == (chosen["trainable_params"] if chosen else
                                                      rows[ADAPTER]["trainable_params"])
    first = entry["rounds"][0]
    assert f"| {100 * first['dev_cer']:.2f} | {100 * first['test_cer']:.2f} | {first['trainable_params']:,} |" in md
    with_lm = rows[f"{SELF_TRAINED} + 2-gram LM"]  # compared with the adapter + LM, its own bootstrap
    versus = result["self_training"]["significance_vs_no_self_training"][with_lm["system"]]
    assert versus["cer_delta"] == pytest.approx(with_lm["cer"] - rows[f"{ADAPTER} + 2-gram LM"]["cer"])
    # the LM row's own comparison (the adapter + LM against the adapter) is not copied onto this row
    lm_column = recipe_module(DEMO, "lm_rows.py").VS_NO_LM_COLUMN
    assert lm_column in rows[f"{ADAPTER} + 2-gram LM"] and lm_column not in with_lm
    saved = json.loads((out / "results.json").read_text())
    assert saved["self_training"]["systems"][ADAPTER]["chosen_round"] == result["self_training"]["systems"][
        ADAPTER]["chosen_round"]


def test_the_pool_holds_no_dev_or_test_clip_or_sentence(st_run):
    from datasets import load_from_disk

    from adaptspeech.data.pools import load_pool

    out, _ = st_run
    pool, _ = load_pool(out / "self_training" / "pool")
    assert len(pool) == POOL_CLIPS and set(pool["sentence"]) == {""}  # no transcript travels with the pool
    dataset = load_from_disk(str(out / "prepared" / "dataset"))
    held_paths = {Path(p).name for split in ("dev", "test") for p in dataset[split]["path"]}
    assert not held_paths & {Path(p).name for p in pool["path"]}
    said = (out / "corpus" / "sk" / "unlabelled_sentences.tsv").read_text(encoding="utf-8").splitlines()[1:]
    held_text = {t for split in ("dev", "test") for t in dataset[split]["text"]}
    assert len(said) == POOL_CLIPS and not held_text & {line.split("\t")[1].lower() for line in said}


def test_only_self_training_reuses_the_rounds_and_trains_nothing(st_run, tmp_path):
    source, first = st_run
    out = tmp_path / "copy"
    shutil.copytree(source, out)
    models = {p: p.stat().st_mtime_ns for p in out.rglob("model.safetensors")}
    # the section off (--only turns it on) and one round at most: the finished round 1 is the same round
    again = run_recipe(load_recipe(DEMO, _overrides(out, "self_training.enabled=false", "self_training.rounds=1")),
                       only=["self_training"])
    assert {p: p.stat().st_mtime_ns for p in out.rglob("model.safetensors")} == models
    assert again["self_training"]["systems"][ADAPTER]["rounds"][0] == first["self_training"]["systems"][ADAPTER][
        "rounds"][0]
    if first["self_training"]["systems"][ADAPTER]["chosen_round"] <= 1:  # the same model chosen: the same row
        rows = {row["system"]: row for row in again["rows"]}
        assert rows[SELF_TRAINED]["cer"] == {row["system"]: row for row in first["rows"]}[SELF_TRAINED]["cer"]
    changed = _overrides(out, "self_training.keep_fraction=0.5")  # another filter: another round
    key = json.loads((out / "self_training" / "target_adapter" / "round_1" / "round.json").read_text())["key"]
    settings = {name: json.loads(json.dumps(load_recipe(DEMO, overrides).self_training.resolved(True).to_dict()))
                for name, overrides in (("same", _overrides(out)), ("changed", changed))}  # with the demo's LM
    assert same_round(key, {**key, "settings": settings["same"]})
    assert not same_round(key, {**key, "settings": settings["changed"]})
    assert same_round(key, {**key, "settings": {**key["settings"], "rounds": 7, "systems": ["fusion"]}})


def test_settings_are_checked_at_load(tmp_path):
    with pytest.raises(RecipeError, match="min_confidence or keep_fraction"):
        SelfTrainingSettings(min_confidence=0.9, keep_fraction=0.5)
    with pytest.raises(RecipeError, match=r"self_training\.systems"):
        load_recipe(DEMO, [f"output_dir={tmp_path}", "self_training.systems=[scratch]"])
    with pytest.raises(RecipeError, match=r"self_training\.speed_perturb"):
        load_recipe(DEMO, [f"output_dir={tmp_path}", "self_training.speed_perturb=[0]"])


def test_student_spec_without_speed_perturbation(st_run, tmp_path):
    from adaptspeech.recipes import load_recipe as load

    out, _ = st_run
    spec = load(DEMO, _overrides(out, "self_training.speed_perturb=null", "self_training.steps_scale=1"))
    student = student_spec(spec, spec.self_training, "target_adapter", out / "prepared", tmp_path / "labels",
                           tmp_path / "student")
    assert "speed_perturb" not in student["data"] and student["training"]["max_steps"] == 3
    assert student["data"]["pseudo_labelled_dir"] == str(tmp_path / "labels")


def test_the_library_protocol_takes_the_section(tmp_path):
    """The section belongs to the SimAdapter protocol: the Common Voice recipe (task ``simadapter``) takes it, with a
    pool folder of its own, and ``--only self_training`` is one of its steps."""
    from adaptspeech.recipes.engine import recipe_task

    spec = load_recipe("recipes/common_voice", [f"output_dir={tmp_path}", "self_training.enabled=true",
                                                f"self_training.pool={tmp_path / 'pool'}",
                                                "self_training.systems=[target_adapter, finetune]"])
    assert spec.self_training.pool == str(tmp_path / "pool")
    assert spec.self_training.systems == ("target_adapter", "finetune")
    assert recipe_task(spec).step_names(spec)[-1] == "self_training"
    assert load_recipe("recipes/common_voice", [f"output_dir={tmp_path}"]).self_training.enabled is False


def test_a_rerun_continues_an_interrupted_student_from_its_checkpoint(st_run, tmp_path, capfd):
    """Before: a student saved no checkpoint and a rerun trained an interrupted round's student afresh. Now the
    student keeps its last checkpoint and a rerun with the same settings continues from it (the recipe stages' rule).
    Interrupted after its final checkpoint-6 (max_steps 6): before, the rerun trained a step 7 and saved checkpoint-7
    in place of checkpoint-6; now it trains no step, the student is checkpoint-6's weights (the first run's student)
    and checkpoint-6 stays as it was."""
    source, _ = st_run
    out = tmp_path / "copy"
    shutil.copytree(source, out)
    round_dir = out / "self_training" / "target_adapter" / "round_1"
    student = round_dir / "student"
    checkpoints = sorted((student / "checkpoints").glob("checkpoint-*"))
    assert [c.name for c in checkpoints] == ["checkpoint-6"]  # 6 steps, the last checkpoint kept
    for record in student.rglob("stage_spec.json"):  # the copy's own folders, as if it had run there
        record.write_text(record.read_text().replace(str(source), str(out)))
    for path in (round_dir / "round.json", student / "stage_summary.json"):  # interrupted: no record, no summary
        path.unlink()
    first = load_file(student / "model" / "model.safetensors")
    shutil.rmtree(student / "model")
    kept = folder_bytes(student / "checkpoints")
    assert json.loads((checkpoints[0] / "trainer_state.json").read_text())["global_step"] == 6
    capfd.readouterr()
    again = run_recipe(load_recipe(DEMO, _overrides(out, "self_training.rounds=1")), only=["self_training"])
    printed = capfd.readouterr()
    printed = printed.out + printed.err
    assert "self-training target_adapter round 1: continuing the interrupted student from checkpoint-6 (same " \
           "settings)" in printed and "trained afresh" not in printed and "removed the earlier run" not in printed
    assert (student / "stage_summary.json").is_file() and (round_dir / "round.json").is_file()
    assert json.loads((round_dir / "round.json").read_text())["record"]["student"] == str(student / "model")
    assert again["self_training"]["systems"][ADAPTER]["rounds"][0]["round"] == 1
    assert json.loads((student / "log_history.json").read_text())[-1]["step"] == 6
    assert folder_bytes(student / "checkpoints") == kept  # checkpoint-6 only, unchanged: no step 7
    student_model = load_file(student / "model" / "model.safetensors")
    assert set(student_model) == set(first) and all(torch.equal(student_model[k], first[k]) for k in first)
    assert "checkpoint-6 is at step 6 of max_steps 6: nothing left to train" in printed
