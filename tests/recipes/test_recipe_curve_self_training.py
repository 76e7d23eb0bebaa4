"""The transfer curve's self-training arm (recipes/synthetic_demo/curve/self_training_arm.py) at toy scale: the demo's
own run at its target_subset (base, source adapters, target adapter, its self-training rounds on a pool of 8 clips
with a 2-gram LM), then ``--curve`` with full fine-tuning, the adapter and the arm at two nested budgets: at the
smaller budget the curve's adapter teaches new rounds, at the recipe's own budget the demo's finished rounds are
reused; the table, the JSON, the plot and the overtaking statement; a second call trains and labels nothing; bad arm
settings are refused at load with one line."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from helpers.recipes import DEMO, TINY, few_steps

from adaptspeech.cli import main as cli_main
from adaptspeech.data.prepared_data import load_prepared
from adaptspeech.recipes import load_recipe, recipe_module
from adaptspeech.recipes.simadapter.self_training import SelfTrainingRunner
from adaptspeech.recipes.simadapter.self_training_pool import ensure_pool
from adaptspeech.recipes.simadapter.stages import prepare_data, recipe_plan, train_recipe_stage

report = recipe_module(DEMO, "curve/report.py")
settings_module = recipe_module(DEMO, "curve/settings.py")
runner_module = recipe_module(DEMO, "curve/runner.py")
arm_module = recipe_module(DEMO, "curve/self_training_arm.py")
CurveError, load_curve_settings = settings_module.CurveError, settings_module.load_curve_settings

BUDGETS = ["0.15min", "0.3min"]  # the recipe's target_subset is the larger one
METHODS = ["finetune", "adapter", "self_training"]
POOL_CLIPS = 8
ARM = "target adapter alone + self-training"
CURVE_SETTINGS = [
    "curve.steps={power: 0.5, min: 2, max: 3}",
    "curve.grid.finetune.learning_rate=[0.0005]",
    "curve.grid.adapter.learning_rate=[0.005]",
    "curve.bootstrap_samples=200",
]


def _overrides(out: Path) -> list[str]:
    """The toy demo: one source, 3 steps a stage, a 2-gram LM of 300 sentences; self-training of the adapter alone,
    at most 2 rounds, the 75% most confident of 8 pool clips, students of 2 x their run's steps."""
    return [
        f"output_dir={out}", "progress=false", "threads=1", "sources=[cs]", "target=sk", "target_subset=0.3min",
        "baselines={finetune: stage_finetune.yaml}", "corpus.clips_per_language=20",
        f"base.model.config={json.dumps(TINY)}", "evaluation.method=ctc_greedy", "evaluation.options={}",
        "source_adapters.model.add_adapters={cs: {bottleneck: 8}}", "source_adapters.model.active_languages=[cs]",
        "source_adapters.model.trainable={adapters: [cs]}", "target_adapter.model.add_adapters={sk: {bottleneck: 8}}",
        "lm.enabled=true", "lm.sentences=300", "lm.order=2", "lm.alphas=[0, 1]", "lm.betas=[0]", "lm.beam_size=8",
        "lm.systems=[target_adapter]", "self_training.enabled=true", f"self_training.pool_clips={POOL_CLIPS}",
        "self_training.rounds=2", "self_training.systems=[target_adapter]", "self_training.keep_fraction=0.75",
        "self_training.beam_size=8", *few_steps(("base", "source_adapters", "target_adapter", "fusion", "finetune")),
    ]


def _curve_argv(out: Path, *extra: str) -> list[str]:
    return ["recipe", "recipes/synthetic_demo", "--curve", ",".join(BUDGETS), "--curve-methods", ",".join(METHODS),
            *_overrides(out), *CURVE_SETTINGS, *extra]


@pytest.fixture(scope="module")
def arm_curve(tmp_path_factory):
    """The demo's stages and its self-training rounds of the target adapter (what ``adaptspeech demo --only
    ...,self_training`` leaves in output_dir), then the curve with the arm."""
    out = tmp_path_factory.mktemp("curve_arm")
    recipe = load_recipe(DEMO, _overrides(out))
    prepared = prepare_data(recipe)
    for stage in recipe_plan(recipe):
        if stage.name in ("base", "source_adapters", "target_adapter"):
            train_recipe_stage(recipe, stage, prepared, progress=False)
    dataset, _ = load_prepared(prepared)
    pool = ensure_pool(recipe, recipe.self_training, prepared)
    lm = arm_module.recipe_lm(recipe, dataset)
    demo_run = SelfTrainingRunner(recipe, recipe.self_training, prepared, pool, lm).run_system("target_adapter")
    assert cli_main(_curve_argv(out)) == 0
    return out, demo_run, json.loads((out / "curve" / "curve_results.json").read_text())


