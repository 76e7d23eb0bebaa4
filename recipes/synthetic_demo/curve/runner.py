"""How much target audio does each method need? The transfer curve of a SimAdapter recipe.

``adaptspeech recipe RECIPE_DIR --curve 1min,3min,10min,30min`` reuses the recipe's ``base`` and
``source_adapters`` stages in its ``output_dir`` (training them first when they are missing, e.g. for another
target: ``target=it sources="[cs, pl, sl, sk, es]"``), then for each budget of target training audio trains and
evaluates on the target's test set:

- ``zero_shot``: the base, no target training (one value, drawn at every budget);
- ``scratch``, ``finetune``: the recipe's baselines (``stage_scratch.yaml``, ``stage_finetune.yaml``);
- ``adapter``: the target adapter alone (``stage_target_adapter.yaml``, on the source-adapter model);
- ``simadapter``: fusion over the source adapters and *that budget's* chosen target adapter (``stage_fusion.yaml``);
- ``self_training`` (only when named): the self-training arm (:mod:`.self_training_arm`), the budget's chosen run of
  ``curve.self_training.system`` as the teacher of the recipe's noisy-student rounds on its untranscribed pool.

Budgets are nested (:func:`~adaptspeech.data.subsets.nested_subsets`): the 1-minute clips are inside the 3-minute
ones, and so on; every budget leaves out the test speakers, as a stage's ``data.train_subset`` does (those are the
rows each stage trains on; the runner checks the count). A budget larger than the target's training audio takes all
of it; the table and the plot show the minutes actually used.

Steps scale with the audio (:func:`.settings.scaled_steps`: the stage file's ``max_steps``
times ``(budget / target_subset) ** 0.5`` by default, clipped); warm-up steps keep their share. Settings are chosen on
dev per budget: each method trains once per point of its grid (``curve.grid.<method>``: ``learning_rate``,
``steps_scale``; for ``simadapter`` also ``guide_weight``, ``temperature``, ``train_target_adapter``) and the run with
the lowest dev CER (the stage's final dev evaluation) is evaluated on the test set; SimAdapter fuses the target
adapter chosen for its budget.

Outputs in ``<output_dir>/curve``: ``curve_results.md`` / ``curve_results.json`` and ``transfer_curve.png``
(``report.py``), rewritten after every budget, and one folder per (budget, method,
setting) run. A finished run whose spec and starting model are unchanged is reused, not retrained, and so is its
cached test evaluation (resumable).
"""

from __future__ import annotations

import json
import shutil
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from adaptspeech.data.prepared_data import load_prepared, select_languages
from adaptspeech.data.subsets import SubsetSize, nested_subsets, speakers
from adaptspeech.metrics.significance import utterance_edits
from adaptspeech.progress import log
from adaptspeech.recipes.engine import set_threads
from adaptspeech.recipes.simadapter.evaluation import fusion_heatmap, resolve_device, trained_parameters
from adaptspeech.recipes.simadapter.spec import SimAdapterRecipe
from adaptspeech.recipes.simadapter.stages import (
    PlannedStage,
    prepare_data,
    recipe_plan,
    stage_spec,
    train_recipe_stage,
)
from adaptspeech.saved_model import model_fingerprint
from adaptspeech.training.stage import StageSpec, run_stage
from adaptspeech.training.training_settings import TrainingSettings

from .report import CurvePoint, write_curve_results
from .self_training_arm import SelfTrainingArm, arm_settings
from .settings import (
    ARM_SYSTEMS,
    METHOD_STAGES,
    SELF_TRAINING,
    CurveError,
    CurveSettings,
    grid_points,
    scaled_steps,
    setting_tag,
)

#: the trained methods in the order they run within a budget (SimAdapter needs the budget's chosen adapter)
TRAINED_METHODS = ("scratch", "finetune", "adapter", "simadapter")


