"""The SimAdapter protocol as one recipe, with its baselines on the same target data.

Stages (each a YAML file beside ``recipe.yaml``, each overridable as ``<stage>.<section>.<key>=value``):

1. ``base``: a multilingual encoder + CTC head trained on the source languages (or a pretrained checkpoint:
   ``base.model.init=backbone``, ``base.model.path=facebook/wav2vec2-xls-r-300m``);
2. ``source_adapters``: one adapter per source language, the base frozen (all trained in one run: each utterance
   goes through its own language's adapter);
3. ``target_adapter``: the target language's adapter alone on the (small) target training set, then ``fusion``:
   SimAdapter over the source adapters and the target adapter, everything else frozen.

Baselines on the same target data: ``finetune`` (the whole base model), ``scratch`` (the same architecture from
random initialisation) and the target adapter alone (stage 3a). Zero-shot base is reported too.

Outputs in ``output_dir``: ``results.md`` / ``results.json`` (CER / WER per system on the target test set,
trainable parameters, training time -- the SimAdapter row counts stage 3a's target adapter and stage 3b together;
the source languages' test CER of the base; with the recipe's ``lm`` section, rows ``<system> + 4-gram LM``, see
:mod:`.demo_lm`), ``fusion_heatmap.png`` (the mean SimAdapter attention per layer and
fused language on the target test set) and ``training_curves.png``.

The test-set evaluation runs on ``evaluation.device`` (``auto``: the device the stages trained on, see
:func:`resolve_device`), in batches of ``evaluation.batch_size`` (16). :func:`run_recipe` is the sequence
:func:`prepare_data` -> :func:`train_recipe_stage` for each entry of :func:`recipe_plan` -> :func:`evaluate_recipe`;
the dry run (:mod:`adaptspeech.recipes.dry_run`) runs the same steps one process each.
"""

from __future__ import annotations

import copy
import json
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ..metrics.significance import paired_bootstrap, utterance_edits
from ..training.stage import (
    StageConfigError,
    StageSpec,
    apply_overrides,
    load_prepared,
    load_yaml,
    run_stage,
    select_languages,
)
from .languages import check_stage_languages, retarget_stages

RECIPE_KEYS = (
    "name",
    "output_dir",
    "threads",
    "seed",
    "corpus",
    "prepare",
    "sources",
    "target",
    "target_subset",
    "stages",
    "baselines",
    "evaluation",
    "progress",
    "lm",
)
STAGE_NAMES = ("base", "source_adapters", "target_adapter", "fusion")
ADAPTER_ALONE = "target adapter alone"
#: results.md column: CER difference to the adapter alone with its 95% paired-bootstrap interval (points)
VS_ADAPTER_COLUMN = "CER - adapter alone, 95% CI"
BASELINE_NAMES = ("finetune", "scratch")
#: the systems trained on the target, in table order, and their stages
TARGET_SYSTEMS = (
    ("from scratch", "scratch"),
    ("full fine-tuning of the base", "finetune"),
    (ADAPTER_ALONE, "target_adapter"),
    ("SimAdapter fusion (on the target adapter)", "fusion"),
)
#: settings of the recipe's ``evaluation`` section
EVALUATION_KEYS = ("split", "method", "options", "batch_size", "device")


class RecipeError(StageConfigError):
    """A recipe that does not fit; the message names the setting."""


def load_recipe(path: str | os.PathLike, overrides: list[str] | None = None) -> dict[str, Any]:
    """Read ``recipe.yaml`` and its stage files into one dict, then apply ``a.b.c=value`` overrides."""
    path = Path(path)
    if path.is_dir():
        path = path / "recipe.yaml"
    recipe = load_yaml(path)
    recipe["_dir"] = str(path.parent)
    for group in ("stages", "baselines"):
        resolved = {}
        for name, ref in (recipe.get(group) or {}).items():
            resolved[name] = load_yaml(path.parent / ref) if isinstance(ref, str) else dict(ref or {})
        recipe[group] = resolved
    # overrides address stages by name directly: base.training.max_steps=100
    flat_overrides, stage_overrides = [], []
    for text in overrides or []:
        head = text.split("=", 1)[0].split(".", 1)[0]
        (stage_overrides if head in STAGE_NAMES + BASELINE_NAMES else flat_overrides).append(text)
    recipe = apply_overrides(recipe, flat_overrides)
    if recipe.get("sources") and recipe.get("target") and recipe.get("stages"):
        recipe = retarget_stages(recipe)  # the stage files' languages follow sources= / target=
    for text in stage_overrides:
        head, rest = text.split(".", 1)
        group = "stages" if head in STAGE_NAMES else "baselines"
        if head not in recipe[group]:
            raise RecipeError(f"override {text!r}: the recipe has no stage {head!r}")
        recipe[group][head] = apply_overrides(recipe[group][head], [rest])
    _check_recipe(recipe)
    try:
        check_stage_languages(recipe)
    except StageConfigError as err:
        raise RecipeError(str(err)) from None
    return recipe


