"""The transfer curve's self-training arm (method ``self_training``): at each budget, the system the curve chose on dev
(``curve.self_training.system``: the target adapter by default) becomes the teacher of K noisy-student rounds on the
untranscribed pool, run by the recipe's own machinery
(:class:`~adaptspeech.recipes.simadapter.self_training.SelfTrainingRunner` with the recipe's ``self_training`` section,
the curve overriding only ``pool``, ``rounds`` and ``steps_scale``).

- The pool is the recipe's (:func:`~adaptspeech.recipes.simadapter.self_training_pool.ensure_pool`:
  ``self_training.pool``, or the pool its section builds in ``<output_dir>/self_training/pool``, reused when built
  before), so every budget labels the same audio; the teachers label it with the recipe's n-gram LM when the
  section says so (``use_lm``, the demo's ``lm`` section: built, or reused, in ``<output_dir>/lm`` as the demo's LM
  rows build it).
- A student trains as the curve trained its teacher (that run's spec: the budget's nested subset, the learning rate
  chosen on dev, the budget's steps) on the labelled and the kept pseudo-labelled rows, with speed perturbation, for
  ``steps_scale`` times the run's steps (:func:`~adaptspeech.recipes.simadapter.self_training.student_spec_from`). The
  rounds stop when dev CER stops improving; the point is the round with the lowest dev CER, evaluated on the test set as
  every other point.
- At the recipe's own budget (``target_subset``, 10 minutes for the demo), with ``reuse_recipe_rounds`` on and the
  recipe's stage of the system finished in ``output_dir`` on the same rows, the teacher is that stage (the demo's
  system) and the students are built as the recipe's ``self_training`` section builds them: the finished rounds of
  ``<output_dir>/self_training/<system>`` whose key (teacher, pool, LM, settings but ``rounds`` / ``systems``)
  matches are reused, so the point is the demo's ``<system> + self-training`` row when the settings match.

Rounds are written in ``<curve>/<budget>/self_training/<system>/<teacher>/round_<k>`` (``<teacher>``: the chosen
run's folder name, or ``recipe``); a finished round whose key matches is reused, not redone.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from adaptspeech.data.prepared_data import select_languages
from adaptspeech.data.subsets import SubsetSize
from adaptspeech.progress import log
from adaptspeech.recipes.simadapter.evaluation import trained_parameters
from adaptspeech.recipes.simadapter.self_training import LMSetup, SelfTrainingRunner, SystemRun
from adaptspeech.recipes.simadapter.self_training_pool import FOLDER, ensure_pool
from adaptspeech.recipes.simadapter.spec import SimAdapterRecipe

from .report import METHOD_LABELS
from .settings import ARM_SYSTEMS, CurveSettings

if TYPE_CHECKING:
    from .runner import Budget, CurveRun

#: the teacher folder name of the recipe's own trained system
RECIPE_TEACHER = "recipe"


def arm_label(system: str) -> str:
    """``target adapter alone + self-training``: the arm's name in the table and the legend."""
    return f"{METHOD_LABELS[ARM_SYSTEMS[system]]} + self-training"


def arm_settings(recipe: SimAdapterRecipe, settings: CurveSettings) -> Any:
    """The recipe's ``self_training`` section with the arm's system and its ``pool`` / ``rounds`` / ``steps_scale``
    where the curve sets them (:class:`~adaptspeech.recipes.simadapter.self_training_settings.SelfTrainingSettings`)."""
    arm = settings.self_training
    changes: dict[str, Any] = {"enabled": True, "systems": (arm["system"],)}
    changes.update({key: arm[key] for key in ("pool", "rounds", "steps_scale") if arm[key] is not None})
    if "steps_scale" in changes:
        changes["steps_scale"] = float(changes["steps_scale"])
    return dataclasses.replace(recipe.self_training, **changes)


