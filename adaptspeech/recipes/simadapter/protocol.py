"""The SimAdapter protocol (Hou et al. 2021, "Exploiting adapters for cross-lingual low-resource speech recognition")
as a recipe task, with its baselines on the same target data: task ``simadapter``, the default of ``recipe.yaml``.

Stages (each a YAML file beside ``recipe.yaml``, each overridable as ``<stage>.<section>.<key>=value``; settings:
:mod:`~adaptspeech.recipes.simadapter.spec`):

1. ``base``: a multilingual encoder + CTC head trained on the source languages (or a pretrained checkpoint:
   ``base.model.init=backbone``, ``base.model.path=facebook/wav2vec2-xls-r-300m``);
2. ``source_adapters``: one adapter per source language, the base frozen (all trained in one run: each utterance
   goes through its own language's adapter);
3. ``target_adapter``: the target language's adapter alone on the (small) target training set, then ``fusion``:
   SimAdapter over the source adapters and the target adapter, everything else frozen.

Baselines on the same target data: ``finetune`` (the whole base model), ``scratch`` (the same architecture from
random initialisation) and the target adapter alone (stage 3a). Zero-shot base is reported too.

:func:`run_protocol` is the sequence :func:`~.stages.prepare_data` ->
:func:`~.stages.train_recipe_stage` for each stage of :func:`~.stages.recipe_plan` (a stage
``--only`` leaves out is reused from an earlier run; one interrupted half-way continues from its last complete
checkpoint when its settings are unchanged) -> the test-set evaluation
(:func:`~adaptspeech.recipes.simadapter.evaluation.evaluate_recipe`: ``results.md`` / ``results.json``,
``fusion_heatmap.png``, ``training_curves.png``); the dry run (:mod:`adaptspeech.recipes.simadapter.dry_run`,
``--dry-run``) runs the same steps one process each. With the ``self_training`` section on (or ``--only
self_training``), the trained systems are self-trained on untranscribed audio and the table gains their rows
(:mod:`~adaptspeech.recipes.simadapter.self_training`, :mod:`~adaptspeech.recipes.simadapter.self_training_rows`). A
recipe folder's own task may subclass :class:`SimAdapterProtocol` to add rows to the table
(:meth:`SimAdapterProtocol.extra_rows`), steps and options.
"""

from __future__ import annotations

import argparse
import dataclasses
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, ClassVar

from ...progress import log
from ..engine import RECIPE_TASKS, Action, RecipeTask, check_only, recipe_task, schedule, set_threads
from ..options import simadapter_options
from ..spec import RecipeSpec
from . import dry_run
from .evaluation import ExtraRows, TargetEvaluation, evaluate_recipe
from .languages import retarget_stages
from .self_training_pool import check_pool_setting, ensure_pool
from .self_training_rows import recipe_self_training_rows
from .self_training_settings import SELF_TRAINING_STEP
from .spec import BASELINE_NAMES, STAGE_NAMES, SimAdapterRecipe
from .stages import (
    PREPARED,
    PlannedStage,
    load_stage_outputs,
    prepare_data,
    recipe_plan,
    stage_finished,
    stage_spec,
    train_recipe_stage,
)


def run_protocol(spec: SimAdapterRecipe, only: Sequence[str] | None = None) -> dict[str, Any]:
    """Run every stage and baseline, evaluate on the test sets, write the table and the plots.

    Args:
        spec: from :func:`~adaptspeech.recipes.engine.load_recipe`.
        only: run only these stages / baselines (the others are reused from an earlier run; when one of them has
            not run yet, the stages named are trained and the line naming the skipped ones ends the run, without a
            results table); a step of the recipe's own task that names no stage (the synthetic demo's ``lm``) trains
            nothing and re-evaluates.

    Returns:
        What ``results.json`` holds (``{"rows": [], "trained": [...], "skipped": [...]}`` when stages were skipped).

    Raises:
        RecipeError: a stage or the ``self_training.pool`` that cannot work (before the corpus is prepared or
            anything trains); nothing to train and a stage that never ran.
    """
    task = recipe_task(spec)
    set_threads(spec)
    spec.output_dir.mkdir(parents=True, exist_ok=True)
    total_start = time.perf_counter()
    plan = recipe_plan(spec)
    for stage in plan:  # validate every stage (its overrides too) before the long work: the corpus, the data
        stage_spec(spec, stage, spec.output_dir / PREPARED)
    if spec.self_training.enabled:
        check_pool_setting(spec, spec.self_training)
    prepared = prepare_data(spec)
    if spec.self_training.enabled and spec.self_training.pool:
        ensure_pool(spec, spec.self_training, prepared)  # a given pool shares nothing with dev / test: before training
    scheduled = schedule(task, spec, only)
    never_ran = [stage.name for stage, action in scheduled
                 if action is not Action.RUN and not stage_finished(spec, stage.name)]
    if never_ran and all(action is not Action.RUN for _, action in scheduled):
        load_stage_outputs(spec, never_ran[0])  # nothing to train and nothing to evaluate: one line naming the stage
    results: dict[str, Any] = {}
    histories: dict[str, list[dict[str, Any]]] = {}
    for stage, action in scheduled:
        if action is Action.RUN:
            results[stage.name], histories[stage.name] = train_recipe_stage(spec, stage, prepared, spec.progress)
        elif stage.name not in never_ran:
            results[stage.name], histories[stage.name] = load_stage_outputs(spec, stage.name)
    if never_ran:
        trained = [stage.name for stage, action in scheduled if action is Action.RUN]
        log(f"trained {', '.join(trained)}; skipped {', '.join(never_ran)} (left out by --only, not run before): "
            "no results table until every stage has run")
        return {"rows": [], "trained": trained, "skipped": never_ran}
    return evaluate_recipe(spec, prepared, results, histories, total_start=total_start)


