"""The transfer curve's figures: bootstrap intervals over test utterances, the table (``curve_results.md`` /
``curve_results.json``) and the plot (``transfer_curve.png``: CER against minutes of target audio, log x axis, one
line per method with its 95% bootstrap band).

The runner (``runner.py``) hands over one :class:`CurvePoint` per (budget, method): the
chosen setting's per-utterance character edits on the target test set; everything here is computed from those.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from adaptspeech.metrics.significance import paired_bootstrap
from adaptspeech.recipes.plots import pyplot, save_figure

#: the methods of a curve, in table and legend order, with their labels
METHOD_LABELS = {
    "zero_shot": "base, zero-shot",
    "scratch": "from scratch",
    "finetune": "full fine-tuning",
    "adapter": "target adapter alone",
    "simadapter": "SimAdapter (sources + target adapter)",
    "self_training": "self-training",
}


@dataclass
class CurvePoint:
    """One method at one budget: the setting chosen on dev and its test-set errors.

    Args:
        budget (`str`): the nominal budget (``"3min"``).
        minutes (`float`): the target training audio the budget's nested subset actually holds.
        clips (`int`): its utterances.
        method (`str`): a key of :data:`METHOD_LABELS`.
        edits (`[N]` int64): character edits of each target test utterance (test-set order).
        ref_units (`[N]` int64): reference characters of each test utterance.
        wer (`float`): corpus-level WER on the test set.
        info: everything else for the table and the JSON (setting, steps, dev CER, parameters, seconds, grid).
    """

    budget: str
    minutes: float
    clips: int
    method: str
    edits: np.ndarray
    ref_units: np.ndarray
    wer: float
    info: dict[str, Any] = field(default_factory=dict)

    @property
    def cer(self) -> float:
        return float(self.edits.sum() / max(self.ref_units.sum(), 1))


def cer_interval(
    edits: np.ndarray, ref_units: np.ndarray, num_samples: int = 1000, confidence: float = 0.95
) -> tuple[float, float]:
    """The ``confidence`` bootstrap interval of one system's corpus-level CER over its test utterances.

    It is :func:`~adaptspeech.metrics.significance.paired_bootstrap` against a system with no errors: every resample's
    difference is then that resample's CER, drawn with the same utterance draws as the paired comparisons.

    Args:
        edits (`[N]`), ref_units (`[N]`): per-utterance edits and reference units.
    """
    result = paired_bootstrap(edits, np.zeros_like(edits), ref_units, num_samples=num_samples, confidence=confidence)
    return result.low, result.high


def mean_fusion_weights(heatmap: Mapping[str, Any], sources: Sequence[str]) -> dict[str, dict[str, float]]:
    """Mean SimAdapter attention per fused language over the layers, and the same renormalised over ``sources``.

    Args:
        heatmap: ``{"languages": [N], "weights": [layers][N]}`` as the recipe's fusion heatmap records it.
    """
    weights = np.asarray(heatmap["weights"], dtype=np.float64).mean(axis=0)  # [N]
    mean = {lang: float(w) for lang, w in zip(heatmap["languages"], weights, strict=True)}
    source_total = sum(mean[s] for s in sources if s in mean)
    over_sources = {s: mean[s] / source_total if source_total > 0 else 0.0 for s in sources if s in mean}
    return {"mean": mean, "over_sources": over_sources}


def point_row(point: CurvePoint, num_samples: int) -> dict[str, Any]:
    """The table / JSON row of ``point``: CER with its bootstrap interval, WER and the runner's ``info``."""
    low, high = cer_interval(point.edits, point.ref_units, num_samples)
    return {
        "budget": point.budget,
        "minutes": point.minutes,
        "clips": point.clips,
        "method": point.method,
        "system": METHOD_LABELS[point.method],
        "cer": point.cer,
        "cer_low": low,
        "cer_high": high,
        "wer": point.wer,
        **point.info,
    }


