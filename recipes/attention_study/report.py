"""The attention study's report: ``results.md`` / ``results.json`` (one row per finished kind), ``summary.png`` (source
test CER against training and test-pass CPU time), ``training_curves.png`` and the last-layer overview of every kind's
attention maps (:mod:`.study` trains the kinds)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from adaptspeech.recipes.plots import plot_training_curves, pyplot
from adaptspeech.recipes.tables import results_markdown

from .attention_maps import AttentionMap, plot_maps_overview, save_figure_below_title

if TYPE_CHECKING:
    from .study import StudyKind, StudySpec

RESULT_FILE = "kind_result.json"
"""Each kind's result, in ``<output_dir>/kinds/<kind>/``."""


def finished_results(study: StudySpec, plan: list[StudyKind]) -> list[dict[str, Any]]:
    """The ``kind_result.json`` of every finished kind of ``plan``, in plan order."""
    out = study.output_dir / "kinds"
    files = [out / k.name / RESULT_FILE for k in plan]
    return [json.loads(file.read_text()) for file in files if file.is_file()]


TABLE_HEADERS = (
    "kind",
    "name in the papers",
    "source test CER %",
    "dev CER %",
    "train s",
    "train CPU s",
    "test pass s",
    "test pass CPU s",
    "parameters",
    "attention parameters",
)


def _table_row(result: dict[str, Any], sources: list[str]) -> dict[str, str]:
    attention = result.get("attention_parameters")
    row = {
        "kind": result["kind"] + (" *" if result.get("resumed_from") else ""),
        "name in the papers": result["label"],
        "source test CER %": f"{100 * result['cer_average']:.2f}",
    }
    row.update({f"{lang} CER %": f"{100 * result['cer_per_language'][lang]:.2f}" for lang in sources})
    row.update(
        {
            "dev CER %": "-" if result.get("dev_cer") is None else f"{100 * result['dev_cer']:.2f}",
            "train s": f"{result['train_seconds']:.0f}",
            "train CPU s": f"{result['train_cpu_seconds']:.0f}",
            "test pass s": f"{result['test_seconds']:.1f}",
            "test pass CPU s": f"{result['test_cpu_seconds']:.1f}",
            "parameters": f"{result['parameters']:,}",
            "attention parameters": "-" if attention is None else f"{attention:,}",
        }
    )
    return row


def plot_study_summary(results: list[dict[str, Any]], path: Path) -> Path:
    """CER (source test average) against training CPU time and against test-pass CPU time, one labelled point per
    kind."""
    plt = pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.6))
    for ax, key, xlabel in (
        (axes[0], "train_cpu_seconds", "training, CPU seconds (1 thread)"),
        (axes[1], "test_cpu_seconds", "test-set pass (forward + greedy), CPU seconds"),
    ):
        for result in results:
            x, y = result[key], 100 * result["cer_average"]
            ax.scatter([x], [y], s=18)
            ax.annotate(result["kind"], (x, y), fontsize=7, xytext=(3, 2), textcoords="offset points")
        ax.set_xlabel(xlabel)
        ax.set_ylabel("source test CER % (mean of the languages)")
        ax.grid(alpha=0.3)
    fig.suptitle("Attention kinds: CER against cost (lower left is better)", fontsize=10)
    return save_figure_below_title(fig, path)


def _overview_rows(study: StudySpec, results: list[dict[str, Any]]) -> tuple[list[tuple[str, Any]], str]:
    """``(kind, map)`` of the chosen layer (``attention_maps.overview_layer``, an index into the layers: -1 = the
    last) of every kind with maps, and that layer's label; a module nested in that layer's attention (the hybrid's
    MHSA stage) gets its own row."""
    layer = study.attention_maps.overview_layer
    rows: list[tuple[str, AttentionMap]] = []
    chosen = ""
    for result in results:
        modules = (result.get("attention_maps") or {}).get("modules")
        if not modules:
            continue
        layers = sorted({m["label"].split()[0] for m in modules}, key=lambda label: int(label[1:]))
        chosen = layers[layer] if -len(layers) <= layer < len(layers) else layers[-1]
        with np.load(study.output_dir / "kinds" / result["kind"] / "attention_maps.npz") as saved:
            for module in modules:
                if module["label"].split()[0] == chosen:
                    extra = module["label"][len(chosen):].strip()
                    name = f"{result['kind']} ({extra})" if extra else result["kind"]
                    weights = saved[module["label"]].astype(np.float32)
                    rows.append((name, AttentionMap(module["name"], module["label"], weights, 0.0)))
    return rows, chosen