def _check_recipe(recipe: dict[str, Any]) -> None:
    unknown = sorted(set(recipe) - set(RECIPE_KEYS) - {"_dir"})
    if unknown:
        raise RecipeError(f"recipe: unknown setting(s) {', '.join(unknown)}; allowed: {', '.join(RECIPE_KEYS)}")
    for key in ("output_dir", "sources", "target", "corpus"):
        if not recipe.get(key):
            raise RecipeError(f"recipe: missing required setting {key!r}")
    missing = [s for s in STAGE_NAMES if s not in recipe.get("stages", {})]
    if missing:
        raise RecipeError(f"recipe.stages: missing stage(s) {missing}; a recipe runs {', '.join(STAGE_NAMES)}")
    unknown_baselines = sorted(set(recipe.get("baselines", {})) - set(BASELINE_NAMES))
    if unknown_baselines:
        raise RecipeError(f"recipe.baselines: unknown {unknown_baselines}; allowed: {', '.join(BASELINE_NAMES)}")
    unknown_evaluation = sorted(set(recipe.get("evaluation") or {}) - set(EVALUATION_KEYS))
    if unknown_evaluation:
        raise RecipeError(
            f"recipe.evaluation: unknown setting(s) {', '.join(unknown_evaluation)}; "
            f"allowed: {', '.join(EVALUATION_KEYS)}"
        )
    if recipe["target"] in recipe["sources"]:
        raise RecipeError(f"recipe: target {recipe['target']!r} is also a source language")
    from .demo_lm import lm_settings

    lm_settings(recipe)


def _log(message: str) -> None:
    print(f"[adaptspeech] {message}", flush=True)


def prepare_data(recipe: dict[str, Any]) -> Path:
    """Build (synthetic) or locate (Common Voice) the corpus and prepare it once; returns the prepared folder."""
    from ..data.pipeline import prepare_corpus
    from ..data.synthetic import build_synthetic_corpus

    out = Path(recipe["output_dir"])
    corpus = dict(recipe["corpus"])
    languages = [*recipe["sources"], recipe["target"]]
    kind = corpus.pop("kind", "synthetic")
    prepared_dir = out / "prepared"
    if (prepared_dir / "dataset" / "dataset_dict.json").is_file() and (prepared_dir / "processor").is_dir():
        _log(f"prepared data found in {prepared_dir}: reusing it")
        return prepared_dir
    if kind == "synthetic":
        root = Path(corpus.pop("root", out / "corpus"))
        start = time.perf_counter()
        summary = build_synthetic_corpus(
            root,
            languages=languages,
            clips_per_language=int(corpus.pop("clips_per_language", 1000)),
            seed=int(corpus.pop("seed", recipe.get("seed", 0))),
            num_workers=int(corpus.pop("workers", 2)),
            progress=bool(recipe.get("progress", True)),
            **corpus,
        )
        _log(
            f"synthetic corpus: {summary.get('clips_written', '?')} clips written in "
            f"{time.perf_counter() - start:.0f} s -> {root}"
        )
    elif kind == "common_voice":
        root = corpus.pop("root", None)
        if not root:
            raise RecipeError("corpus.root: the Common Voice release folder (cv-corpus-*/) or a Hub dataset id")
    else:
        raise RecipeError(f"corpus.kind {kind!r} unknown; allowed values: synthetic, common_voice")
    prepare = dict(recipe.get("prepare") or {})
    start = time.perf_counter()
    prepare_corpus(root, languages, prepared_dir, **prepare)
    _log(f"prepared {', '.join(languages)} in {time.perf_counter() - start:.0f} s -> {prepared_dir}")
    return prepared_dir