def test_the_arm_is_a_point_at_every_budget(arm_curve):
    _, _, result = arm_curve
    rows = result["rows"]
    assert [(r["budget"], r["method"]) for r in rows] == [(b, m) for b in BUDGETS for m in METHODS]
    for row in (r for r in rows if r["method"] == "self_training"):
        assert row["system"] == ARM and math.isfinite(row["cer"]) and row["cer_low"] <= row["cer"] <= row["cer_high"]
        st = row["self_training"]
        assert 1 <= len(st["rounds"]) <= 2 and st["rounds"][0]["rows"] == POOL_CLIPS and st["rounds"][0]["kept"] == 6
        dev = [st["teacher_dev_cer"]] + [r["dev_cer"] for r in st["rounds"]]
        assert row["dev_cer"] == dev[st["chosen_round"]] == min(dev)  # the round with the lowest dev CER
        assert st["settings"]["steps_scale"] == 2.0 and st["settings"]["keep_fraction"] == 0.75  # the recipe's
    assert result["self_training_arm"]["label"] == ARM and result["self_training_arm"]["pool_minutes"] > 0


def test_the_smaller_budget_self_trains_the_curve_adapter_chosen_on_dev(arm_curve):
    _, _, result = arm_curve
    by_key = {(r["budget"], r["method"]): r for r in result["rows"]}
    arm, adapter = by_key[("0.15min", "self_training")], by_key[("0.15min", "adapter")]
    st = arm["self_training"]
    assert st["teacher_setting"] == adapter["setting"] == "lr0.005" and st["teacher_cer"] == adapter["cer"]
    assert st["teacher_dev_cer"] == adapter["dev_cer"] and st["trained_rounds"] == len(st["rounds"])
    assert st["teacher"] == str(Path(adapter["run"]) / "model")
    student = json.loads((Path(st["rounds"][0]["student"]).parent / "stage_spec.json").read_text())
    taught = json.loads((Path(adapter["run"]) / "stage_spec.json").read_text())
    # trained as the curve trained its teacher (the budget's rows, the chosen learning rate, its start), with the
    # pseudo-labels, speed perturbation and 2 x its steps
    assert student["data"]["train_subset"] == "0.15min" and student["model"]["path"] == taught["model"]["path"]
    assert student["training"]["learning_rate"] == 0.005 and student["training"]["max_steps"] == 2 * adapter["steps"]
    assert arm["steps"] == 2 * adapter["steps"] and student["data"]["speed_perturb"] == [0.9, 1.0, 1.1]
    assert Path(student["data"]["pseudo_labelled_dir"]).parts[-6:-2] == ("0.15min", "self_training",
                                                                         "target_adapter", "lr0.005")


def test_the_recipe_budget_reuses_the_demo_rounds(arm_curve):
    out, demo_run, result = arm_curve
    arm = {r["budget"]: r for r in result["rows"] if r["method"] == "self_training"}["0.3min"]
    st = arm["self_training"]
    assert st["teacher_setting"] == "recipe" and st["teacher"] == str(out / "target_adapter" / "model")
    assert st["trained_rounds"] == 0 and st["reused_rounds"] == len(demo_run.rounds)
    assert [r["dev_cer"] for r in st["rounds"]] == [r.dev_cer for r in demo_run.rounds]
    assert [r["student"] for r in st["rounds"]] == [r.student for r in demo_run.rounds]
    assert st["chosen_round"] == demo_run.chosen and arm["run"] == str(demo_run.model_dir)
    assert st["teacher_dev_cer"] == demo_run.teacher_dev_cer and st["teacher_cer"] >= 0
    assert not (out / "curve" / "0.3min" / "self_training" / "target_adapter" / "recipe" / "round_1").exists()


