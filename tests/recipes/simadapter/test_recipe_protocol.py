"""The SimAdapter protocol end to end at toy scale: every stage and baseline runs on a tiny synthetic corpus, the
results table, the fusion heatmap and the training curves are written; recipe and stage settings are validated."""

import json

import pytest
from helpers.recipes import TINY, few_steps

from adaptspeech.overrides import apply_overrides, parse_override
from adaptspeech.recipes import RecipeError, load_recipe, run_recipe
from adaptspeech.training.stage import StageConfigError, StageSpec


def _toy_run(out) -> list[str]:
    """Overrides shared by every toy run of the demo recipe: its output folder, languages and target subset; no LM
    rows (tests/recipes/test_recipe_demo_lm_rows.py covers them)."""
    return [f"output_dir={out}", "progress=false", "sources=[cs, pl]", "target=sk", "target_subset=8utt",
            "lm.enabled=false"]


@pytest.fixture(scope="module")
def recipe_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("recipe")
    overrides = [
        *_toy_run(out),
        "corpus.clips_per_language=20",
        "prepare.max_seconds=12",
        f"base.model.config={json.dumps(TINY)}",
        f"scratch.model.config={json.dumps(TINY)}",
        "source_adapters.model.add_adapters={cs: {bottleneck: 8}, pl: {bottleneck: 8}}",
        "source_adapters.model.active_languages=[cs, pl]",
        "source_adapters.model.trainable={adapters: [cs, pl]}",
        "target_adapter.model.add_adapters={sk: {bottleneck: 8}}",
        "fusion.model.fusion={languages: [cs, pl, sk], target_language: sk, residual: none}",
    ]
    overrides += few_steps(save_steps=3, logging_steps=1)
    recipe = load_recipe("recipes/synthetic_demo", overrides)
    return out, run_recipe(recipe)


def test_every_system_is_in_the_table(recipe_run):
    out, result = recipe_run
    systems = [row["system"] for row in result["rows"]]
    assert systems == [
        "base, zero-shot (no target training)",
        "from scratch",
        "full fine-tuning of the base",
        "target adapter alone",
        "SimAdapter fusion (on the target adapter)",
    ]
    saved = json.loads((out / "results.json").read_text())
    assert saved["rows"] == json.loads(json.dumps(result["rows"]))
    md = (out / "results.md").read_text()
    assert "SimAdapter fusion" in md and "| cs |" in md and "average" in md
    assert "CER - adapter alone, 95% CI" in md
    # every other system against the adapter alone: paired bootstrap of the CER difference on the same utterances
    by_cer = {row["system"]: row["cer"] for row in result["rows"]}
    significance = saved["significance"]
    assert set(significance) == set(systems) - {"target adapter alone"}
    for system, figures in significance.items():
        assert figures["cer_delta"] == pytest.approx(by_cer[system] - by_cer["target adapter alone"])
        assert figures["ci_low"] <= figures["cer_delta"] <= figures["ci_high"]
        assert 0.0 <= figures["p_not_better"] <= 1.0
    by_system = {row["system"]: row for row in result["rows"]}
    # trainable shares: adapter < fusion < full fine-tuning = scratch = 1
    adapter = by_system["target adapter alone"]["trainable_share"]
    fusion_row = by_system["SimAdapter fusion (on the target adapter)"]
    fusion = fusion_row["trainable_share"]
    assert 0 < adapter < fusion < 1
    # SimAdapter builds on stage 3a: its row counts the target adapter's parameters and time once, plus the fusion's
    stage_a = json.loads((out / "target_adapter" / "stage_summary.json").read_text())
    stage_b = json.loads((out / "fusion" / "stage_summary.json").read_text())
    groups_a, groups_b = stage_a["trainable"]["groups"], stage_b["trainable"]["groups"]
    assert fusion_row["trainable_params"] == groups_a["adapter:sk"]["trainable"] + groups_b["fusion"]["trainable"]
    total = stage_b["trainable"]["total"]
    assert fusion_row["trainable_share"] == pytest.approx(fusion_row["trainable_params"] / total)
    assert fusion_row["train_seconds"] == pytest.approx(stage_a["train_seconds"] + stage_b["train_seconds"])
    assert by_system["full fine-tuning of the base"]["trainable_share"] == pytest.approx(1.0)
    for row in result["rows"]:
        assert row["cer"] >= 0 and row["wer"] >= 0
    assert result["target_train_rows"] == 8