def _stage_spec(
    recipe: dict[str, Any],
    name: str,
    group: str,
    prepared: Path,
    languages: list[str],
    model_path: Path | None,
    subset: str | None,
) -> dict[str, Any]:
    spec = copy.deepcopy(recipe[group][name])  # callers edit nested sections (training, model.fusion)
    spec["name"] = name
    spec["output_dir"] = str(Path(recipe["output_dir"]) / name)
    spec.setdefault("seed", recipe.get("seed", 0))
    data = dict(spec.get("data") or {})
    data.setdefault("prepared_dir", str(prepared))
    data.setdefault("train_languages", languages)
    if subset:
        data.setdefault("train_subset", subset)
        data.setdefault("subset_seed", recipe.get("seed", 0))
    spec["data"] = data
    model = dict(spec.get("model") or {})
    if model_path is not None and model.get("init", "pretrained") == "pretrained":
        model.setdefault("init", "pretrained")
        model.setdefault("path", str(model_path))
    spec["model"] = model
    return spec


def _trained_parameters(reports: list[dict[str, Any]]) -> dict[str, Any]:
    """Parameters trained across consecutive stages of one model (groups counted once), from their
    ``trainable_parameters()`` reports; share of the last stage's model. No report: nothing trained."""
    if not reports:
        return {"trainable": 0, "trainable_share": 0.0}
    trained: dict[str, int] = {}
    for report in reports:
        for group, counts in report["groups"].items():
            trained[group] = max(trained.get(group, 0), counts["trainable"])
    total = sum(trained.values())
    return {"trainable": total, "trainable_share": total / max(reports[-1]["total"], 1)}


def _compare_with(
    baseline: str, rows: list[dict[str, Any]], edits: dict[str, np.ndarray], ref_units: np.ndarray
) -> dict[str, dict[str, float]]:
    """Paired bootstrap (1,000 resamples of the test utterances) of every system's CER minus ``baseline``'s.

    Adds the markdown column :data:`VS_ADAPTER_COLUMN` to each row (``-0.09 [-0.63, +0.45]``, percentage points,
    95% interval) and returns the figures per system for ``results.json``; empty when the baseline did not run.
    """
    if baseline not in edits:
        return {}
    out: dict[str, dict[str, float]] = {}
    for row in rows:
        if row["system"] == baseline:
            row[VS_ADAPTER_COLUMN] = "-"
            continue
        row[VS_ADAPTER_COLUMN], out[row["system"]] = bootstrap_cell(edits[row["system"]], edits[baseline], ref_units)
    return out


def bootstrap_cell(
    system_edits: np.ndarray, baseline_edits: np.ndarray, ref_units: np.ndarray
) -> tuple[str, dict[str, float]]:
    """Paired bootstrap (1,000 resamples) of a system's CER minus a baseline's on the same utterances: the markdown
    cell (``-0.09 [-0.63, +0.45]``, percentage points, 95% interval) and the figures for ``results.json``.

    Args:
        system_edits, baseline_edits: character edits of each utterance ``[N]``; ref_units: its reference
            characters ``[N]`` (:func:`~adaptspeech.metrics.significance.utterance_edits`).
    """
    result = paired_bootstrap(system_edits, baseline_edits, ref_units)
    cell = f"{100 * result.delta:+.2f} [{100 * result.low:+.2f}, {100 * result.high:+.2f}]"
    return cell, {
        "cer_delta": result.delta,
        "ci_low": result.low,
        "ci_high": result.high,
        "p_not_better": result.p_not_better,
    }


def resolve_device(recipe: dict[str, Any]) -> torch.device:
    """The device the recipe's test-set evaluation runs on.

    ``evaluation.device`` names it (``cpu``, ``cuda``, ``cuda:1``, ``mps``); ``auto`` (the default) picks the device
    the stages trained on: the CPU when every stage sets ``training.use_cpu``, else the best available one (CUDA,
    then MPS, then the CPU), as the Trainer does.
    """
    name = str((recipe.get("evaluation") or {}).get("device") or "auto")
    if name != "auto":
        try:
            device = torch.device(name)
        except RuntimeError as err:
            raise RecipeError(f"evaluation.device {name!r}: {err}") from err
        if device.type == "cuda" and not torch.cuda.is_available():
            raise RecipeError(f"evaluation.device {name!r}: CUDA is not available on this machine")
        return device
    stages = [*recipe.get("stages", {}).values(), *recipe.get("baselines", {}).values()]
    if stages and all((stage.get("training") or {}).get("use_cpu") for stage in stages):
        return torch.device("cpu")
    if torch.cuda.is_available():
        return torch.device("cuda")
    if getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available():
        return torch.device("mps")
    return torch.device("cpu")


