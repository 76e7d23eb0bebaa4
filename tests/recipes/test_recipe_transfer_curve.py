"""The synthetic demo's transfer curve (recipes/synthetic_demo/curve/) at toy scale: every method at two nested budgets
of a tiny synthetic corpus, settings chosen on dev, the table / JSON / plot written, SimAdapter against the adapter
alone with a paired bootstrap, and a second call that retrains nothing; plus the step rule, the settings checks and the
bootstrap interval against a reference."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from helpers.recipes import DEMO, TINY, few_steps

from adaptspeech.cli import main as cli_main
from adaptspeech.data.prepared_data import load_prepared, select_languages
from adaptspeech.data.subsets import nested_subsets, speakers
from adaptspeech.recipes import load_recipe, recipe_module

report = recipe_module(DEMO, "curve/report.py")
settings_module = recipe_module(DEMO, "curve/settings.py")
runner_module = recipe_module(DEMO, "curve/runner.py")
METHOD_LABELS, cer_interval = report.METHOD_LABELS, report.cer_interval
CurveError, CurveSettings = settings_module.CurveError, settings_module.CurveSettings
grid_points, load_curve_settings = settings_module.grid_points, settings_module.load_curve_settings
scaled_steps, setting_tag = settings_module.scaled_steps, settings_module.setting_tag
run_curve = runner_module.run_curve

BUDGETS = ["0.15min", "0.3min"]
CURVE_SETTINGS = [
    "curve.steps={power: 0.5, min: 2, max: 3}",
    "curve.grid.scratch.learning_rate=[0.002]",
    "curve.grid.finetune.learning_rate=[0.0005]",
    "curve.grid.adapter.learning_rate=[0.005, 0.05]",  # two points: the one with the lower dev CER is chosen
    "curve.grid.simadapter.learning_rate=[0.001]",
    "curve.bootstrap_samples=200",
]


def _recipe_overrides(out) -> list[str]:
    overrides = [
        f"output_dir={out}",
        "progress=false",
        "threads=1",
        "sources=[cs, pl]",
        "target=sk",
        "target_subset=0.3min",
        "corpus.clips_per_language=20",
        f"base.model.config={json.dumps(TINY)}",
        f"scratch.model.config={json.dumps(TINY)}",
        "evaluation.method=ctc_greedy",
        "evaluation.options={}",
        # the stage files name the demo's five sources: the curve follows sources= / target= (retarget_stages)
        "source_adapters.model.add_adapters={cs: {bottleneck: 8}}",
        "target_adapter.model.add_adapters={sk: {bottleneck: 8}}",
    ]
    return overrides + few_steps()


@pytest.fixture(scope="module")
def curve(tmp_path_factory):
    out = tmp_path_factory.mktemp("curve")
    argv = ["recipe", "recipes/synthetic_demo", "--curve", ",".join(BUDGETS), *_recipe_overrides(out), *CURVE_SETTINGS]
    assert cli_main(argv) == 0
    return out, json.loads((out / "curve" / "curve_results.json").read_text())


def test_budgets_are_nested_and_leave_out_the_test_speakers(curve):
    out, result = curve
    budgets = result["budgets"]
    assert [b["name"] for b in budgets] == BUDGETS
    assert 0 < budgets[0]["clips"] < budgets[1]["clips"]
    assert budgets[1]["minutes"] <= 0.3
    dataset, _ = load_prepared(out / "prepared")
    train = select_languages(dataset["train"], ["sk"], "train", "test")
    subsets = nested_subsets(train, BUDGETS, seed=0, exclude_speakers=speakers(dataset["test"]))
    assert set(subsets["0.15min"]["path"]) < set(subsets["0.3min"]["path"])
    assert not speakers(subsets["0.3min"]) & speakers(dataset["test"])
    # every run trained on its budget's nested subset (the runner also checks this)
    for run in result["grid_runs"]:
        summary = json.loads((out / run["folder"] / "stage_summary.json").read_text())
        assert summary["train_rows"] == len(subsets[run["budget"]])


def test_every_method_at_every_budget_with_an_interval(curve):
    _, result = curve
    rows = result["rows"]
    methods = [m for m in METHOD_LABELS if m != "self_training"]  # the arm runs only when named
    assert [(r["budget"], r["method"]) for r in rows] == [(b, m) for b in BUDGETS for m in methods]
    for row in rows:
        assert math.isfinite(row["cer"]) and math.isfinite(row["wer"])
        assert row["cer_low"] <= row["cer"] <= row["cer_high"]
    zero = [r for r in rows if r["method"] == "zero_shot"]
    assert zero[0]["cer"] == zero[1]["cer"] and zero[0]["trainable_params"] == 0  # one model, drawn at each budget
    by_key = {(r["budget"], r["method"]): r for r in rows}
    for budget in BUDGETS:
        adapter_runs = [g for g in result["grid_runs"] if g["budget"] == budget and g["method"] == "adapter"]
        assert len(adapter_runs) == 2
        chosen = [g for g in adapter_runs if g["chosen"]]
        assert len(chosen) == 1 and chosen[0]["dev_cer"] == min(g["dev_cer"] for g in adapter_runs)
        assert by_key[(budget, "adapter")]["setting"] == chosen[0]["setting"]
        # SimAdapter fuses that adapter and counts its parameters and time
        sim, alone = by_key[(budget, "simadapter")], by_key[(budget, "adapter")]
        assert sim["run"].split("/")[-1].startswith(chosen[0]["setting"] + "+")
        assert sim["trainable_params"] > alone["trainable_params"] > 0
        assert sim["train_seconds"] > alone["train_seconds"]


def test_simadapter_minus_adapter_and_fusion_weights(curve):
    _, result = curve
    by_key = {(r["budget"], r["method"]): r for r in result["rows"]}
    comparisons = result["simadapter_vs_adapter"]
    assert [c["budget"] for c in comparisons] == BUDGETS
    for c in comparisons:
        delta = by_key[(c["budget"], "simadapter")]["cer"] - by_key[(c["budget"], "adapter")]["cer"]
        assert c["cer_delta"] == pytest.approx(delta)
        assert c["ci_low"] <= c["cer_delta"] <= c["ci_high"] and 0 <= c["p_not_better"] <= 1
        weights = c["fusion_weights"]
        assert list(weights["mean"]) == ["cs", "pl", "sk"]
        assert sum(weights["mean"].values()) == pytest.approx(1.0, abs=1e-3)
        assert sum(weights["over_sources"].values()) == pytest.approx(1.0)


def test_adapters_minus_full_fine_tuning_per_budget(curve):
    out, result = curve
    by_key = {(r["budget"], r["method"]): r for r in result["rows"]}
    versus = result["adapters_vs_finetune"]
    assert [(c["budget"], c["method"]) for c in versus] == [(b, m) for b in BUDGETS for m in ("adapter", "simadapter")]
    for c in versus:
        delta = by_key[(c["budget"], c["method"])]["cer"] - by_key[(c["budget"], "finetune")]["cer"]
        assert c["cer_delta"] == pytest.approx(delta)
        assert c["ci_low"] <= c["cer_delta"] <= c["ci_high"] and 0 <= c["p_not_better"] <= 1
    md = (out / "curve" / "curve_results.md").read_text()
    first = versus[0]
    assert "Adapters minus full fine-tuning" in md
    row = f"| {first['budget']} | {first['minutes']:.2f} | target adapter alone | {100 * first['cer_delta']:+.2f} "
    assert row in md


def test_table_and_plot_are_written(curve):
    out, result = curve
    folder = out / "curve"
    md = (folder / "curve_results.md").read_text()
    assert "SimAdapter minus target adapter alone" in md and "| 0.3min |" in md and "Every grid run" in md
    train = sum(g["train_seconds"] for g in result["grid_runs"])
    assert f"Training time summed over the {len(result['grid_runs'])} grid runs: {train / 60:.1f} min" in md
    png = (folder / "transfer_curve.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 5000
    import matplotlib.image

    image = matplotlib.image.imread(folder / "transfer_curve.png")
    assert image.ndim == 3 and image.shape[0] > 300 and image.shape[1] > 500


def test_a_second_call_retrains_nothing_and_a_changed_setting_only_its_runs(curve, monkeypatch):
    import adaptspeech.evaluation

    transfer_curve = runner_module
    out, first = curve
    recipe = load_recipe("recipes/synthetic_demo", _recipe_overrides(out))
    settings_overrides = [text.removeprefix("curve.") for text in CURVE_SETTINGS]
    run_stage, evaluate_dataset = transfer_curve.run_stage, adaptspeech.evaluation.evaluate_dataset

    def refuse(*args, **kwargs):
        raise AssertionError("a finished run was trained or evaluated again")

    monkeypatch.setattr(transfer_curve, "run_stage", refuse)
    monkeypatch.setattr(adaptspeech.evaluation, "evaluate_dataset", refuse)
    again = run_curve(recipe, load_curve_settings("recipes/synthetic_demo", settings_overrides, BUDGETS))
    assert [r["cer"] for r in again["rows"]] == [r["cer"] for r in first["rows"]]
    # another fine-tuning learning rate: two new runs (one per budget), every other run and evaluation reused
    trained = []

    def counting(spec, progress, **kwargs):
        trained.append(spec["output_dir"])
        return run_stage(spec, progress=progress, **kwargs)

    monkeypatch.setattr(transfer_curve, "run_stage", counting)
    monkeypatch.setattr(adaptspeech.evaluation, "evaluate_dataset", evaluate_dataset)
    changed = run_curve(
        recipe,
        load_curve_settings("recipes/synthetic_demo", [*settings_overrides, "grid.finetune.learning_rate=[0.001]"],
                            BUDGETS),
    )  # fmt: skip
    assert [t.split("/curve/")[1] for t in trained] == ["0.15min/finetune/lr0.001", "0.3min/finetune/lr0.001"]
    for before, after in zip(first["rows"], changed["rows"], strict=True):
        assert after["setting"] == ("lr0.001" if after["method"] == "finetune" else before["setting"])
        if after["method"] != "finetune":
            assert after["cer"] == before["cer"]


def test_step_rule_grid_and_tags():
    from adaptspeech.data.subsets import SubsetSize

    settings = CurveSettings(budgets=["1min"])
    anchor = SubsetSize.parse("10min")
    # steps = clip(500 * (minutes / 10) ** 0.5, 100, 2000)
    assert scaled_steps(settings, 500, 60.0, 27, anchor) == round(500 * 0.1**0.5) == 158
    assert scaled_steps(settings, 500, 600.0, 268, anchor) == 500
    assert scaled_steps(settings, 500, 1737.0, 800, anchor) == round(500 * (1737 / 600) ** 0.5) == 851
    assert scaled_steps(settings, 250, 60.0, 27, anchor) == 100  # the floor
    assert scaled_steps(settings, 500, 6000.0, 2700, anchor, scale=2.0) == 2000  # the ceiling
    assert scaled_steps(settings, 500, 60.0, 50, SubsetSize.parse("200utt")) == round(500 * 0.25**0.5)
    assert grid_points(settings, "adapter") == [{"learning_rate": v} for v in (2e-3, 5e-3, 1e-2)]
    fusion = CurveSettings(budgets=["1min"], grid={"simadapter": {"learning_rate": [1e-3], "guide_weight": [0.0, 0.1]}})
    assert [setting_tag(p) for p in grid_points(fusion, "simadapter")] == ["lr0.001_guide0", "lr0.001_guide0.1"]
    assert setting_tag({"train_target_adapter": True, "temperature": 12.0}) == "joint1_tau12"


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"budgets": []}, "at least one budget"),
        ({"budgets": ["ten minutes"]}, r"curve.budgets: subset size"),
        ({"budgets": ["1min", "1min"]}, "each budget once"),
        ({"budgets": ["1min"], "methods": ["lora"]}, r"curve.methods: unknown \['lora'\]"),
        ({"budgets": ["1min"], "methods": ["simadapter"]}, "add adapter"),
        ({"budgets": ["1min"], "grid": {"adapter": {"guide_weight": [0.1]}}}, r"curve.grid.adapter: unknown"),
        ({"budgets": ["1min"], "grid": {"adapter": {"learning_rate": 0.1}}}, "non-empty list"),
        ({"budgets": ["1min"], "steps": {"min": 0}}, "curve.steps"),
    ],
)
def test_bad_settings_are_refused(values, message):
    with pytest.raises(CurveError, match=message):
        CurveSettings(**values)


def test_curve_yaml_overrides_and_cli_errors(capsys):
    settings = load_curve_settings("recipes/synthetic_demo", ["grid.simadapter.guide_weight=[0.0, 0.5]"], ["1min"])
    assert settings.grid["simadapter"]["guide_weight"] == [0.0, 0.5]
    assert settings.grid["adapter"]["learning_rate"] == [0.002, 0.005, 0.01]  # from curve.yaml
    with pytest.raises(CurveError, match="unknown setting"):
        load_curve_settings("recipes/synthetic_demo", ["step.power=1"], ["1min"])
    assert cli_main(["recipe", "recipes/synthetic_demo", "--curve", "1min", "--only", "base"]) == 1
    assert "does not combine with --dry-run or --only" in capsys.readouterr().err
    assert cli_main(["recipe", "recipes/synthetic_demo", "curve.bootstrap_samples=10"]) == 1
    assert "curve.* settings need --curve" in capsys.readouterr().err
    assert cli_main(["recipe", "recipes/synthetic_demo", "--curve-plan"]) == 1
    assert "--curve-plan, --curve-methods and curve.* settings need --curve" in capsys.readouterr().err


def test_retarget_follows_target_and_sources():
    recipe = load_recipe("recipes/synthetic_demo", ["target=it", "sources=[cs, pl, sl, sk, es]"]).retargeted()
    source_model = recipe.stages["source_adapters"]["model"]
    assert list(source_model["add_adapters"]) == ["cs", "pl", "sl", "sk", "es"]
    assert source_model["add_adapters"]["sk"] == {"bottleneck": 64, "init": "near_identity"}
    assert source_model["active_languages"] == source_model["trainable"]["adapters"] == ["cs", "pl", "sl", "sk", "es"]
    target_model = recipe.stages["target_adapter"]["model"]
    assert list(target_model["add_adapters"]) == ["it"] and target_model["trainable"]["adapters"] == ["it"]
    fusion = recipe.stages["fusion"]["model"]["fusion"]
    assert fusion["languages"] == ["cs", "pl", "sl", "sk", "es", "it"] and fusion["target_language"] == "it"


def test_cer_interval_matches_a_reference_bootstrap():
    rng = np.random.default_rng(1)
    ref_units = rng.integers(5, 40, size=30)
    edits = rng.binomial(ref_units, 0.2)
    low, high = cer_interval(edits, ref_units, num_samples=500, confidence=0.9)
    draws = np.random.default_rng(0).integers(0, 30, size=(500, 30))  # paired_bootstrap's draws (seed 0)
    rates = [edits[d].sum() / ref_units[d].sum() for d in draws]
    assert (low, high) == pytest.approx(tuple(np.quantile(rates, [0.05, 0.95])))
    assert low < edits.sum() / ref_units.sum() < high
    # every utterance at the same rate: every resample has it, the interval is that point
    assert cer_interval(ref_units // 5, ref_units - ref_units % 5) == pytest.approx((0.2, 0.2))


def test_every_grid_run_gets_its_planned_steps_and_settings_do_not_leak(curve):
    """The specs of every grid run, built in plan order: each trains its planned steps (the stage files' max_steps
    scaled once, not the previous run's already-scaled value), a SimAdapter guide weight or trained target adapter
    stays in its own run, and the recipe is unchanged afterwards (the specs once shared the recipe's nested dicts)."""
    import copy
    from pathlib import Path

    load = load_curve_settings
    Budget, CurveRunner = runner_module.Budget, runner_module.CurveRunner

    out, _ = curve
    recipe = load_recipe("recipes/synthetic_demo", [*_recipe_overrides(out), "target_adapter.training.max_steps=400",
                                                    "fusion.training.max_steps=250", "scratch.training.max_steps=400",
                                                    "finetune.training.max_steps=250"])  # fmt: skip
    settings = load("recipes/synthetic_demo", [
        "steps={power: 0.5, min: 1, max: 10000}",
        "grid.simadapter.guide_weight=[0.1, 0.0]",
        "grid.simadapter.train_target_adapter=[true, false]",
    ], ["1min", "3min"])  # fmt: skip
    dataset, processor = load_prepared(out / "prepared")
    runner = CurveRunner(recipe, settings, out / "prepared", dataset, processor)
    before = copy.deepcopy(recipe)
    budgets = [Budget("1min", 1.0, 24, 1, 1), Budget("3min", 3.0, 77, 2, 2)]
    start = {"scratch": None, "finetune": Path("base/model"), "adapter": Path("source_adapters/model"),
             "simadapter": Path("adapter/lr0.005/model")}  # fmt: skip
    seen = []
    for budget in budgets:
        for method in ("scratch", "finetune", "adapter", "simadapter"):
            for setting in grid_points(settings, method):
                spec = runner._spec(method, budget, setting, start[method])
                assert spec["training"]["max_steps"] == runner.planned_steps(method, budget, setting)
                seen.append((budget.name, method, spec["training"]["max_steps"]))
                if method == "simadapter":
                    fusion = spec["model"].get("fusion") or {}
                    assert fusion.get("guide_weight") == setting["guide_weight"]
                    trains_adapter = (spec["model"].get("trainable") or {}).get("adapters") == ["sk"]
                    assert trains_adapter == setting["train_target_adapter"]
    assert recipe == before
    steps = {(b, m): s for b, m, s in seen}
    # the stage's 400 steps scaled from the recipe's target_subset (0.3 min here), every grid point alike
    assert steps[("1min", "scratch")] == round(400 * (1 / 0.3) ** 0.5)
    assert steps[("3min", "scratch")] == round(400 * (3 / 0.3) ** 0.5)
    assert len({s for b, m, s in seen if (b, m) == ("1min", "scratch")}) == 1