def test_plots_and_fusion_weights(recipe_run):
    out, result = recipe_run
    for name in ("fusion_heatmap.png", "training_curves.png"):
        data = (out / name).read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 5000
    heatmap = result["fusion_heatmap"]
    assert heatmap["languages"] == ["cs", "pl", "sk"]
    for row in heatmap["weights"]:
        assert sum(row) == pytest.approx(1.0, abs=1e-3)


def test_only_reuses_earlier_stages(recipe_run):
    out, result = recipe_run
    before = (out / "base" / "stage_summary.json").read_text()
    overrides = [
        *_toy_run(out),
        "fusion.model.fusion={languages: [cs, pl, sk], target_language: sk, residual: query}",
        "fusion.training.max_steps=2",
        "fusion.training.eval_strategy=no",
        "fusion.training.per_device_train_batch_size=4",
    ]
    again = run_recipe(load_recipe("recipes/synthetic_demo", overrides), only=["fusion"])
    assert (out / "base" / "stage_summary.json").read_text() == before
    assert [r["system"] for r in again["rows"]] == [r["system"] for r in result["rows"]]


def test_overrides_and_validation(tmp_path):
    assert parse_override("training.learning_rate=3e-4") == (["training", "learning_rate"], 3e-4)
    assert apply_overrides({"a": {"b": 1}}, ["a.c=[1, 2]"]) == {"a": {"b": 1, "c": [1, 2]}}
    with pytest.raises(StageConfigError, match=r"section\.key=value"):
        parse_override("oops")
    base = {
        "name": "x",
        "output_dir": str(tmp_path),
        "data": {"prepared_dir": "p", "train_languages": ["cs"]},
        "model": {"init": "config"},
    }
    StageSpec.from_dict(base)
    with pytest.raises(StageConfigError, match=r"learning_rat.*TrainingArguments"):
        StageSpec.from_dict({**base, "training": {"learning_rat": 1}})
    with pytest.raises(StageConfigError, match=r"allowed values: config, pretrained, backbone"):
        StageSpec.from_dict({**base, "model": {"init": "hub"}})
    with pytest.raises(StageConfigError, match=r"trainable.*allowed settings"):
        StageSpec.from_dict({**base, "model": {"trainable": {"encoder": True}}})
    with pytest.raises(RecipeError, match=r"unknown setting.*bas"):
        load_recipe("recipes/synthetic_demo", ["bas.training.max_steps=1"])
    with pytest.raises(RecipeError, match="target 'cs' is also a source"):
        load_recipe("recipes/synthetic_demo", ["target=cs"])
    misnamed = "baselines={finetune: stage_finetune.yaml, scratchy: stage_scratch.yaml}"
    with pytest.raises(RecipeError, match=r"recipe.baselines: unknown setting\(s\) scratchy \(did you mean "
                                          r"scratch\?\); allowed settings: finetune, scratch$"):
        load_recipe("recipes/synthetic_demo", [misnamed])


def test_a_misspelt_stage_override_is_refused_before_the_data_is_built(tmp_path, capsys):
    from adaptspeech.cli import main

    out = tmp_path / "run"
    assert main(["recipe", "recipes/synthetic_demo", *_toy_run(out), "base.training.max_step=5"]) == 1
    err = capsys.readouterr().err.strip()
    assert err.startswith("adaptspeech: error: training: unknown setting(s) max_step (did you mean max_steps?); "
                          "allowed settings: the fields of transformers.TrainingArguments") and "\n" not in err
    assert not (out / "corpus").exists() and not (out / "prepared").exists()  # no corpus built, no data prepared


def test_evaluation_runs_on_the_device_the_stages_trained_on(monkeypatch):
    import torch

    from adaptspeech.recipes.simadapter.evaluation import resolve_device

    demo = load_recipe("recipes/synthetic_demo")  # every stage sets training.use_cpu
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert resolve_device(demo) == torch.device("cpu")
    assert resolve_device(load_recipe("recipes/common_voice")) == torch.device("cuda")  # trained on the GPU
    assert resolve_device(load_recipe("recipes/common_voice", ["evaluation.device=cpu"])) == torch.device("cpu")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert resolve_device(load_recipe("recipes/common_voice")).type in ("cpu", "mps")
    with pytest.raises(RecipeError, match="CUDA is not available"):
        resolve_device(load_recipe("recipes/common_voice", ["evaluation.device=cuda:0"]))
    with pytest.raises(RecipeError, match=r"evaluation: unknown setting\(s\) devices"):
        load_recipe("recipes/common_voice", ["evaluation.devices=cpu"])