def test_the_recipe_teacher_only_where_it_trained_on_the_budget_rows(arm_curve):
    import dataclasses

    out, _, result = arm_curve
    recipe = load_recipe(DEMO, _overrides(out))
    dataset, _ = load_prepared(out / "prepared")
    settings = load_curve_settings(DEMO, [c.removeprefix("curve.") for c in CURVE_SETTINGS], BUDGETS, METHODS)
    arm = arm_module.SelfTrainingArm(recipe, settings, out / "prepared", dataset)  # the pool and the LM reused
    budgets = {b["name"]: runner_module.Budget(**b) for b in result["budgets"]}
    assert arm.recipe_teacher(budgets["0.3min"]) == out / "target_adapter" / "model"
    assert arm.recipe_teacher(budgets["0.15min"]) is None  # not the recipe's target_subset
    other_rows = dataclasses.replace(budgets["0.3min"], clips=budgets["0.3min"].clips + 1)
    assert arm.recipe_teacher(other_rows) is None
    arm.reuse_recipe = False  # curve.self_training.reuse_recipe_rounds=false
    assert arm.recipe_teacher(budgets["0.3min"]) is None


def test_minus_full_fine_tuning_and_where_it_overtakes(arm_curve):
    out, _, result = arm_curve
    by_key = {(r["budget"], r["method"]): r for r in result["rows"]}
    versus = [c for c in result["adapters_vs_finetune"] if c["method"] == "self_training"]
    assert [c["budget"] for c in versus] == BUDGETS and all(c["system"] == ARM for c in versus)
    for c in versus:
        assert c["cer_delta"] == pytest.approx(by_key[(c["budget"], "self_training")]["cer"]
                                               - by_key[(c["budget"], "finetune")]["cer"])
    below = [c["cer_delta"] < 0 for c in versus]
    expected = next((BUDGETS[i] for i in range(len(BUDGETS)) if all(below[i:])), None)
    overtaking = result["self_training_vs_finetune"]
    assert overtaking["overtakes_at"] == expected and overtaking["below_at_every_budget"] == all(below)
    md = (out / "curve" / "curve_results.md").read_text()
    assert f"### Self-training arm: {ARM}" in md and overtaking["statement"] in md
    assert "| 0.3min | the recipe's system |" in md and "| 0.15min | curve run lr0.005 |" in md
    png = (out / "curve" / "transfer_curve.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 5000


def test_a_second_call_trains_and_labels_nothing(arm_curve, monkeypatch):
    import adaptspeech.evaluation
    import adaptspeech.inference.pseudo_labels.labelling
    import adaptspeech.training.stage

    out, _, first = arm_curve

    def refuse(*args, **kwargs):
        raise AssertionError("a finished run or round was trained, labelled or evaluated again")

    monkeypatch.setattr(runner_module, "run_stage", refuse)
    monkeypatch.setattr(adaptspeech.training.stage, "run_stage", refuse)
    monkeypatch.setattr(adaptspeech.inference.pseudo_labels.labelling, "pseudo_label", refuse)
    monkeypatch.setattr(adaptspeech.evaluation, "evaluate_dataset", refuse)
    assert cli_main(_curve_argv(out)) == 0
    again = json.loads((out / "curve" / "curve_results.json").read_text())
    assert [(r["method"], r["cer"]) for r in again["rows"]] == [(r["method"], r["cer"]) for r in first["rows"]]
    arms = [r["self_training"] for r in again["rows"] if r["method"] == "self_training"]
    assert [a["trained_rounds"] for a in arms] == [0, 0]
    assert [a["reused_rounds"] for a in arms] == [len(a["rounds"]) for a in arms]


def test_plan_lists_the_arm_rounds(arm_curve, capsys):
    out, _, result = arm_curve
    assert cli_main([*_curve_argv(out), "--curve-plan"]) == 0
    plan = capsys.readouterr().out
    adapter_steps = {r["budget"]: r["steps"] for r in result["rows"] if r["method"] == "adapter"}
    assert f"| 0.15min | {result['budgets'][0]['minutes']:.2f} ({result['budgets'][0]['clips']}) | self-training " \
           f"| 1 | {2 * 2 * adapter_steps['0.15min']} |" in plan  # at most 2 rounds of 2 x the adapter's steps


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"methods": ["self_training"]}, r"curve.methods: self_training self-trains .*; add adapter"),
        ({"methods": ["finetune", "self_training"], "self_training": {"system": "fusion"}}, "add simadapter"),
        ({"self_training": {"system": "scratch"}}, r"curve.self_training.system: 'scratch'"),
        ({"self_training": {"budgets": ["30min"]}}, r"curve.self_training.budgets: .*\(1min, 3min\)"),
        ({"self_training": {"rounds": 0}}, "curve.self_training.rounds: expected null or an integer >= 1"),
        ({"self_training": {"steps_scale": -1}}, "curve.self_training.steps_scale"),
        ({"self_training": {"reuse_recipe_rounds": "yes"}}, "curve.self_training.reuse_recipe_rounds"),
        ({"self_training": {"share": 0.5}}, r"curve.self_training: unknown setting\(s\) share; allowed settings: "
                                            r"system, budgets"),
    ],
)
def test_bad_arm_settings_are_refused(values, message):
    with pytest.raises(CurveError, match=message):
        settings_module.CurveSettings(budgets=["1min", "3min"], **values)