def _fusion_heatmap(model: Any, dataset: Any, processor: Any, path: Path, batch_size: int = 16) -> dict[str, Any]:
    """Average the SimAdapter attention over the real frames of ``dataset``; plot it per layer and language.

    Runs on the model's device; the per-layer sums are moved to the CPU in float32 before numpy (a CUDA or a
    bfloat16 tensor has no ``.numpy()``).
    """
    from ..data.collator import DataCollatorCTCWithPadding
    from ..evaluation import feature_type_of_model
    from ..reports import fusion_weight_sums, plot_fusion_heatmap

    collator = DataCollatorCTCWithPadding(processor, feature_type=feature_type_of_model(model))
    model.eval()
    sums: np.ndarray | None = None
    frames = 0.0
    with torch.no_grad():
        for start in range(0, len(dataset), batch_size):
            batch = collator([dataset[i] for i in range(start, min(len(dataset), start + batch_size))])
            batch.pop("labels", None)
            batch = {k: v.to(model.device) for k, v in batch.items()}
            out = model(**batch, output_fusion_weights=True)
            lengths = out.frame_lengths
            mask = torch.arange(out.logits.shape[1], device=lengths.device)[None] < lengths[:, None]
            layer_sums = fusion_weight_sums(out.fusion_weights, mask)
            sums = layer_sums if sums is None else sums + layer_sums
            frames += float(mask.sum())
    weights = sums / max(frames, 1.0)
    fusion = model.config.fusion_settings()
    languages = list(fusion.languages) + (["self"] if fusion.include_self else [])
    layers = sorted(model.adapter_blocks)
    plot_fusion_heatmap(
        weights,
        languages,
        path,
        layers=layers,
        title=f"SimAdapter attention on {fusion.target_language} test (mean over frames)",
        target=fusion.target_language,
    )
    return {"languages": languages, "layers": layers, "weights": weights.round(4).tolist()}


@dataclass(frozen=True)
class PlannedStage:
    """One stage or baseline of a recipe run, in the order they run."""

    name: str
    group: str
    """``"stages"`` or ``"baselines"``: where its settings live in the recipe."""
    languages: list[str]
    """The training languages."""
    previous: str | None
    """The stage whose saved model it starts from (None: it builds its own)."""
    subset: str | None
    """The low-resource budget of its training data (the recipe's ``target_subset`` for target stages)."""


def recipe_plan(recipe: dict[str, Any]) -> list[PlannedStage]:
    """The stages and baselines of ``recipe`` in the order they run."""
    sources, target = list(recipe["sources"]), recipe["target"]
    subset = recipe.get("target_subset")
    plan = [
        PlannedStage("base", "stages", sources, None, None),
        PlannedStage("source_adapters", "stages", sources, "base", None),
        PlannedStage("target_adapter", "stages", [target], "source_adapters", subset),
        PlannedStage("fusion", "stages", [target], "target_adapter", subset),
    ]
    if "finetune" in recipe.get("baselines", {}):
        plan.append(PlannedStage("finetune", "baselines", [target], "base", subset))
    if "scratch" in recipe.get("baselines", {}):
        plan.append(PlannedStage("scratch", "baselines", [target], None, subset))
    return plan


def stage_spec(recipe: dict[str, Any], stage: PlannedStage, prepared: Path) -> dict[str, Any]:
    """The validated stage spec (a dict for :func:`run_stage`) of ``stage`` within ``recipe``."""
    out = Path(recipe["output_dir"])
    model_path = out / stage.previous / "model" if stage.previous else None
    spec = _stage_spec(recipe, stage.name, stage.group, prepared, stage.languages, model_path, stage.subset)
    StageSpec.from_dict(spec)
    return spec


