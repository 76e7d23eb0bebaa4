"""The dry run of the Common Voice recipe at toy scale: the real recipe's stages and settings on a tiny corpus in the
Common Voice layout, with a tiny backbone shape in place of XLS-R 300M's; every stage trains, is measured, and the
test-set evaluation runs. The full-shape figures are in recipes/common_voice/README.md."""

from __future__ import annotations

import json
from argparse import Namespace
from pathlib import Path

import pytest
import torch

from adaptspeech.cli import main as cli_main
from adaptspeech.recipes import RecipeError, load_recipe
from adaptspeech.recipes.simadapter.cv_layout import write_common_voice_layout
from adaptspeech.recipes.simadapter.dry_run import (
    STEP_NAMES,
    XLSR_300M_BACKBONE,
    DryRunSettings,
    _run_isolated,
    dry_run_overrides,
    run_dry_run,
    settings_from_arguments,
)

TINY_BACKBONE = {
    "hidden_size": 32,
    "num_hidden_layers": 2,
    "num_attention_heads": 2,
    "intermediate_size": 64,
    "conv_dim": [16] * 7,
    "num_conv_pos_embeddings": 16,
    "num_conv_pos_embedding_groups": 2,
    # XLS-R's layerdrop 0.1 on 2 layers drops both in 1% of the steps: an adapter-only step then has no trainable
    # parameter in its graph (and, once the frozen CNN stops asking for input gradients, a loss without grad_fn).
    # At 24 layers that is 1e-24; the toy shape turns it off.
    "layerdrop": 0.0,
}
STAGES = ("base", "source_adapters", "target_adapter", "fusion", "finetune", "scratch")


@pytest.fixture(scope="module")
def dry_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("dry") / "cv"
    settings = DryRunSettings(
        steps=2,
        batch=2,
        seconds=1.0,
        clips={"train": 4, "dev": 1, "test": 1},
        eval_rows=2,
        backbone_config=TINY_BACKBONE,
        isolate=False,  # one process keeps the test fast; the isolated worker is checked below
    )
    result = run_dry_run("recipes/common_voice", [f"output_dir={out}", "progress=false"], settings)
    return result


def test_every_stage_runs_and_is_measured(dry_run):
    records = {r["step"]: r for r in dry_run["records"]}
    assert list(records) == ["prepare", *STAGES, "evaluate"]
    assert dry_run["failed"] == [], {k: r.get("error") or r.get("skipped") for k, r in records.items()}
    for stage in STAGES:
        r = records[stage]
        assert r["steps"] == 2 and len(r["step_seconds"]) == 2 and r["seconds_per_step"] > 0
        assert r["trainable"] > 0 and r["peak_train_mib"] > 0 and r["peak_process_mib"] >= r["peak_train_mib"] * 0.5
    # full-model stages train everything but the feature encoder; adapter stages far less
    assert records["base"]["trainable"] == records["finetune"]["trainable"] == records["scratch"]["trainable"]
    assert records["target_adapter"]["trainable"] < records["source_adapters"]["trainable"]
    assert records["fusion"]["trainable"] < records["base"]["trainable"]
    table = dry_run["markdown"]
    for step in ["prepare", *STAGES, "evaluate"]:
        assert f"| {step} |" in table
    out = dry_run["output_dir"]
    md = Path(f"{out}/dry_run.md").read_text()
    assert "s/step" in md and "peak RSS training MiB" in md
    saved = json.loads(Path(f"{out}/dry_run.json").read_text())
    assert [r["step"] for r in saved["records"]] == list(records)
    results = Path(f"{out}/results.md").read_text()
    assert "SimAdapter fusion" in results and "| ru |" in results


def test_the_recipe_keeps_its_own_settings(dry_run):
    recipe = json.loads(Path(f"{dry_run['output_dir']}/dry_run_recipe.json").read_text())
    base = recipe["stages"]["base"]
    assert base["model"]["init"] == "config" and base["model"]["path"] is None
    backbone = base["model"]["config"]["backbone_config"]
    assert backbone == {**XLSR_300M_BACKBONE, **TINY_BACKBONE}
    assert base["training"]["bf16"] is True and base["training"]["activation_checkpointing"] is True
    assert base["training"]["max_steps"] == 2 and base["training"]["save_strategy"] == "no"
    assert base["data"]["language_sampling_temperature"] == 2  # the source stages draw languages with T = 2
    assert base["training"]["use_cpu"] is (not torch.cuda.is_available())
    adapters = recipe["stages"]["source_adapters"]["model"]
    assert adapters["add_adapters"]["ru"] == {"bottleneck": 128} and len(adapters["active_languages"]) == 5
    assert recipe["stages"]["fusion"]["model"]["fusion"]["languages"] == ["ru", "cy", "it", "eu", "pt", "ro"]
    assert recipe["baselines"]["scratch"]["model"]["config"]["backbone_config"]["do_stable_layer_norm"] is True
    # the model saved by the base stage is the stable-layer-norm wav2vec2 of the override's shape
    config = json.loads(Path(f"{dry_run['output_dir']}/base/model/config.json").read_text())
    assert config["backbone_config"]["do_stable_layer_norm"] and config["backbone_config"]["hidden_size"] == 32