@RECIPE_TASKS.register("simadapter")
class SimAdapterProtocol(RecipeTask):
    """The SimAdapter protocol (module docstring); its command also takes ``--dry-run`` (:mod:`.dry_run`)."""

    spec_class = SimAdapterRecipe
    stage_groups: ClassVar[dict[str, tuple[str, ...]]] = {"stages": STAGE_NAMES, "baselines": BASELINE_NAMES}
    outside_only = Action.REUSE
    skip_finished = False
    outputs = ("results.md", "results.json", "fusion_heatmap.png", "training_curves.png")

    @classmethod
    def add_arguments(cls, parser: argparse.ArgumentParser) -> None:
        """``--dry-run`` and its settings (:func:`~..options.simadapter_options`, the table the command line reads)."""
        simadapter_options(parser)

    def command(
        self, folder: Path, overrides: Sequence[str], only: Sequence[str] | None, options: argparse.Namespace
    ) -> int:
        if not getattr(options, "dry_run", False):
            return super().command(folder, overrides, only, options)
        check_only(only, dry_run.STEP_NAMES)
        settings = dry_run.settings_from_arguments(options)
        result = dry_run.run_dry_run(folder, list(overrides), settings, only=list(only or []) or None)
        print(result["markdown"])
        minutes = result["total_seconds"] / 60
        print(f"wrote {Path(result['output_dir']) / 'dry_run.md'} and dry_run.json ({minutes:.1f} min)")
        if result["failed"]:
            print(f"failed: {', '.join(result['failed'])}")
            return 1
        return 0

    def adjust(self, values: dict[str, Any]) -> dict[str, Any]:
        """The stage files' languages follow ``sources=`` / ``target=`` (before the stage overrides apply)."""
        stages = values.get("stages") or {}
        if values.get("sources") and values.get("target") and all(s in stages for s in STAGE_NAMES):
            sources = [values["sources"]] if isinstance(values["sources"], str) else list(values["sources"])
            values = {**values, "stages": retarget_stages(stages, sources, values["target"])}
        return values

    def plan(self, spec: RecipeSpec) -> list[PlannedStage]:
        assert isinstance(spec, SimAdapterRecipe)
        return recipe_plan(spec)

    def step_names(self, spec: RecipeSpec) -> tuple[str, ...]:
        """The stages and ``self_training`` (train no stage: run or reuse the self-training rounds, re-evaluate)."""
        return (*super().step_names(spec), SELF_TRAINING_STEP)

    def run(self, spec: RecipeSpec, only: Sequence[str] | None = None) -> dict[str, Any]:
        """The protocol; ``--only self_training`` turns the ``self_training`` section on for this run."""
        assert isinstance(spec, SimAdapterRecipe)
        if only and SELF_TRAINING_STEP in only and not spec.self_training.enabled:
            spec = dataclasses.replace(spec, self_training=dataclasses.replace(spec.self_training, enabled=True))
        return run_protocol(spec, only)

    def extra_rows(self, spec: SimAdapterRecipe, evaluation: TargetEvaluation) -> list[ExtraRows]:
        """Rows a recipe's own task adds to the target table after the trained systems: here the self-training
        rows when the section is on (the synthetic demo adds its n-gram LM rows and labels with that LM)."""
        if not spec.self_training.enabled:
            return []
        return [recipe_self_training_rows(spec, evaluation)]