def paired_difference(system: CurvePoint, baseline: CurvePoint, num_samples: int) -> dict[str, Any]:
    """``system``'s test CER minus ``baseline``'s at one budget, with the paired bootstrap 95% interval over the test
    utterances and the share of resamples where ``system`` is not better."""
    result = paired_bootstrap(system.edits, baseline.edits, system.ref_units, num_samples=num_samples)
    return {
        "budget": system.budget,
        "minutes": system.minutes,
        "cer_delta": result.delta,
        "ci_low": result.low,
        "ci_high": result.high,
        "p_not_better": result.p_not_better,
    }


def simadapter_vs_adapter(
    points: Sequence[CurvePoint], num_samples: int, fusion: Mapping[str, Mapping[str, Any]], sources: Sequence[str]
) -> list[dict[str, Any]]:
    """Per budget with both: SimAdapter's CER minus the adapter alone's (:func:`paired_difference`), and SimAdapter's
    mean fusion weights (``fusion``: budget -> heatmap record)."""
    by_key = {(p.budget, p.method): p for p in points}
    out = []
    for budget in dict.fromkeys(p.budget for p in points):
        sim, alone = by_key.get((budget, "simadapter")), by_key.get((budget, "adapter"))
        if sim is None or alone is None:
            continue
        entry = paired_difference(sim, alone, num_samples)
        if budget in fusion:
            entry["fusion_weights"] = mean_fusion_weights(fusion[budget], sources)
        out.append(entry)
    return out


def adapters_vs_finetune(points: Sequence[CurvePoint], num_samples: int) -> list[dict[str, Any]]:
    """Per budget and adapter method (the adapter alone, SimAdapter) and the self-training arm: its CER minus full
    fine-tuning's (:func:`paired_difference`; negative = better than fine-tuning), with ``"method"`` naming the
    method and ``"system"`` its label."""
    by_key = {(p.budget, p.method): p for p in points}
    out = []
    for budget in dict.fromkeys(p.budget for p in points):
        finetune = by_key.get((budget, "finetune"))
        for method in ("adapter", "simadapter", "self_training"):
            if finetune is not None and (budget, method) in by_key:
                point = by_key[(budget, method)]
                out.append({"method": method, "system": point.info.get("system") or METHOD_LABELS[method],
                            **paired_difference(point, finetune, num_samples)})
    return out


def self_training_overtaking(versus_finetune: Sequence[Mapping[str, Any]],
                             arm_budgets: Sequence[str]) -> dict[str, Any] | None:
    """Where the self-training arm overtakes full fine-tuning: the smallest budget from which its test CER is below
    full fine-tuning's at that and every larger budget with an arm point (None when it is not below at the largest);
    with the budgets where the paired 95% interval excludes 0 and one sentence for the report. None without an arm.

    Args:
        versus_finetune: :func:`adapters_vs_finetune`'s entries, budgets in increasing order.
        arm_budgets: the budgets with an arm point, in increasing order.
    """
    if not arm_budgets:
        return None
    arm = sorted((c for c in versus_finetune if c["method"] == "self_training"), key=lambda c: c["minutes"])
    if not arm:
        return {"overtakes_at": None, "per_budget": [],
                "statement": "Full fine-tuning is not on this curve: nothing to compare the self-training arm with."}
    label = arm[0]["system"][:1].upper() + arm[0]["system"][1:]
    below = [c["cer_delta"] < 0 for c in arm]
    first = next((i for i in range(len(arm)) if all(below[i:])), None)
    significant = [c["budget"] for c in arm if c["ci_high"] < 0 or c["ci_low"] > 0]

    def where(c: Mapping[str, Any]) -> str:
        return (f"{c['budget']} ({c['minutes']:.3g} min, {100 * c['cer_delta']:+.2f} "
                f"[{100 * c['ci_low']:+.2f}, {100 * c['ci_high']:+.2f}])")

    if first is None:
        statement = (f"{label} does not overtake full fine-tuning: its test CER is at or above full fine-tuning's at "
                     f"the largest budget with a self-training point, {where(arm[-1])}")
        lower = [where(c) for c, b in zip(arm, below, strict=True) if b]
        statement += f"; below it only at {', '.join(lower)}." if lower else ", and at every smaller one."
    elif first == 0:
        statement = (f"{label} is below full fine-tuning at every budget with a self-training point, from the "
                     f"smallest on: {'; '.join(where(c) for c in arm)}.")
    else:
        statement = (f"{label} overtakes full fine-tuning at {where(arm[first])}: at or above it below that budget "
                     f"({'; '.join(where(c) for c in arm[:first])}), below it from there on.")
    statement += (" The paired 95% interval excludes 0 at " + ", ".join(significant) + "." if significant else
                  " No difference has a paired 95% interval that excludes 0.")
    return {"system": arm[0]["system"], "overtakes_at": None if first is None else arm[first]["budget"],
            "overtakes_at_minutes": None if first is None else arm[first]["minutes"],
            "below_at_every_budget": first == 0, "significant_at": significant, "per_budget": arm,
            "statement": statement}


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.2f}"


