"""The SimAdapter protocol's test-set evaluation: every trained system on the target test set, the base (and its
source adapters) on the sources' test sets, the fusion heatmap, the paired bootstrap against the adapter alone, and
``results.md`` / ``results.json`` / ``fusion_heatmap.png`` / ``training_curves.png`` in ``output_dir``.

``results.md`` / ``results.json``: CER / WER per system on the target test set, trainable parameters, training time
(the SimAdapter row counts stage 3a's target adapter and stage 3b together), the paired-bootstrap interval of each
system's CER minus the adapter alone's, the source languages' test CER of the base; a recipe's own task may add rows
(:class:`ExtraRows`, e.g. the synthetic demo's ``<system> + 4-gram LM``). ``fusion_heatmap.png``: the mean SimAdapter
attention per layer and fused language on the target test set.

The evaluation runs on ``evaluation.device`` (``auto``: the device the stages trained on, see :func:`resolve_device`),
in batches of ``evaluation.batch_size``.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ...data.collator import DataCollatorCTCWithPadding
from ...data.feature_types import feature_type_of_model
from ...data.prepared_data import load_prepared, select_languages
from ...devices import DeviceError, best_device, choose_device
from ...evaluation import evaluate_dataset
from ...metrics.significance import paired_bootstrap, utterance_edits
from ...modeling import AdaptSpeechForCTC
from ...progress import log
from ..engine import recipe_task
from ..plots import fusion_weight_sums, plot_fusion_heatmap, plot_training_curves
from ..spec import RecipeError
from ..tables import TABLE_COLUMNS, write_results
from .spec import SimAdapterRecipe

ADAPTER_ALONE = "target adapter alone"
#: results.md column: CER difference to the adapter alone with its 95% paired-bootstrap interval (points)
VS_ADAPTER_COLUMN = "CER - adapter alone, 95% CI"
#: the systems trained on the target, in table order, and their stages
TARGET_SYSTEMS = (
    ("from scratch", "scratch"),
    ("full fine-tuning of the base", "finetune"),
    (ADAPTER_ALONE, "target_adapter"),
    ("SimAdapter fusion (on the target adapter)", "fusion"),
)
ZERO_SHOT = "base, zero-shot (no target training)"


@dataclass
class TargetEvaluation:
    """What the evaluation hands a task's :meth:`~.protocol.SimAdapterProtocol.extra_rows`.

    Args:
        dataset: the prepared ``DatasetDict``.
        processor: its processor.
        device: where the models run.
        rows: the table so far (the trained systems).
        edits: per-utterance character edits on the target test set ``[N]``, by system name.
        ref_units: reference characters of each target test utterance ``[N]``.
        systems: stage name -> its system's name in the table.
        batch_size: utterances per forward pass.
        progress: progress bars.
    """

    dataset: Any
    processor: Any
    device: torch.device
    rows: list[dict[str, Any]]
    edits: dict[str, np.ndarray]
    ref_units: np.ndarray
    systems: dict[str, str]
    batch_size: int
    progress: bool


@dataclass
class ExtraRows:
    """Rows a recipe's own task adds to the target table.

    Args:
        key: its entry in ``results.json`` (holding :attr:`summary`).
        rows: table rows (``system``, ``cer``, ``wer`` ... as the trained systems' rows).
        edits: per-utterance character edits ``[N]`` of each row on the target test set (for the paired bootstrap
            against the adapter alone).
        summary: what ``results.json[key]`` holds (None: the rows are off).
        column: a results.md column the rows fill (the other rows show ``-``).
        markdown: a results.md section written after the table.
    """

    key: str
    rows: list[dict[str, Any]] = field(default_factory=list)
    edits: dict[str, np.ndarray] = field(default_factory=dict)
    summary: dict[str, Any] | None = None
    column: str | None = None
    markdown: str = ""


def trained_parameters(reports: list[dict[str, Any]]) -> dict[str, Any]:
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


def resolve_device(spec: SimAdapterRecipe) -> torch.device:
    """The device the recipe's test-set evaluation runs on.

    ``evaluation.device`` names it (``cpu``, ``cuda``, ``cuda:1``, ``mps``); ``auto`` (the default) picks the device
    the stages trained on: the CPU when every stage sets ``training.use_cpu``, else the best available one (CUDA,
    then MPS, then the CPU), as the Trainer does.
    """
    name = spec.evaluation.device
    if name != "auto":
        try:
            return choose_device(name, "evaluation.device")
        except DeviceError as err:
            raise RecipeError(str(err)) from None
    stages = [*spec.stages.values(), *spec.baselines.values()]
    if stages and all((stage.get("training") or {}).get("use_cpu") for stage in stages):
        return torch.device("cpu")
    return best_device()


def fusion_heatmap(model: Any, dataset: Any, processor: Any, path: Path, batch_size: int = 16) -> dict[str, Any]:
    """Average the SimAdapter attention over the real frames of ``dataset``; plot it per layer and language.

    Runs on the model's device; the per-layer sums are moved to the CPU in float32 before numpy (a CUDA or a
    bfloat16 tensor has no ``.numpy()``).

    Returns:
        ``{"languages": [N], "layers": [L], "weights": [L][N]}``: the mean attention of each layer over the fused
        languages (``self`` last when the fusion includes the layer's own output).
    """
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


def _system_row(results: dict[str, Any], system: str, stage: str | None, metrics: dict[str, Any]) -> dict[str, Any]:
    # SimAdapter needs the target adapter of stage 3a: its row counts both stages' parameters and time.
    stages = [] if stage is None else ["target_adapter", stage] if stage == "fusion" else [stage]
    trainable = trained_parameters([results[s]["trainable"] for s in stages if s in results])
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
    spec: SimAdapterRecipe,
    prepared: Path,
    results: dict[str, Any],
    histories: dict[str, list[dict[str, Any]]],
    total_start: float | None = None,
) -> dict[str, Any]:
    """Evaluate every trained system on the test sets; write ``results.{md,json}``, the heatmap and the curves.

    Args:
        prepared: the prepared data folder (:func:`~adaptspeech.recipes.simadapter.protocol.prepare_data`).
        results, histories: ``stage_summary.json`` and the log history of every stage, by name.
        total_start: ``time.perf_counter()`` at the start of the run, for the total wall time (None: now).

    Returns:
        What ``results.json`` holds.

    Raises:
        RecipeError: the rows the recipe's task adds (:meth:`~.protocol.SimAdapterProtocol.
            extra_rows`: self-training, the LM rows) failed with an expected error: its line, raised once the
            table of the trained systems is written (another error is raised as it is, after the table too).
    """
    total_start = time.perf_counter() if total_start is None else total_start
    out = spec.output_dir
    sources, target, subset = list(spec.sources), spec.target, spec.target_subset
    dataset, processor = load_prepared(prepared)
    evaluation = spec.evaluation
    split, method, batch_size = evaluation.split, evaluation.method, evaluation.batch_size
    device = resolve_device(spec)
    log(f"evaluation on the {split} set: {method}, on {device}")

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
            progress=spec.progress,
            return_hypotheses=True,
            **dict(evaluation.options),
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
    rows.append(_system_row(results, ZERO_SHOT, None, zero_shot))
    target_edits[rows[-1]["system"]], ref_units = utterance_edits(zero_shot["hypotheses"], references, "char")
    heatmap = None
    for system, stage in TARGET_SYSTEMS:
        if stage not in results:
            continue
        metrics, model = evaluate(stage, target_test)
        rows.append(_system_row(results, system, stage, metrics))
        target_edits[system], _ = utterance_edits(metrics["hypotheses"], references, "char")
        if stage == "fusion":
            heatmap = fusion_heatmap(model, target_test, processor, out / "fusion_heatmap.png", batch_size)
        del model
    context = TargetEvaluation(
        dataset, processor, device, rows, target_edits, ref_units,
        {stage: system for system, stage in TARGET_SYSTEMS}, batch_size, spec.progress,
    )  # fmt: skip
    failure: Exception | None = None
    try:
        extras = recipe_task(spec).extra_rows(spec, context)
    except Exception as err:  # the rows the task adds failed: write the table of what finished, then fail
        extras, failure = [], err
    for extra in extras:
        rows.extend(extra.rows)
        target_edits.update(extra.edits)
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
        **{x.key: x.summary or None for x in extras},
    }
    columns = (*TABLE_COLUMNS, VS_ADAPTER_COLUMN) if significance else TABLE_COLUMNS
    columns = (*columns, *(x.column for x in extras if x.rows and x.column))
    write_results(rows, out, "results", columns=columns, title=title, extra=extra)
    with open(out / "results.md", "a") as fh:
        for x in extras:
            if x.rows and x.markdown:
                fh.write("\n" + x.markdown)
        fh.write(f"\n### Source languages, {split} set\n\n" + "\n".join(_source_markdown(source_rows, source_average)))
        fh.write(f"\n\nTotal wall time: {total_seconds / 60:.1f} min. Decoding: {method} on {device}.\n")
    if failure is not None:
        if isinstance(failure, (ValueError, OSError, KeyError)):  # an expected error: its line, and where the rest is
            message = " ".join(str(failure.args[0] if isinstance(failure, KeyError) else failure).split())
            raise RecipeError(f"{message} (the trained systems' results are in {out / 'results.md'})") from failure
        raise failure
    return {"rows": rows, **extra}