def write_study_results(study: StudySpec, plan: list[StudyKind], run_seconds: float) -> dict[str, Any]:
    """``results.md`` / ``results.json``, ``summary.png``, ``training_curves.png``, ``attention_maps/overview.png``
    from every finished kind; returns ``{"rows", "missing", "run_seconds", ...}``."""
    out = study.output_dir
    sources = list(study.sources)
    results = finished_results(study, plan)
    missing = [k.name for k in plan if k.name not in {r["kind"] for r in results}]
    table = [_table_row(r, sources) for r in results]
    columns = [*TABLE_HEADERS[:3], *(f"{lang} CER %" for lang in sources), *TABLE_HEADERS[3:]]
    first = results[0] if results else {}
    training = (first.get("spec") or {}).get("training", {})
    evaluation = study.evaluation
    title = (
        f"Attention kinds in every encoder layer: source test CER ({', '.join(sources)}), "
        f"{training.get('max_steps')} steps of batch {training.get('per_device_train_batch_size')} each"
    )
    lines = [results_markdown(table, columns, title)]
    lines.append(
        f"\nsource test CER: mean of the {len(sources)} languages' CER, {evaluation.method} "
        "decoding; train s: wall seconds of the training loop; train CPU s: process CPU seconds of the whole stage "
        "(model build, training, final dev check); test pass: the sources' test utterances, forward + decoding, "
        f"batch {evaluation.batch_size}; {torch.get_num_threads()} torch thread(s).\n"
    )
    if any(r.get("resumed_from") for r in results):
        lines.append("\n\\* resumed from a checkpoint: its time counts only the resumed part.\n")
    if missing:
        lines.append(f"\nNot finished yet: {', '.join(missing)}.\n")
    if results:
        train_wall = sum(r["train_seconds"] for r in results) / 60
        train_cpu = sum(r["train_cpu_seconds"] for r in results) / 60
        lines.append(
            f"\nSum over the {len(results)} kinds: training {train_wall:.0f} min wall, {train_cpu:.0f} min CPU; test "
            f"passes {sum(r['test_seconds'] for r in results) / 60:.1f} min wall.\n"
        )
    lines.append(f"\nThe run that wrote this file: {run_seconds / 60:.1f} min (kinds finished before are skipped).\n")
    (out / "results.md").write_text("".join(lines))
    extra = {"missing": missing, "run_seconds": run_seconds, "sources": sources, "threads": torch.get_num_threads()}
    (out / "results.json").write_text(json.dumps({"rows": results, **extra}, indent=2, default=float) + "\n")
    if results:
        plot_study_summary(results, out / "summary.png")
        histories = {}
        for r in results:
            history = out / "kinds" / r["kind"] / "log_history.json"
            if history.is_file():
                histories[r["kind"]] = json.loads(history.read_text())
        plot_training_curves(histories, out / "training_curves.png", keys=("loss",))
        rows, layer = _overview_rows(study, results)
        if rows:
            utterance = next(r["attention_maps"]["utterance"] for r in results if r["attention_maps"].get("modules"))
            title = (
                f"Effective attention of encoder layer {layer}, one {utterance['language']} test utterance "
                f"({utterance['seconds']:.1f} s, {utterance['frames']} frames); each panel scaled to its max"
            )
            plot_maps_overview(rows, out / "attention_maps" / "overview.png", title)
    return {"rows": results, "table": table, **extra}