def curve_markdown(
    rows: Sequence[Mapping[str, Any]],
    comparisons: Sequence[Mapping[str, Any]],
    grid_runs: Sequence[Mapping[str, Any]],
    title: str,
    sources: Sequence[str],
    versus_finetune: Sequence[Mapping[str, Any]] = (),
    overtaking: Mapping[str, Any] | None = None,
) -> str:
    """``curve_results.md``: the CER table, SimAdapter minus the adapter alone per budget, the adapter methods (and
    the self-training arm) minus full fine-tuning per budget, the arm's rounds and where it overtakes full
    fine-tuning, every grid run's dev CER."""
    lines = [
        f"### {title}",
        "",
        "| budget | minutes (clips) | method | chosen on dev | steps | dev CER % | test CER % | 95% CI | WER % "
        "| trainable params | train s (grid s) |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in rows:
        lines.append(
            f"| {r['budget']} | {r['minutes']:.2f} ({r['clips']}) | {r['system']} | {r.get('setting') or '-'} "
            f"| {r.get('steps') or '-'} | {_pct(r.get('dev_cer'))} | {_pct(r['cer'])} "
            f"| [{_pct(r['cer_low'])}, {_pct(r['cer_high'])}] | {_pct(r['wer'])} "
            f"| {int(r.get('trainable_params') or 0):,} "
            f"| {r.get('train_seconds') or 0:.0f} ({r.get('grid_seconds') or 0:.0f}) |"
        )
    if comparisons:
        lines += [
            "",
            "### SimAdapter minus target adapter alone (test CER points, paired bootstrap over utterances)",
            "",
            "| budget | minutes | SimAdapter - adapter, 95% CI | not better in | mean fusion weight per language "
            "| over the sources only |",
            "| --- | --- | --- | --- | --- | --- |",
        ]
        for c in comparisons:
            weights = c.get("fusion_weights") or {}
            mean = ", ".join(f"{k} {v:.3f}" for k, v in (weights.get("mean") or {}).items()) or "-"
            over = ", ".join(f"{k} {v:.2f}" for k, v in (weights.get("over_sources") or {}).items()) or "-"
            lines.append(
                f"| {c['budget']} | {c['minutes']:.2f} | {100 * c['cer_delta']:+.2f} "
                f"[{100 * c['ci_low']:+.2f}, {100 * c['ci_high']:+.2f}] | {100 * c['p_not_better']:.0f}% "
                f"| {mean} | {over} |"
            )
    if versus_finetune:
        lines += [
            "",
            "### Adapters minus full fine-tuning (test CER points, paired bootstrap; negative = adapters better)",
            "",
            "| budget | minutes | method | minus full fine-tuning, 95% CI | not better in |",
            "| --- | --- | --- | --- | --- |",
        ]
        for c in versus_finetune:
            lines.append(
                f"| {c['budget']} | {c['minutes']:.2f} | {c.get('system') or METHOD_LABELS[c['method']]} "
                f"| {100 * c['cer_delta']:+.2f} "
                f"[{100 * c['ci_low']:+.2f}, {100 * c['ci_high']:+.2f}] | {100 * c['p_not_better']:.0f}% |"
            )
    lines += arm_markdown(rows, overtaking)
    if grid_runs:
        lines += [
            "",
            "### Every grid run (dev CER; the lowest per budget and method is chosen)",
            "",
            "| budget | method | setting | steps | dev CER % | train s | chosen |",
            "| --- | --- | --- | --- | --- | --- | --- |",
        ]
        for g in grid_runs:
            lines.append(
                f"| {g['budget']} | {METHOD_LABELS[g['method']]} | {g['setting']} | {g['steps']} "
                f"| {_pct(g['dev_cer'])} | {g['train_seconds']:.0f} | {'yes' if g['chosen'] else ''} |"
            )
    lines += ["", f"Sources: {', '.join(sources)}."]
    if grid_runs:
        train = sum(g["train_seconds"] for g in grid_runs)
        lines.append(f"Training time summed over the {len(grid_runs)} grid runs: {train / 60:.1f} min (runs resumed or "
                     "reused across calls count once; evaluation not included).")  # fmt: skip
    lines.append("")
    return "\n".join(lines)


def arm_markdown(rows: Sequence[Mapping[str, Any]], overtaking: Mapping[str, Any] | None) -> list[str]:
    """The self-training arm's section of ``curve_results.md``: per budget its teacher, every round (labels kept,
    their CER against what the clips say where known, dev CER), the chosen round's test CER; then where it overtakes
    full fine-tuning (:func:`self_training_overtaking`). No lines without an arm."""
    arm = [r for r in rows if r["method"] == "self_training"]
    if not arm:
        return []
    lines = [
        "",
        f"### Self-training arm: {arm[0]['system']} (noisy-student rounds on "
        f"{arm[0]['self_training']['pool_minutes']:.1f} min of untranscribed audio)",
        "",
        "| budget | teacher | teacher dev / test CER % | round | labels kept (min) | pseudo-label CER % all / kept "
        "| student steps | dev CER % | test CER % |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in arm:
        st = r["self_training"]
        teacher = "the recipe's system" if st["teacher_setting"] == "recipe" else f"curve run {st['teacher_setting']}"
        head = f"| {r['budget']} | {teacher} | {_pct(st['teacher_dev_cer'])} / {_pct(st['teacher_cer'])}"
        for k in st["rounds"]:
            chosen = k["round"] == st["chosen_round"]
            lines.append(
                f"{head} | {k['round']}{' (chosen)' if chosen else ''} | {k['kept']} of {k['rows']} "
                f"({k['kept_minutes']:.1f}) | {_pct(k['label_cer_all'])} / {_pct(k['label_cer_kept'])} "
                f"| {r['steps']} | {_pct(k['dev_cer'])} | {_pct(r['cer']) if chosen else '-'} |"
            )
        if not st["chosen_round"]:
            lines.append(f"{head} | none better on dev: the teacher | - | - | - | {_pct(st['teacher_dev_cer'])} "
                         f"| {_pct(r['cer'])} |")
    if overtaking:
        lines += ["", f"**Self-training against full fine-tuning.** {overtaking['statement']}"]
    return lines


def plan_markdown(budgets: Sequence[Mapping[str, Any]], plan: Sequence[Mapping[str, Any]]) -> str:
    """The curve's plan: per budget its audio and, per method, the grid runs and their steps; the totals."""
    lines = [
        "| budget | minutes (clips) | method | runs | steps per run | steps |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for budget in budgets:
        for method in METHOD_LABELS:
            runs = [r for r in plan if r["budget"] == budget["name"] and r["method"] == method]
            if runs:
                per_run = sorted({r["steps"] for r in runs})
                lines.append(
                    f"| {budget['name']} | {budget['minutes']:.2f} ({budget['clips']}) | {METHOD_LABELS[method]} "
                    f"| {len(runs)} | {', '.join(map(str, per_run))} | {sum(r['steps'] for r in runs)} |"
                )
    lines.append(f"| **all** | | | **{len(plan)}** | | **{sum(r['steps'] for r in plan)}** |")
    return "\n".join(lines) + "\n"


def plot_transfer_curve(rows: Sequence[Mapping[str, Any]], path: str | Path, title: str,
                        overtaking: Mapping[str, Any] | None = None) -> Path:
    """CER (%) against minutes of target training audio on a log x axis, one line per method, with the 95%
    bootstrap band over test utterances; the zero-shot base is one value, drawn across every budget. The
    self-training arm is a dotted line of stars, and the budget where it overtakes full fine-tuning (``overtaking``,
    :func:`self_training_overtaking`) a vertical dotted line.

    Two panels: every method, then the methods that start from the pretrained base (all but from scratch) on their
    own y range, where their differences (tenths of a point) are visible."""
    plt = pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.8))
    budgets = sorted({(r["minutes"], r["budget"]) for r in rows})
    for ax, methods in ((axes[0], list(METHOD_LABELS)), (axes[1], [m for m in METHOD_LABELS if m != "scratch"])):
        for colour, method in enumerate(METHOD_LABELS):  # the same colour per method in both panels
            points = sorted((r for r in rows if r["method"] == method), key=lambda r: r["minutes"])
            if not points or method not in methods:
                continue
            x = np.array([r["minutes"] for r in points])
            cer = 100 * np.array([r["cer"] for r in points])
            low = 100 * np.array([r["cer_low"] for r in points])
            high = 100 * np.array([r["cer_high"] for r in points])
            style = {"linestyle": "--", "marker": None} if method == "zero_shot" else {"marker": "o"}
            band = 0.18
            if method == "self_training":  # drawn over the others, its band lighter
                style, band = {"linestyle": ":", "marker": "*", "markersize": 11, "zorder": 3}, 0.1
            ax.plot(x, cer, label=points[0]["system"], color=f"C{colour}", **style)
            ax.fill_between(x, low, high, color=f"C{colour}", alpha=band, linewidth=0)
        if overtaking and overtaking.get("overtakes_at_minutes"):
            ax.axvline(overtaking["overtakes_at_minutes"], color="grey", linestyle=":", linewidth=1,
                       label=f"self-training below full fine-tuning from {overtaking['overtakes_at']}")
        ax.set_xscale("log")
        ax.set_xticks([m for m, _ in budgets])
        ax.set_xticklabels([f"{b}\n({m:.3g} min)" for m, b in budgets], fontsize=8)
        ax.minorticks_off()
        ax.set_xlabel("target training audio (nested subsets)")
        ax.grid(True, alpha=0.3)
    axes[0].set_ylabel("test CER % (95% bootstrap band)")
    axes[0].set_title(title, fontsize=10)
    axes[1].set_title("the methods that start from the base (from scratch left out)", fontsize=10)
    axes[0].legend(fontsize=8)
    return save_figure(fig, path)


def write_curve_results(
    folder: Path,
    points: Sequence[CurvePoint],
    grid_runs: Sequence[Mapping[str, Any]],
    fusion: Mapping[str, Mapping[str, Any]],
    sources: Sequence[str],
    title: str,
    extra: Mapping[str, Any],
    num_samples: int = 1000,
) -> dict[str, Any]:
    """Write ``curve_results.md``, ``curve_results.json`` and ``transfer_curve.png`` in ``folder``; returns the JSON.

    Args:
        points: the chosen setting of every (budget, method) evaluated on the test set.
        grid_runs: every grid run (budget, method, setting, steps, dev_cer, train_seconds, chosen).
        fusion: budget -> the SimAdapter fusion heatmap record of its chosen run.
        extra: more fields for the JSON (target, sources, settings, ...).
    """
    rows = [point_row(p, num_samples) for p in points]
    comparisons = simadapter_vs_adapter(points, num_samples, fusion, sources)
    versus_finetune = adapters_vs_finetune(points, num_samples)
    overtaking = self_training_overtaking(versus_finetune, [p.budget for p in points if p.method == "self_training"])
    folder.mkdir(parents=True, exist_ok=True)
    markdown = curve_markdown(rows, comparisons, grid_runs, title, sources, versus_finetune, overtaking)
    (folder / "curve_results.md").write_text(markdown)
    result = {
        "rows": rows,
        "simadapter_vs_adapter": comparisons,
        "adapters_vs_finetune": versus_finetune,
        "self_training_vs_finetune": overtaking,
        "grid_runs": list(grid_runs),
        **extra,
    }
    (folder / "curve_results.json").write_text(json.dumps(result, indent=2, default=float) + "\n")
    if rows:
        plot_transfer_curve(rows, folder / "transfer_curve.png", title, overtaking)
    return result