def test_bad_arm_setting_on_the_command_line_is_one_line(capsys):
    assert cli_main(["recipe", "recipes/synthetic_demo", "--curve", "1min", "curve.self_training.rounds=0"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "curve.self_training.rounds: expected null or an integer >= 1, got 0" in err[0]
    settings = load_curve_settings("recipes/synthetic_demo", ["self_training.system=finetune"], ["1min"])
    assert settings.self_training["system"] == "finetune" and settings.self_training["rounds"] is None
    assert "self_training" not in settings.methods  # the arm runs only when named


def test_overtaking_statements():
    overtaking = report.self_training_overtaking

    def entry(budget, minutes, delta, low, high):
        return {"method": "self_training", "system": ARM, "budget": budget, "minutes": minutes, "cer_delta": delta,
                "ci_low": low, "ci_high": high}

    above_then_below = [entry("1min", 1.0, 0.01, -0.01, 0.03), entry("3min", 3.0, -0.004, -0.01, 0.002),
                        entry("10min", 10.0, -0.02, -0.03, -0.005)]
    result = overtaking(above_then_below, ["1min", "3min", "10min"])
    assert result["overtakes_at"] == "3min" and result["overtakes_at_minutes"] == 3.0
    assert "overtakes full fine-tuning at 3min" in result["statement"] and result["significant_at"] == ["10min"]
    result = overtaking(above_then_below[::-1], ["1min", "3min", "10min"])  # budgets in any order
    assert result["overtakes_at"] == "3min"
    below = [entry("1min", 1.0, -0.01, -0.02, 0.01), entry("3min", 3.0, -0.01, -0.02, 0.01)]
    result = overtaking(below, ["1min", "3min"])
    assert result["below_at_every_budget"] and result["overtakes_at"] == "1min"
    assert "No difference has a paired 95% interval that excludes 0" in result["statement"]
    ends_above = [entry("1min", 1.0, -0.01, -0.02, 0.01), entry("3min", 3.0, 0.01, 0.0001, 0.02)]
    result = overtaking(ends_above, ["1min", "3min"])
    assert result["overtakes_at"] is None and "does not overtake" in result["statement"]
    assert "below it only at 1min" in result["statement"]
    assert overtaking([], []) is None
    assert overtaking([], ["1min"])["overtakes_at"] is None  # no full fine-tuning on the curve


def test_the_plot_draws_the_arm_and_where_it_overtakes(tmp_path, monkeypatch):
    figures = []
    save = report.save_figure

    def keep(fig, path):
        figures.append(fig)
        return save(fig, path)

    monkeypatch.setattr(report, "save_figure", keep)
    rows = [{"budget": b, "minutes": m, "method": method, "system": label, "cer": cer, "cer_low": cer - 0.01,
             "cer_high": cer + 0.01}
            for b, m in (("1min", 1.0), ("3min", 3.0))
            for method, label, cer in (("finetune", "full fine-tuning", 0.2 if m < 2 else 0.15),
                                       ("self_training", ARM, 0.22 if m < 2 else 0.14))]
    report.plot_transfer_curve(rows, tmp_path / "curve.png", "toy",
                               {"overtakes_at": "3min", "overtakes_at_minutes": 3.0})
    assert (tmp_path / "curve.png").is_file()
    lines = {line.get_label(): line for line in figures[0].axes[0].get_lines()}
    assert lines[ARM].get_marker() == "*" and lines[ARM].get_linestyle() == ":"
    assert list(lines[ARM].get_xdata()) == [1.0, 3.0] and list(lines[ARM].get_ydata()) == pytest.approx([22.0, 14.0])
    assert list(lines["self-training below full fine-tuning from 3min"].get_xdata()) == [3.0, 3.0]