def ensure_shared_stages(recipe: SimAdapterRecipe, prepared: Path, methods: Sequence[str], progress: bool) -> None:
    """Train the recipe's ``base`` and ``source_adapters`` stages the methods need, unless a finished run of the same
    languages is in ``output_dir`` (reused)."""
    needed = set()
    if set(methods) - {"scratch"}:
        needed.add("base")
    if {"adapter", "simadapter"} & set(methods):
        needed.add("source_adapters")
    out = recipe.output_dir
    for stage in recipe_plan(recipe):
        if stage.name not in needed:
            continue
        folder = out / stage.name
        if (folder / "stage_summary.json").is_file() and (folder / "model").is_dir():
            trained = json.loads((folder / "stage_spec.json").read_text())["data"]["train_languages"]
            if sorted(trained) != sorted(stage.languages):
                raise CurveError(
                    f"{folder} was trained on {trained}, the recipe's sources are {list(stage.languages)}: "
                    "give the curve its own output_dir=..."
                )
            log(f"curve: reusing stage {stage.name} from {folder}")
            continue
        train_recipe_stage(recipe, stage, prepared, progress)


@dataclass(frozen=True)
class Budget:
    """One point of the curve: a nested subset of the target's training rows."""

    name: str
    minutes: float
    clips: int
    speakers: int
    speakers_in_dev: int
    """Speakers of the subset who also speak in the dev set (the synthetic corpus's dev set shares the training
    voices by design; Common Voice's does not)."""


def nested_budgets(recipe: SimAdapterRecipe, dataset: Any, budgets: Sequence[str]) -> list[Budget]:
    """The nested target subsets a stage with ``data.train_subset=<budget>`` trains on (test speakers left out)."""
    target = recipe.target
    columns = ["language", "client_id", "duration"]
    train = select_languages(dataset["train"].select_columns(columns), [target], "train", "curve")
    held = speakers(dataset["test"]) if "test" in dataset else set()
    dev = speakers(dataset["dev"]) if "dev" in dataset else set()
    subsets = nested_subsets(train, list(budgets), seed=recipe.seed, exclude_speakers=held)
    out = []
    for name, part in subsets.items():
        part_speakers = speakers(part)
        out.append(
            Budget(name, float(sum(part["duration"])) / 60, len(part), len(part_speakers), len(part_speakers & dev))
        )
    return out


@dataclass
class CurveRun:
    """A finished training run of one (budget, method, setting)."""

    method: str
    tag: str
    setting: dict[str, Any]
    folder: Path
    steps: int
    summary: dict[str, Any]
    dev_cer: float
    spec: dict[str, Any] = field(default_factory=dict)
    """The stage spec it trained with (a self-training arm's students are built from it)."""

    @property
    def model_dir(self) -> Path:
        return self.folder / "model"