def train_recipe_stage(
    recipe: dict[str, Any], stage: PlannedStage, prepared: Path, progress: bool = True
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Train one stage of the recipe; returns its ``stage_summary.json`` and its log history."""
    spec = stage_spec(recipe, stage, prepared)
    subset = f" ({stage.subset} each)" if stage.subset else ""
    _log(f"stage {stage.name}: training on {', '.join(stage.languages)}{subset}")
    result = run_stage(spec, progress=progress, overwrite=True)  # the recipe's own stage folder: a re-run retrains it
    summary = json.loads((Path(recipe["output_dir"]) / stage.name / "stage_summary.json").read_text())
    _log(f"stage {stage.name}: {result.train_seconds:.0f} s, dev CER {100 * result.eval['overall']['cer']:.2f}%")
    return summary, result.log_history


def load_stage_outputs(recipe: dict[str, Any], name: str) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """``stage_summary.json`` and ``log_history.json`` of a stage that ran before (e.g. skipped by ``--only``)."""
    stage_dir = Path(recipe["output_dir"]) / name
    summary_path = stage_dir / "stage_summary.json"
    if not summary_path.is_file():
        raise RecipeError(f"stage {name!r} was skipped (--only) but has not run before: {summary_path}")
    return json.loads(summary_path.read_text()), json.loads((stage_dir / "log_history.json").read_text())


def run_recipe(recipe: dict[str, Any], only: list[str] | None = None) -> dict[str, Any]:
    """Run every stage and baseline, evaluate on the test sets, write the table and the plots.

    Args:
        recipe: from :func:`load_recipe`.
        only: run only these stages / baselines (the others must have run before: their models are reused);
            ``["lm"]`` trains nothing and re-evaluates, with the ``lm`` section's rows (:mod:`.demo_lm`).
    """
    if recipe.get("threads"):
        torch.set_num_threads(int(recipe["threads"]))
    Path(recipe["output_dir"]).mkdir(parents=True, exist_ok=True)
    total_start = time.perf_counter()
    progress = bool(recipe.get("progress", True))
    prepared = prepare_data(recipe)
    plan = recipe_plan(recipe)
    for stage in plan:
        stage_spec(recipe, stage, prepared)  # validate every stage before the long work
    results: dict[str, Any] = {}
    histories: dict[str, list[dict[str, Any]]] = {}
    for stage in plan:
        if only and stage.name not in only:
            results[stage.name], histories[stage.name] = load_stage_outputs(recipe, stage.name)
        else:
            results[stage.name], histories[stage.name] = train_recipe_stage(recipe, stage, prepared, progress)
    return evaluate_recipe(recipe, prepared, results, histories, total_start=total_start)


def _system_row(results: dict[str, Any], system: str, stage: str | None, metrics: dict[str, Any]) -> dict[str, Any]:
    # SimAdapter needs the target adapter of stage 3a: its row counts both stages' parameters and time.
    stages = [] if stage is None else ["target_adapter", stage] if stage == "fusion" else [stage]
    trainable = _trained_parameters([results[s]["trainable"] for s in stages if s in results])
    return {
        "system": system,
        "cer": metrics["overall"]["cer"],
        "wer": metrics["overall"]["wer"],
        "trainable_params": trainable["trainable"],
        "trainable_share": trainable["trainable_share"],
        "train_seconds": sum(results[s]["train_seconds"] for s in stages if s in results) if stages else None,
    }


def _source_markdown(source_rows: list[dict[str, Any]], source_average: dict[str, float]) -> list[str]:
    lines = [
        "| source language | base CER % | base WER % | base + own adapter CER % |",
        "| --- | --- | --- | --- |",
    ]
    for r in source_rows:
        lines.append(
            f"| {r['language']} | {100 * r['base_cer']:.2f} | {100 * r['base_wer']:.2f} | "
            f"{100 * r['adapter_cer']:.2f} |"
        )
    lines.append(
        f"| **average** | **{100 * source_average['base_cer']:.2f}** | | "
        f"**{100 * source_average['adapter_cer']:.2f}** |"
    )
    return lines


def evaluate_recipe(
    recipe: dict[str, Any],
    prepared: Path,
    results: dict[str, Any],
    histories: dict[str, list[dict[str, Any]]],
    total_start: float | None = None,
) -> dict[str, Any]:
    """Evaluate every trained system on the test sets; write ``results.{md,json}``, the heatmap and the curves.

    Args:
        prepared: the prepared data folder (:func:`prepare_data`).
        results, histories: ``stage_summary.json`` and the log history of every stage, by name.
        total_start: ``time.perf_counter()`` at the start of the run, for the total wall time (None: now).
    """
    from ..evaluation import evaluate_dataset
    from ..modeling import AdaptSpeechForCTC
    from ..reports import TABLE_COLUMNS, plot_training_curves, write_results
    from .demo_lm import VS_NO_LM_COLUMN, LMRows, lm_markdown, lm_rows, lm_settings

    total_start = time.perf_counter() if total_start is None else total_start
    out = Path(recipe["output_dir"])
    progress = bool(recipe.get("progress", True))
    sources, target = list(recipe["sources"]), recipe["target"]
    subset = recipe.get("target_subset")
    dataset, processor = load_prepared(prepared)
    evaluation = dict(recipe.get("evaluation") or {})
    split = evaluation.get("split", "test")
    method = evaluation.get("method", "ctc_greedy")
    options = dict(evaluation.get("options") or {})
    batch_size = int(evaluation.get("batch_size", 16))
    device = resolve_device(recipe)
    _log(f"evaluation on the {split} set: {method}, on {device}")

    test = dataset[split]
    target_test = select_languages(test, [target], split, "evaluation")
    source_test = select_languages(test, sources, split, "evaluation")

    def evaluate(stage: str, data: Any, setup: Any = None) -> tuple[dict[str, Any], Any]:
        model = AdaptSpeechForCTC.from_pretrained(out / stage / "model").to(device)
        if setup is not None:
            setup(model)
        metrics = evaluate_dataset(
            model,
            data,
            processor,
            method=method,
            batch_size=batch_size,
            progress=progress,
            return_hypotheses=True,
            **options,
        )
        return metrics, model

    base_sources, _ = evaluate("base", source_test)
    adapters_sources, _ = evaluate("source_adapters", source_test, lambda m: m.set_active_languages(sources))
    source_rows = [
        {
            "language": lang,
            "base_cer": base_sources["per_language"][lang]["cer"],
            "base_wer": base_sources["per_language"][lang]["wer"],
            "adapter_cer": adapters_sources["per_language"][lang]["cer"],
            "adapter_wer": adapters_sources["per_language"][lang]["wer"],
        }
        for lang in sources
    ]
    source_average = {
        "base_cer": float(np.mean([r["base_cer"] for r in source_rows])),
        "adapter_cer": float(np.mean([r["adapter_cer"] for r in source_rows])),
    }

    rows: list[dict[str, Any]] = []
    references = list(target_test["text"])
    target_edits: dict[str, np.ndarray] = {}
    zero_shot, _ = evaluate("base", target_test)
    rows.append(_system_row(results, "base, zero-shot (no target training)", None, zero_shot))
    target_edits[rows[-1]["system"]], ref_units = utterance_edits(zero_shot["hypotheses"], references, "char")
    heatmap = None
    for system, stage in TARGET_SYSTEMS:
        if stage not in results:
            continue
        metrics, model = evaluate(stage, target_test)
        rows.append(_system_row(results, system, stage, metrics))
        target_edits[system], _ = utterance_edits(metrics["hypotheses"], references, "char")
        if stage == "fusion":
            heatmap = _fusion_heatmap(model, target_test, processor, out / "fusion_heatmap.png", batch_size)
        del model
    lm = LMRows()
    if lm_settings(recipe).enabled:
        systems = {stage: system for system, stage in TARGET_SYSTEMS}
        lm = lm_rows(recipe, dataset, processor, device, rows, target_edits, ref_units, systems, batch_size, progress)
        rows.extend(lm.rows)
        target_edits.update(lm.edits)
    significance = _compare_with(ADAPTER_ALONE, rows, target_edits, ref_units)
    plot_training_curves(histories, out / "training_curves.png", keys=("loss", "eval_cer"))
    total_seconds = time.perf_counter() - total_start
    title = f"Target {target} ({subset or 'all'} of training audio), {split} set: held-out voices, unseen words"
    extra = {
        "target": target,
        "sources": sources,
        "target_subset": subset,
        "target_train_rows": results["target_adapter"]["train_rows"],
        "target_train_hours": results["target_adapter"]["train_hours"],
        "source_languages": source_rows,
        "source_average": source_average,
        "fusion_heatmap": heatmap,
        "significance": significance,
        "total_seconds": total_seconds,
        "decoding": method,
        "device": str(device),
        "lm": lm.summary or None,
    }
    columns = (*TABLE_COLUMNS, VS_ADAPTER_COLUMN) if significance else TABLE_COLUMNS
    columns = (*columns, VS_NO_LM_COLUMN) if lm.rows else columns
    write_results(rows, out, "results", columns=columns, title=title, extra=extra)
    with open(out / "results.md", "a") as fh:
        if lm.rows:
            fh.write("\n" + lm_markdown(lm.summary, split))
        fh.write(f"\n### Source languages, {split} set\n\n" + "\n".join(_source_markdown(source_rows, source_average)))
        fh.write(f"\n\nTotal wall time: {total_seconds / 60:.1f} min. Decoding: {method} on {device}.\n")
    return {"rows": rows, **extra}