def test_an_isolated_step_reports_its_own_peak(dry_run):
    out = Path(dry_run["output_dir"])
    record = _run_isolated(out / "dry_run_recipe.json", "prepare", out / "prepare_again.json")
    assert "error" not in record, record
    assert record["step"] == "prepare" and record["peak_process_mib"] > 50 and record["process_wall_seconds"] > 0


def test_overrides_replace_only_hub_backbones_and_the_amount_of_work(tmp_path):
    recipe = load_recipe("recipes/common_voice")
    overrides = dry_run_overrides(recipe, DryRunSettings(steps=2, batch=3), tmp_path)
    assert f"output_dir={tmp_path}" in overrides and "corpus.type=common_voice" in overrides
    assert "base.model.init=config" in overrides and "scratch.model.init=config" in overrides
    assert not any(o.startswith("fusion.model.") for o in overrides)  # init: pretrained stays
    assert "fusion.training.max_steps=2" in overrides and "finetune.training.per_device_train_batch_size=3" in overrides
    config = json.loads(next(o for o in overrides if o.startswith("base.model.config=")).split("=", 1)[1])
    assert config["backbone_type"] == "wav2vec2"
    assert config["backbone_config"]["num_hidden_layers"] == 24 and config["backbone_config"]["hidden_size"] == 1024


def test_settings_and_cli_flags(monkeypatch, tmp_path, capsys):
    settings = settings_from_arguments(
        Namespace(dry_run_steps=2, dry_run_batch=None, dry_run_seconds=1.5, dry_run_backbone='{"hidden_size": 8}')
    )
    assert (settings.steps, settings.batch, settings.seconds) == (2, 2, 1.5)
    assert settings.backbone_config == {"hidden_size": 8}
    with pytest.raises(RecipeError, match="not JSON"):
        settings_from_arguments(Namespace(dry_run_steps=None, dry_run_batch=None, dry_run_seconds=None,
                                          dry_run_backbone="{oops"))  # fmt: skip
    calls = []

    def fake(recipe_dir, overrides, settings, only=None):
        calls.append((recipe_dir, overrides, settings, only))
        return {"markdown": "| table |", "output_dir": str(tmp_path), "total_seconds": 1.0, "failed": []}

    monkeypatch.setattr("adaptspeech.recipes.simadapter.dry_run.run_dry_run", fake)
    code = cli_main(["recipe", "recipes/common_voice", "--dry-run", "--dry-run-steps", "2", "--only", "base,evaluate",
                     "target=cs"])  # fmt: skip
    assert code == 0 and "| table |" in capsys.readouterr().out
    recipe_dir, overrides, settings, only = calls[0]
    assert str(recipe_dir) == "recipes/common_voice" and overrides == ["target=cs"] and settings.steps == 2
    assert only == ["base", "evaluate"] and set(only) <= set(STEP_NAMES)
    assert cli_main(["recipe", "recipes/common_voice", "--dry-run", "--only", "bogus"]) == 1
    assert "unknown stage(s) bogus" in capsys.readouterr().err


def test_the_layout_is_what_the_common_voice_loader_reads(tmp_path):
    from adaptspeech.data import load_common_voice

    written = write_common_voice_layout(tmp_path, ["ar", "br"], {"train": 2, "dev": 1, "test": 1}, seconds=0.5)
    assert written == {"ar": {"train": 2, "dev": 1, "test": 1}, "br": {"train": 2, "dev": 1, "test": 1}}
    data = load_common_voice(tmp_path, ["ar", "br"])
    assert data["train"].num_rows == 4 and data["test"]["language"] == ["ar", "br"]
    assert all(d is not None and 0.4 < d < 0.6 for d in data["train"]["duration"])
    assert not set(data["test"]["client_id"]) & set(data["train"]["client_id"])  # test speakers held out
    assert data["train"][0]["audio"]["path"].endswith(".mp3")
