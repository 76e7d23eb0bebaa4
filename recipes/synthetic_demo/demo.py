"""The synthetic demo's recipe task (``task: synthetic_demo``): the library's SimAdapter protocol with this folder's
own additions, the n-gram LM rows (:mod:`.lm_rows`: the ``lm`` section of ``recipe.yaml``, ``--only lm``), the
LM with which the protocol's self-training rounds label the target's unlabelled synthetic clips and decode their rows
(the ``self_training`` section, ``--only self_training``: :mod:`adaptspeech.recipes.simadapter.self_training`) and the
transfer curve (``curve/``: ``--curve BUDGET,BUDGET``, ``--curve-methods``, ``--curve-plan`` and
``curve.<key>=value`` settings over ``curve.yaml``).

    adaptspeech demo                                               # = adaptspeech recipe recipes/synthetic_demo
    adaptspeech demo --only lm                                     # the LM rows of a finished run, nothing trained
    adaptspeech demo --only self_training                          # self-training of a finished run's systems
    adaptspeech recipe recipes/synthetic_demo --curve 1min,3min,10min,30min
    adaptspeech demo --lid                                         # the language-ID head and its report (lid_report)
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from adaptspeech.progress import library_progress_bars
from adaptspeech.recipes.engine import RECIPE_TASKS, comma_list
from adaptspeech.recipes.simadapter.evaluation import ExtraRows, TargetEvaluation
from adaptspeech.recipes.simadapter.protocol import SimAdapterProtocol
from adaptspeech.recipes.simadapter.self_training import LMSetup
from adaptspeech.recipes.simadapter.self_training_rows import recipe_self_training_rows
from adaptspeech.recipes.simadapter.spec import SimAdapterRecipe
from adaptspeech.recipes.spec import RecipeError, RecipeSpec
from adaptspeech.settings import MAPPING, SettingType

from .curve.report import plan_markdown
from .curve.runner import run_curve
from .curve.settings import load_curve_settings, split_curve_overrides
from .lid_report import run_lid, split_lid_overrides
from .lm_rows import LM_STEP, VS_NO_LM_COLUMN, LMSettings, lm_markdown, lm_rows
from .options import demo_options


@dataclass(frozen=True, kw_only=True)
class SyntheticDemoRecipe(SimAdapterRecipe):
    """The SimAdapter protocol's settings (its ``self_training`` section too) and the ``lm`` section
    (:class:`.lm_rows.LMSettings`)."""

    lm: LMSettings = field(default_factory=LMSettings)

    SETTINGS: ClassVar[Mapping[str, SettingType]] = {"lm": MAPPING}

    @classmethod
    def convert(cls, values: dict[str, Any], folder: Path) -> dict[str, Any]:
        values = super().convert(values, folder)
        values["lm"] = LMSettings.from_dict("lm", values.get("lm"), cls.ERROR)
        return values

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.lm.enabled:
            trained = {"target_adapter", "fusion", *self.baselines}
            missing = [stage for stage in self.lm.systems if stage not in trained]
            if missing:
                raise self.ERROR(f"lm.systems: {', '.join(missing)} is not trained by this recipe (no such baseline)")


@RECIPE_TASKS.register("synthetic_demo")
class SyntheticDemo(SimAdapterProtocol):
    """The SimAdapter protocol plus the LM rows and the transfer curve (module docstring)."""

    spec_class = SyntheticDemoRecipe

    @classmethod
    def add_arguments(cls, parser: argparse.ArgumentParser) -> None:
        """``--curve``, ``--lid`` and the protocol's options (declared in options.py, the table the command reads)."""
        demo_options(parser)

    def step_names(self, spec: RecipeSpec) -> tuple[str, ...]:
        """The protocol's steps (the stages, ``self_training``) and ``lm``: train nothing, re-evaluate with the LM
        rows."""
        return (*super().step_names(spec), LM_STEP)

    def extra_rows(self, spec: SimAdapterRecipe, evaluation: TargetEvaluation) -> list[ExtraRows]:
        """The ``<system> + 4-gram LM`` rows (``results.json["lm"]``: None when the section is off), then the
        self-training rows, labelled and decoded with that LM (``results.json["self_training"]``: None when off)."""
        assert isinstance(spec, SyntheticDemoRecipe)
        extras = [ExtraRows("lm")]
        if spec.lm.enabled:
            found = lm_rows(spec, spec.lm, evaluation)
            markdown = lm_markdown(found.summary, spec.evaluation.split)
            extras = [ExtraRows("lm", found.rows, found.edits, found.summary, VS_NO_LM_COLUMN, markdown)]
        if not spec.self_training.enabled:
            return [*extras, ExtraRows("self_training")]
        lm = None
        if spec.lm.enabled:
            lm = LMSetup(spec.output_dir / "lm", spec.lm.alphas, spec.lm.betas, spec.lm.beam_size)
        return [*extras, recipe_self_training_rows(spec, evaluation, lm, extras[0], spec.lm.label)]

    def command(
        self, folder: Path, overrides: Sequence[str], only: Sequence[str] | None, options: argparse.Namespace
    ) -> int:
        if getattr(options, "lid", False):
            if getattr(options, "dry_run", False) or only or getattr(options, "curve", None) is not None:
                raise RecipeError("--lid reuses a finished run: it does not combine with --dry-run, --only or --curve")
            if options.lid_top_k < 2:
                raise RecipeError(f"--lid-top-k {options.lid_top_k}: the hybrid score needs at least 2 candidates")
            recipe_overrides, lid_overrides = split_lid_overrides(overrides)
            spec = self.load(folder, recipe_overrides)
            with library_progress_bars(enabled=spec.progress):
                run_lid(Path(folder), spec, lid_overrides, retrain=options.lid_retrain,
                        scoring=options.lid_scoring, top_k=options.lid_top_k)
            out = Path(spec.output_dir) / "lid"
            print((out / "lid_report.md").read_text())
            print(f"wrote {out / 'lid_report.md'}, lid_report.json, lid_confusion.png")
            return 0
        recipe_overrides, curve_overrides = split_curve_overrides(overrides)
        if getattr(options, "curve", None) is None:
            if getattr(options, "curve_plan", False) or getattr(options, "curve_methods", None) or curve_overrides:
                raise RecipeError("--curve-plan, --curve-methods and curve.* settings need --curve BUDGET,BUDGET")
            return super().command(folder, overrides, only, options)
        if getattr(options, "dry_run", False) or only:
            raise RecipeError("--curve runs its own stages: it does not combine with --dry-run or --only")
        budgets = comma_list(options.curve)
        if not budgets:
            raise RecipeError("--curve: give the target budgets, e.g. --curve 1min,3min,10min,30min")
        settings = load_curve_settings(folder, curve_overrides, budgets, comma_list(options.curve_methods) or None)
        spec = self.load(folder, recipe_overrides)
        assert isinstance(spec, SimAdapterRecipe)
        with library_progress_bars(enabled=spec.progress):
            result = run_curve(spec, settings, plan_only=options.curve_plan)
        if options.curve_plan:
            print(plan_markdown(result["budgets"], result["plan"]))
            return 0
        out = Path(result["folder"])
        print((out / "curve_results.md").read_text())
        print(f"wrote {out / 'curve_results.md'}, curve_results.json, transfer_curve.png")
        return 0
