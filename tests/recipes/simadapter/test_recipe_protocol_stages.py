"""A recipe stage interrupted half-way (adaptspeech/recipes/simadapter/stages.py): the same recipe run again continues
the stage from its last complete checkpoint when its settings are unchanged, and with changed settings says so in
one line and removes nothing (before: "overwrite: removed the earlier run", and the stage retrained from step 0)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from helpers.files import folder_bytes
from helpers.recipes import DEMO, TINY, few_steps
from helpers.training import CountSteps
from transformers import TrainerCallback

from adaptspeech.data import build_synthetic_corpus, prepare_corpus
from adaptspeech.recipes import RecipeError, load_recipe
from adaptspeech.recipes.simadapter.stages import prepare_data, recipe_plan, train_recipe_stage

STEPS, SAVE_STEPS = 6, 3


class _Interrupt(TrainerCallback):
    """Ctrl-C right after ``checkpoint-{step}`` was written (``on_save`` runs once the checkpoint is complete)."""

    def __init__(self, step: int) -> None:
        self.step = step

    def on_save(self, args, state, control, **kwargs):
        if state.global_step == self.step:
            raise KeyboardInterrupt


@pytest.fixture(scope="module")
def prepared(tmp_path_factory) -> Path:
    """cs and pl, 12 synthetic clips each, prepared as fbank features."""
    root = tmp_path_factory.mktemp("stage_corpus")
    build_synthetic_corpus(root / "corpus", ["cs", "pl"], 12, seed=0, num_workers=1, progress=False)
    prepare_corpus(root / "corpus", ["cs", "pl"], root / "prepared", feature_type="fbank", max_seconds=12)
    return root / "prepared"


def _base(out: Path, prepared: Path, *overrides: str):
    """The demo recipe at toy size (its base stage: 6 steps, a checkpoint every 3) and its base stage."""
    (out / "prepared").mkdir(parents=True, exist_ok=True)
    for part in ("dataset", "processor", "prepare_config.json"):
        target = out / "prepared" / part
        if not target.exists():
            target.symlink_to(prepared / part)
    spec = load_recipe(DEMO, [f"output_dir={out}", "progress=false", "sources=[cs, pl]", "target=sk",
                              "lm.enabled=false", f"base.model.config={json.dumps(TINY)}",
                              *few_steps(["base"], steps=STEPS, save_steps=SAVE_STEPS, logging_steps=1), *overrides])
    return spec, recipe_plan(spec)[0], prepare_data(spec)


def _train(spec, stage, prepared, *callbacks):
    """``train_recipe_stage`` with ``callbacks`` added to every Trainer it builds (as a recipe run builds them)."""
    import transformers.trainer

    transformers.trainer.DEFAULT_CALLBACKS.extend(callbacks)
    try:
        return train_recipe_stage(spec, stage, prepared, progress=False)
    finally:
        for callback in callbacks:
            transformers.trainer.DEFAULT_CALLBACKS.remove(callback)


def _interrupted(tmp_path, prepared) -> tuple:
    torch.set_num_threads(1)
    spec, stage, data = _base(tmp_path / "run", prepared)
    with pytest.raises(KeyboardInterrupt):
        _train(spec, stage, data, _Interrupt(SAVE_STEPS))
    folder = tmp_path / "run" / "base"
    assert (folder / "checkpoints" / f"checkpoint-{SAVE_STEPS}").is_dir()
    assert not (folder / "stage_summary.json").exists()  # interrupted: no model, no summary
    return spec, stage, data, folder


def test_a_rerun_continues_an_interrupted_stage_from_its_checkpoint(prepared, tmp_path, capfd):
    spec, stage, data, folder = _interrupted(tmp_path, prepared)
    capfd.readouterr()
    steps = CountSteps()
    summary, history = _train(spec, stage, data, steps)
    out, err = capfd.readouterr()
    assert f"stage base: continuing the interrupted run from checkpoint-{SAVE_STEPS} (same settings)" in out
    assert "removed the earlier run" not in err
    assert steps.steps == list(range(SAVE_STEPS + 1, STEPS + 1))  # the steps after the checkpoint, once each
    state = json.loads((folder / "checkpoints" / f"checkpoint-{STEPS}" / "trainer_state.json").read_text())
    assert state["global_step"] == STEPS
    assert [entry["step"] for entry in history if "loss" in entry] == list(range(1, STEPS + 1))
    assert (folder / "model").is_dir() and summary["stage"] == "base"


def test_an_interrupted_stage_of_other_settings_is_one_line_and_kept(prepared, tmp_path):
    _, stage, data, folder = _interrupted(tmp_path, prepared)
    before = folder_bytes(folder)
    changed, _, data = _base(tmp_path / "run", prepared, "base.training.learning_rate=0.01")
    with pytest.raises(RecipeError) as info:
        _train(changed, stage, data)
    message = str(info.value)
    assert "\n" not in message and message.startswith(
        f"stage base: {folder} holds an interrupted run of other settings (checkpoint-{SAVE_STEPS}; ")
    assert "training.learning_rate: 0.002 -> 0.01" in message
    assert f"Restore these settings to continue it from checkpoint-{SAVE_STEPS}, or remove {folder}" in message
    assert folder_bytes(folder) == before  # nothing removed
    # a longer budget is the same run: continued
    longer, _, data = _base(tmp_path / "run", prepared, f"base.training.max_steps={STEPS + 3}")
    steps = CountSteps()
    _train(longer, stage, data, steps)
    assert steps.steps == list(range(SAVE_STEPS + 1, STEPS + 4))


def test_a_rerun_after_the_final_checkpoint_trains_no_step_and_keeps_it(prepared, tmp_path, capfd):
    """Interrupted right after the final checkpoint-6 (max_steps 6) was written, before the model was saved. Before:
    where max_steps ends in the middle of an epoch the rerun trained a step 7 and saved checkpoint-7 (rotating
    checkpoint-3 out). Now it trains no step: the model is checkpoint-6's weights, the checkpoints stay as they
    were."""
    from safetensors.torch import load_file

    torch.set_num_threads(1)
    spec, stage, data = _base(tmp_path / "run", prepared)
    with pytest.raises(KeyboardInterrupt):
        _train(spec, stage, data, _Interrupt(STEPS))
    checkpoints = tmp_path / "run" / "base" / "checkpoints"
    before = folder_bytes(checkpoints)
    assert sorted(p.name for p in checkpoints.iterdir()) == [f"checkpoint-{SAVE_STEPS}", f"checkpoint-{STEPS}"]
    capfd.readouterr()
    steps = CountSteps()
    summary, history = _train(spec, stage, data, steps)
    out, err = capfd.readouterr()
    assert f"stage base: continuing the interrupted run from checkpoint-{STEPS} (same settings)" in out
    assert steps.steps == [] and folder_bytes(checkpoints) == before
    assert f"checkpoint-{STEPS} is at step {STEPS} of max_steps {STEPS}: nothing left to train" in err
    assert [entry["step"] for entry in history if "loss" in entry] == list(range(1, STEPS + 1))
    final = checkpoints / f"checkpoint-{STEPS}"
    assert json.loads((final / "trainer_state.json").read_text())["global_step"] == STEPS
    trained = load_file(final / "model.safetensors")
    saved = load_file(tmp_path / "run" / "base" / "model" / "model.safetensors")
    assert set(saved) == set(trained) and all(torch.equal(saved[k], trained[k]) for k in saved)
    assert summary["stage"] == "base"