def recipe_lm(recipe: SimAdapterRecipe, dataset: Any) -> LMSetup | None:
    """The recipe's n-gram LM (the demo's ``lm`` section), built or reused in ``<output_dir>/lm`` as its LM rows
    build it (the text leaves out the target's dev and test sentences), as the teachers label with it; None when the
    recipe has none.

    Args:
        dataset: the prepared ``DatasetDict``.
    """
    section = getattr(recipe, "lm", None)
    if section is None or not section.enabled:
        return None
    from ..lm_rows import TUNE_SPLIT, build_recipe_lm

    target = recipe.target
    held = [select_languages(dataset[name], [target], name, "lm") for name in (TUNE_SPLIT, recipe.evaluation.split)]
    folder, _ = build_recipe_lm(recipe, section, {text for part in held for text in part["text"]},
                                progress=recipe.progress)
    return LMSetup(folder, section.alphas, section.betas, section.beam_size)


class SelfTrainingArm:
    """Runs (or reuses) the arm's rounds at each budget and describes its point (module docstring).

    Args:
        recipe: the recipe as its stages were trained (its ``self_training`` and ``lm`` sections; not retargeted,
            so the students of the recipe's own system are built as its ``self_training`` section builds them).
        settings: the curve's settings (``self_training``: :data:`.settings.ARM_DEFAULTS`).
        prepared: the prepared data folder.
        dataset: the prepared ``DatasetDict`` (the LM's text leaves out the target's dev and test sentences).
    """

    def __init__(self, recipe: SimAdapterRecipe, settings: CurveSettings, prepared: Path, dataset: Any) -> None:
        arm = settings.self_training
        self.recipe = recipe
        self.system: str = arm["system"]
        self.method = ARM_SYSTEMS[self.system]
        self.budgets: list[str] | None = arm["budgets"]
        self.reuse_recipe: bool = arm["reuse_recipe_rounds"]
        self.label = arm_label(self.system)
        self.settings = arm_settings(recipe, settings)
        pool = ensure_pool(recipe, self.settings, prepared)
        lm = recipe_lm(recipe, dataset) if self.settings.use_lm else None
        self.runner = SelfTrainingRunner(recipe, self.settings, prepared, pool, lm)
        log(f"curve self-training arm: {self.label}, pool {self.runner.pool_seconds / 60:.1f} min ({pool}), at most "
            f"{self.settings.rounds} round(s), students {self.settings.steps_scale:g}x their run's steps"
            + (f", labelled with the LM {lm.folder}" if lm else ""))

    def covers(self, budget: str) -> bool:
        """Whether the arm has a point at ``budget``."""
        return self.budgets is None or budget in self.budgets

    def recipe_teacher(self, budget: Budget) -> Path | None:
        """The recipe's trained system, when the arm may start from it at ``budget`` (``reuse_recipe_rounds``, the
        budget is the recipe's ``target_subset`` and the stage trained on exactly that budget's rows), else None."""
        subset = self.recipe.target_subset
        if not self.reuse_recipe or not subset or str(SubsetSize.parse(subset)) != str(SubsetSize.parse(budget.name)):
            return None
        stage = self.recipe.output_dir / self.system
        files = (stage / "stage_summary.json", stage / "stage_spec.json")
        if not all(f.is_file() for f in files) or not (stage / "model").is_dir():
            return None
        summary, spec = (json.loads(f.read_text()) for f in files)
        data = spec["data"]
        same = (list(data.get("train_languages") or []) == [self.recipe.target] and bool(data.get("train_subset"))
                and str(SubsetSize.parse(data["train_subset"])) == str(SubsetSize.parse(budget.name))
                and int(data.get("subset_seed", 0)) == self.recipe.seed and summary["train_rows"] == budget.clips)
        if not same:
            log(f"curve self-training arm: {stage} did not train on the {budget.name} rows of the curve; the arm "
                "self-trains the curve's own run there")
            return None
        return stage / "model"

    def run(self, budget: Budget, chosen: CurveRun, folder: Path,
            evaluate: Callable[[Path, Path], dict[str, Any]]) -> tuple[Path, Path, dict[str, Any]]:
        """The rounds at ``budget`` (teacher: the recipe's system, :meth:`recipe_teacher`, else ``chosen``, the
        system's run the curve chose on dev), written in ``folder/<system>/<teacher>``.

        Returns:
            ``(the self-trained model, its evaluation cache folder, the point's info)``; ``evaluate(model, cache)``
            evaluates a teacher from the recipe on the test set (the curve's own teacher is already a point).
        """
        trained, reused = len(self.runner.trained_rounds), len(self.runner.reused_rounds)
        teacher = self.recipe_teacher(budget)
        if teacher is not None:
            tag, system_spec = RECIPE_TEACHER, None
            reuse = [self.recipe.output_dir / FOLDER / self.system]
            log(f"curve self-training arm at {budget.name}: the recipe's {self.system} is the teacher (its finished "
                f"rounds in {reuse[0]} are reused where they match)")
        else:
            teacher, tag, system_spec, reuse = chosen.model_dir, chosen.folder.name, chosen.spec, []
        out = folder / self.system / tag
        run = self.runner.run_system(self.system, teacher=teacher, folder=out, system_spec=system_spec, reuse=reuse)
        teacher_summary = json.loads((teacher.parent / "stage_summary.json").read_text())
        if tag == RECIPE_TEACHER:
            teacher_cer = evaluate(teacher, out / "teacher")["cer"]
        else:
            teacher_cer = None  # the curve's point of the system at this budget
        info = self._info(run, tag, teacher_summary, teacher_cer)
        info["self_training"].update(trained_rounds=len(self.runner.trained_rounds) - trained,
                                     reused_rounds=len(self.runner.reused_rounds) - reused)
        return run.model_dir, out, info

    def _info(self, run: SystemRun, tag: str, teacher_summary: dict[str, Any],
              teacher_cer: float | None) -> dict[str, Any]:
        model = run.model_dir
        summary = json.loads((model.parent / "stage_summary.json").read_text())
        trained = trained_parameters([summary["trainable"]])
        first_student = Path(run.rounds[0].student).parent
        steps = int(json.loads((first_student / "stage_spec.json").read_text())["training"]["max_steps"])
        rounds = []
        for r in run.rounds:
            quality = r.labels.get("quality") or {}
            rounds.append({
                "round": r.round, "dev_cer": r.dev_cer, "improved": r.improved, "rows": r.labels["rows"],
                "kept": r.labels["kept"], "kept_minutes": 60 * r.labels["kept_hours"],
                "label_cer_all": quality.get("cer_all"), "label_cer_kept": quality.get("cer_kept"),
                "alpha": r.alpha, "beta": r.beta, "train_seconds": r.seconds.get("train", 0.0),
                "label_seconds": r.seconds.get("label", 0.0), "student": r.student,
            })
        round_seconds = sum(r["train_seconds"] for r in rounds)
        label_seconds = sum(r["label_seconds"] for r in rounds)
        dev = run.rounds[run.chosen - 1].dev_cer if run.chosen else run.teacher_dev_cer
        return {
            "system": self.label,
            "setting": f"{tag}, round {run.chosen}",
            "steps": steps,
            "dev_cer": dev,
            "trainable_params": trained["trainable"],
            "trainable_share": trained["trainable_share"],
            "train_seconds": float(teacher_summary["train_seconds"]) + round_seconds,
            "grid_seconds": float(teacher_summary["train_seconds"]) + round_seconds + label_seconds,
            "run": str(model),
            "self_training": {
                "system": self.system, "teacher": str(Path(run.rounds[0].teacher)), "teacher_setting": tag,
                "teacher_dev_cer": run.teacher_dev_cer, "teacher_cer": teacher_cer, "chosen_round": run.chosen,
                "rounds": rounds, "pool_minutes": self.runner.pool_seconds / 60,
                "settings": self.settings.to_dict(),
            },
        }