class CurveRunner:
    """Trains (or reuses) the grid runs of a curve and evaluates the chosen ones on the target test set."""

    def __init__(
        self, recipe: SimAdapterRecipe, settings: CurveSettings, prepared: Path, dataset: Any, processor: Any
    ) -> None:
        self.recipe, self.settings, self.prepared, self.processor = recipe, settings, prepared, processor
        self.folder = recipe.output_dir / settings.folder
        self.progress = recipe.progress
        evaluation = recipe.evaluation
        self.split = evaluation.split
        self.method = evaluation.method
        self.options = dict(evaluation.options)
        self.batch_size = evaluation.batch_size
        self.device = resolve_device(recipe)
        self.test = select_languages(dataset[self.split], [recipe.target], self.split, "curve evaluation")
        anchor = settings.anchor_budget or recipe.target_subset
        if not anchor:
            raise CurveError(
                "curve.anchor_budget: the recipe has no target_subset; name the budget its stage files were tuned for"
            )
        self.anchor = SubsetSize.parse(anchor)
        self.runs_done = 0
        self.runs_total = 0
        self.steps_left = 0
        self.trained = [0, 0.0]  # steps trained by this call, wall seconds they took (for the ETA)

    # ---- planning ------------------------------------------------------------------------------------------

    def planned_steps(self, method: str, budget: Budget, setting: dict[str, Any]) -> int:
        """The steps of one grid run (:func:`.settings.scaled_steps`)."""
        stage, group, _ = METHOD_STAGES[method]
        stage_steps = int((self.recipe.stage_settings(group, stage).get("training") or {}).get("max_steps") or 0)
        if stage_steps <= 0:
            raise CurveError(f"{stage}.training.max_steps: the curve scales the stage's max_steps; set it")
        scale = float(setting.get("steps_scale", 1.0))
        return scaled_steps(self.settings, stage_steps, budget.minutes * 60, budget.clips, self.anchor, scale)

    def plan(self, budgets: Sequence[Budget]) -> list[dict[str, Any]]:
        """Every grid run (budget, method, setting, steps) in the order they run; counts them for the progress
        lines and the ETA."""
        planned = [
            {"budget": b.name, "method": m, "setting": setting_tag(s), "steps": self.planned_steps(m, b, s)}
            for b in budgets
            for m in TRAINED_METHODS
            if m in self.settings.methods
            for s in grid_points(self.settings, m)
        ]
        self.runs_total, self.steps_left = len(planned), sum(run["steps"] for run in planned)
        log(f"curve plan: {self.runs_total} training runs, {self.steps_left} steps in all")
        return planned

    # ---- training ------------------------------------------------------------------------------------------

    def _spec(self, method: str, budget: Budget, setting: dict[str, Any], start: Path | None) -> dict[str, Any]:
        stage, group, previous = METHOD_STAGES[method]
        target = self.recipe.target
        spec = stage_spec(self.recipe, PlannedStage(stage, group, [target], previous, budget.name), self.prepared)
        run = setting_tag(setting)
        if method == "simadapter" and start is not None:
            run = f"{start.parent.name}+{run}"  # the adapter it fuses
        spec["output_dir"] = str(self.folder / _folder_name(budget.name) / method / run)
        spec["data"].update(train_subset=budget.name, subset_seed=self.recipe.seed)
        if start is not None:
            spec["model"]["path"] = str(start)
        training = spec["training"]
        steps = self.planned_steps(method, budget, setting)
        if "warmup_steps" in training:
            training["warmup_steps"] = round(int(training["warmup_steps"]) * steps / int(training["max_steps"]))
        training.update(
            max_steps=steps,
            save_strategy="no",
            eval_strategy="no",  # the stage's final dev evaluation chooses the setting
            logging_steps=max(1, min(int(TrainingSettings.read(training).logging_steps), steps // 10)),
        )
        if "learning_rate" in setting:
            training["learning_rate"] = float(setting["learning_rate"])
        if method == "simadapter":
            fusion = spec["model"].setdefault("fusion", {})
            for key in ("guide_weight", "temperature"):
                if key in setting:
                    fusion[key] = float(setting[key])
            if setting.get("train_target_adapter"):
                spec["model"].setdefault("trainable", {})["adapters"] = [target]
        StageSpec.from_dict(spec)
        return spec

    def train(self, method: str, budget: Budget, setting: dict[str, Any], start: Path | None) -> CurveRun:
        """Train one grid run, or reuse it when its spec and starting model match the finished run's record."""
        spec = self._spec(method, budget, setting, start)
        steps = int(spec["training"]["max_steps"])
        folder = Path(spec["output_dir"])
        record = json.loads(json.dumps({"spec": spec, "start": model_fingerprint(start) if start else None}))
        self.runs_done += 1
        where = f"curve run {self.runs_done}/{self.runs_total}: {budget.name} {method} {setting_tag(setting)}"
        marker = folder / "curve_run.json"
        reused = (
            (folder / "stage_summary.json").is_file()
            and (folder / "model").is_dir()
            and marker.is_file()
            and json.loads(marker.read_text()) == record
        )
        if reused:
            log(f"{where}: done before, reused")
        else:
            for stale in ("stage_summary.json", "curve_run.json", "test_eval.json"):
                (folder / stale).unlink(missing_ok=True)
            shutil.rmtree(folder / "checkpoints", ignore_errors=True)
            log(f"{where}: {steps} steps on {budget.minutes:.2f} min ({budget.clips} clips)")
            started = time.perf_counter()
            run_stage(spec, progress=self.progress, overwrite=True)  # a grid run of other settings: retrained
            marker.write_text(json.dumps(record, indent=1) + "\n")
            self.trained[0] += steps
            self.trained[1] += time.perf_counter() - started
        self.steps_left -= steps
        summary = json.loads((folder / "stage_summary.json").read_text())
        if summary["train_rows"] != budget.clips:
            raise CurveError(
                f"{folder}: trained on {summary['train_rows']} rows, the nested {budget.name} subset has {budget.clips}"
            )
        dev_cer = float(summary[spec["data"].get("eval_split", "dev")]["overall"]["cer"])
        if not reused:
            eta = self.steps_left * self.trained[1] / max(self.trained[0], 1)
            log(
                f"{where}: {summary['train_seconds']:.0f} s, dev CER {100 * dev_cer:.2f}%; "
                f"{self.steps_left} steps left, about {eta / 60:.0f} min at this call's pace"
            )
        return CurveRun(method, setting_tag(setting), setting, folder, steps, summary, dev_cer, spec)

    def train_grid(self, method: str, budget: Budget, start: Path | None) -> list[CurveRun]:
        return [self.train(method, budget, setting, start) for setting in grid_points(self.settings, method)]

    # ---- evaluation ----------------------------------------------------------------------------------------

    def evaluate(self, model_dir: Path, cache_dir: Path, fusion: bool = False) -> dict[str, Any]:
        """Test-set CER, WER and hypotheses of a saved model (with ``fusion``: its mean SimAdapter attention), cached
        in ``cache_dir/test_eval.json`` for as long as the model and the decoding settings stay the same."""
        from adaptspeech.evaluation import evaluate_dataset
        from adaptspeech.modeling import AdaptSpeechForCTC

        key = {"model": model_fingerprint(model_dir), "method": self.method, "options": self.options,
               "split": self.split, "rows": len(self.test)}  # fmt: skip
        key = json.loads(json.dumps(key))
        cache = cache_dir / "test_eval.json"
        if cache.is_file():
            cached = json.loads(cache.read_text())
            if cached["key"] == key and (not fusion or "fusion" in cached):
                return cached
        model = AdaptSpeechForCTC.from_pretrained(model_dir).to(self.device)
        metrics = evaluate_dataset(model, self.test, self.processor, method=self.method, batch_size=self.batch_size,
                                   progress=self.progress, return_hypotheses=True, **self.options)  # fmt: skip
        result = {"key": key, "cer": metrics["overall"]["cer"], "wer": metrics["overall"]["wer"],
                  "hypotheses": metrics["hypotheses"]}  # fmt: skip
        if fusion:
            heatmap = cache_dir / "fusion_heatmap.png"
            result["fusion"] = fusion_heatmap(model, self.test, self.processor, heatmap, self.batch_size)
        cache_dir.mkdir(parents=True, exist_ok=True)
        cache.write_text(json.dumps(result, default=float) + "\n")
        return result


def arm_plan(runner: CurveRunner, recipe: SimAdapterRecipe, settings: CurveSettings,
             budgets: Sequence[Budget]) -> list[dict[str, Any]]:
    """The self-training arm's rounds in the plan: per budget with a point, at most ``rounds`` students of
    ``steps_scale`` times its system's steps at that budget (the first grid point's; the rounds stop early when dev
    CER stops improving, and the recipe's reusable rounds are not counted out)."""
    arm = arm_settings(recipe, settings)
    method = ARM_SYSTEMS[settings.self_training["system"]]
    chosen = settings.self_training["budgets"]
    planned = []
    for budget in budgets:
        if chosen is None or budget.name in chosen:
            steps = max(1, round(runner.planned_steps(method, budget, grid_points(settings, method)[0])
                                 * arm.steps_scale))
            planned.append({"budget": budget.name, "method": SELF_TRAINING, "setting": f"<= {arm.rounds} rounds",
                            "steps": arm.rounds * steps})
    return planned


def _folder_name(budget: str) -> str:
    return "".join(c if c.isalnum() or c in ".-" else "_" for c in budget)


def _chosen(runs: list[CurveRun]) -> CurveRun:
    """The run with the lowest dev CER (ties and NaN: the first in grid order)."""
    return min(runs, key=lambda r: (np.nan_to_num(r.dev_cer, nan=np.inf), runs.index(r)))


def _grid_records(budget: Budget, runs: list[CurveRun], chosen: CurveRun) -> list[dict[str, Any]]:
    return [
        {
            "budget": budget.name,
            "method": r.method,
            "setting": r.tag,
            "steps": r.steps,
            "dev_cer": r.dev_cer,
            "train_seconds": r.summary["train_seconds"],
            "chosen": r is chosen,
            "folder": str(r.folder),
        }
        for r in runs
    ]


@dataclass
class _Collected:
    """What the budgets have produced so far (the report is rewritten from it after every budget)."""

    points: list[CurvePoint]
    grid_runs: list[dict[str, Any]]
    fusion: dict[str, dict[str, Any]]


def _run_budget(
    runner: CurveRunner, budget: Budget, out: Path, ref_units: np.ndarray, collected: _Collected,
    zero_shot: dict[str, Any] | None, arm: SelfTrainingArm | None = None,
) -> None:  # fmt: skip
    """Train every method's grid at ``budget``, evaluate each method's dev choice on the test set, collect them; then
    the self-training arm's point (``arm``), from the dev choice of its system's method."""
    references = list(runner.test["text"])

    def point(method: str, evaluation: dict[str, Any], info: dict[str, Any]) -> CurvePoint:
        edits, _ = utterance_edits(evaluation["hypotheses"], references, "char")
        return CurvePoint(budget.name, budget.minutes, budget.clips, method, edits, ref_units, evaluation["wer"], info)

    if zero_shot is not None:
        info = {"setting": None, "steps": 0, "dev_cer": None, "trainable_params": 0, "train_seconds": 0.0}
        collected.points.append(point("zero_shot", zero_shot, info))
    adapter: CurveRun | None = None
    chosen: dict[str, tuple[CurveRun, CurvePoint]] = {}
    for method in TRAINED_METHODS:
        if method not in runner.settings.methods:
            continue
        previous = METHOD_STAGES[method][2]
        start = (
            adapter.model_dir if method == "simadapter" and adapter else out / previous / "model" if previous else None
        )
        runs = runner.train_grid(method, budget, start)
        best = _chosen(runs)
        collected.grid_runs += _grid_records(budget, runs, best)
        evaluation = runner.evaluate(best.model_dir, best.folder, fusion=method == "simadapter")
        stages = [adapter, best] if method == "simadapter" and adapter else [best]  # SimAdapter counts its adapter
        trained = trained_parameters([r.summary["trainable"] for r in stages])
        info = {
            "setting": best.tag,
            "settings": best.setting,
            "steps": best.steps,
            "dev_cer": best.dev_cer,
            "trainable_params": trained["trainable"],
            "trainable_share": trained["trainable_share"],
            "train_seconds": sum(r.summary["train_seconds"] for r in stages),
            "grid_seconds": sum(r.summary["train_seconds"] for r in runs),
            "run": str(best.folder),
        }
        collected.points.append(point(method, evaluation, info))
        chosen[method] = (best, collected.points[-1])
        if method == "adapter":
            adapter = best
        if "fusion" in evaluation:
            collected.fusion[budget.name] = evaluation["fusion"]
    if arm is not None and arm.covers(budget.name):
        best, teacher_point = chosen[arm.method]
        folder = runner.folder / _folder_name(budget.name) / SELF_TRAINING
        model, cache, info = arm.run(budget, best, folder, runner.evaluate)
        if info["self_training"]["teacher_cer"] is None:
            info["self_training"]["teacher_cer"] = teacher_point.cer
        collected.points.append(point(SELF_TRAINING, runner.evaluate(model, cache), info))


def run_curve(recipe: SimAdapterRecipe, settings: CurveSettings, plan_only: bool = False) -> dict[str, Any]:
    """Train and evaluate every method at every budget; write the table and the plot (module docstring).

    Args:
        recipe: from :func:`~adaptspeech.recipes.engine.load_recipe`; its ``target`` / ``sources`` carry over to the
            language-specific stage settings, stage overrides included (:meth:`SimAdapterRecipe.retargeted`).
        settings: from :func:`.settings.load_curve_settings`.
        plan_only: prepare the data (a synthetic corpus is built) and return ``{"budgets", "plan", "folder"}``
            (every grid run and its steps) without training anything.

    Returns:
        The content of ``curve_results.json`` (or the plan).
    """
    start_time = time.perf_counter()
    set_threads(recipe)
    trained_recipe, recipe = recipe, recipe.retargeted()
    for method in ("scratch", "finetune"):
        if method in settings.methods and method not in recipe.baselines:
            raise CurveError(f"curve.methods: {method} needs the recipe's baselines.{method} stage file")
    out = recipe.output_dir
    out.mkdir(parents=True, exist_ok=True)
    prepared = prepare_data(recipe)
    if not plan_only:
        ensure_shared_stages(recipe, prepared, settings.methods, recipe.progress)
    dataset, processor = load_prepared(prepared)
    budgets = nested_budgets(recipe, dataset, settings.budgets)
    for budget in budgets:
        log(f"curve budget {budget.name}: {budget.minutes:.2f} min, {budget.clips} clips, {budget.speakers} speakers")
    runner = CurveRunner(recipe, settings, prepared, dataset, processor)
    plan = runner.plan(budgets)
    if SELF_TRAINING in settings.methods:
        plan += arm_plan(runner, trained_recipe, settings, budgets)
    if plan_only:
        return {"budgets": [asdict(b) for b in budgets], "plan": plan, "folder": str(runner.folder)}
    references = list(runner.test["text"])
    _, ref_units = utterance_edits(references, references, "char")
    zero_shot = None
    if "zero_shot" in settings.methods:
        zero_shot = runner.evaluate(out / "base" / "model", runner.folder / "zero_shot")
    sources, target = list(recipe.sources), recipe.target
    title = (
        f"Target {target}: {runner.split} CER vs target training audio ({runner.method}); sources {', '.join(sources)}"
    )
    extra = {
        "target": target,
        "sources": sources,
        "budgets": [asdict(b) for b in budgets],
        "settings": asdict(settings),
        "anchor_budget": str(runner.anchor),
        "decoding": {"method": runner.method, "options": runner.options},
        "device": str(runner.device),
        "folder": str(runner.folder),
    }
    arm = None
    if SELF_TRAINING in settings.methods:
        arm = SelfTrainingArm(trained_recipe, settings, prepared, dataset)
        extra["self_training_arm"] = {"label": arm.label, "pool_minutes": arm.runner.pool_seconds / 60,
                                      "settings": arm.settings.to_dict()}
    collected = _Collected([], [], {})
    result: dict[str, Any] = {}
    for budget in budgets:
        _run_budget(runner, budget, out, ref_units, collected, zero_shot, arm)
        extra["total_seconds"] = time.perf_counter() - start_time
        result = write_curve_results(runner.folder, collected.points, collected.grid_runs, collected.fusion, sources,
                                     title, extra, settings.bootstrap_samples)  # fmt: skip
        log(f"curve: {budget.name} done ({extra['total_seconds'] / 60:.1f} min so far) -> "
             f"{runner.folder / 'curve_results.md'}")  # fmt: skip
    return result
