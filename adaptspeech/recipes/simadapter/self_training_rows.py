"""The self-training rows of a SimAdapter recipe's results table: each self-trained system on the test set, without
and with the n-gram LM, each with the paired bootstrap against the same system without self-training, and the
results.md section with every round's figures (:mod:`~adaptspeech.recipes.simadapter.self_training`).

Rows ``<system> + self-training`` (compared with ``<system>``) and, where the recipe has an LM row for the system,
``<system> + self-training + <n>-gram LM`` (compared with ``<system> + <n>-gram LM``; alpha / beta tuned on dev for
the self-trained model as for the LM rows). ``results.json["self_training"]`` holds per system the rounds (labels kept,
their CER against what the clips say where known, per confidence bin, dev CER, test CER of each round's student, times)
and the relative CER change of each row.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import numpy as np

from ...data.prepared_data import select_languages
from ...evaluation import evaluate_dataset
from ...lm.decoder import LMDecoder, build_decoder
from ...lm.tune import dev_log_probs, grid_search
from ...metrics.significance import utterance_edits
from ...modeling import AdaptSpeechForCTC
from ...progress import log
from .evaluation import ExtraRows, TargetEvaluation, bootstrap_cell
from .self_training import LMSetup, SelfTrainingRunner, SystemRun, describe_run
from .self_training_pool import ensure_pool
from .self_training_settings import SelfTrainingSettings
from .spec import SimAdapterRecipe

#: results.md column of the self-training rows: CER difference to the same system without self-training
VS_NO_SELF_TRAINING_COLUMN = "CER - same system without self-training, 95% CI"
SUFFIX = "self-training"


def _evaluate(model_dir: Path, data: Any, evaluation: TargetEvaluation, method: str, options: dict[str, Any],
              lm_decoder: Any = None) -> dict[str, Any]:
    model = AdaptSpeechForCTC.from_pretrained(model_dir).to(evaluation.device)
    extra = {} if lm_decoder is not None else options
    return evaluate_dataset(model, data, evaluation.processor, method=method, batch_size=evaluation.batch_size,
                            progress=evaluation.progress, return_hypotheses=True, lm_decoder=lm_decoder, **extra)


def _tuned_lm(model_dir: Path, dev: Any, evaluation: TargetEvaluation, lm: LMSetup) -> tuple[Any, dict[str, float]]:
    model = AdaptSpeechForCTC.from_pretrained(model_dir).to(evaluation.device)
    decoder = LMDecoder(build_decoder(evaluation.processor.tokenizer, lm.folder), beam_width=lm.beam_size)
    best = grid_search(decoder, dev_log_probs(model, dev, evaluation.processor, evaluation.batch_size),
                       list(dev["text"]), lm.alphas, lm.betas)[0]
    decoder.set_weights(best["alpha"], best["beta"])
    return decoder, best


def self_training_rows(target: str, split: str, method: str, options: dict[str, Any], settings: SelfTrainingSettings,
                       runs: dict[str, SystemRun], evaluation: TargetEvaluation, lm: LMSetup | None,
                       lm_rows: dict[str, dict[str, Any]], lm_edits: dict[str, np.ndarray],
                       pool_minutes: float, lm_label: str = "4-gram LM") -> ExtraRows:
    """The rows, their edits, ``results.json["self_training"]`` and the results.md section.

    Args:
        target, split, method, options: the recipe's target and its test-set decoding.
        runs: the self-trained systems (:meth:`~adaptspeech.recipes.simadapter.self_training.SelfTrainingRunner.run`).
        evaluation: the protocol's evaluation so far (the rows without self-training and their edits).
        lm: the LM the rows with an LM decode with (None: no LM rows).
        lm_rows: the recipe's LM rows by system name (``<system> + <n>-gram LM``), lm_edits their edits.
        pool_minutes: the pool's audio.
    """
    started = time.perf_counter()
    dataset = evaluation.dataset
    test = select_languages(dataset[split], [target], split, "self_training")
    dev = select_languages(dataset["dev"], [target], "dev", "self_training")
    references = list(test["text"])
    by_system = {row["system"]: row for row in evaluation.rows}
    out = ExtraRows("self_training", column=VS_NO_SELF_TRAINING_COLUMN)
    systems: dict[str, Any] = {}
    significance: dict[str, Any] = {}
    for stage, run in runs.items():
        name = evaluation.systems[stage]
        if name not in by_system:
            continue
        base = by_system[name]
        per_round = []
        for record in run.rounds:
            metrics = _evaluate(Path(record.student), test, evaluation, method, options)
            per_round.append({"round": record.round, "test_cer": metrics["overall"]["cer"],
                              "test_wer": metrics["overall"]["wer"]})
        chosen = _evaluate(run.model_dir, test, evaluation, method, options)
        train_seconds = sum(r.seconds.get("train", 0.0) for r in run.rounds)
        row = {**base, "system": f"{name} + {SUFFIX}", "cer": chosen["overall"]["cer"],
               "wer": chosen["overall"]["wer"], "train_seconds": (base.get("train_seconds") or 0.0) + train_seconds}
        student = run.rounds[run.chosen - 1] if run.chosen else None
        if stage == "target_adapter" and student is not None and student.trainable_params is not None:
            # the adapter alone's student may have more capacity than the system (adapter_bottleneck, adapter_lora)
            row.update(trainable_params=student.trainable_params, trainable_share=student.trainable_share)
        out.edits[row["system"]], _ = utterance_edits(chosen["hypotheses"], references, "char")
        row[VS_NO_SELF_TRAINING_COLUMN], significance[row["system"]] = bootstrap_cell(
            out.edits[row["system"]], evaluation.edits[name], evaluation.ref_units)
        out.rows.append(row)
        entry: dict[str, Any] = {
            "stage": stage, "chosen_round": run.chosen, "teacher_dev_cer": run.teacher_dev_cer,
            "rounds": [{**r.__dict__, **per_round[i]} for i, r in enumerate(run.rounds)],
            "test": {"no_self_training": base["cer"], "self_training": row["cer"],
                     "relative_change": row["cer"] / base["cer"] - 1 if base["cer"] else None},
        }
        lm_name = f"{name} + {lm_label}"
        if lm is not None and lm_name in lm_rows:
            decoder, best = _tuned_lm(run.model_dir, dev, evaluation, lm)
            with_lm = _evaluate(run.model_dir, test, evaluation, method, options, lm_decoder=decoder)
            # from the self-trained row (the LM row's own comparisons would describe another system)
            lm_row = {**row, "system": f"{name} + {SUFFIX} + {lm_label}",
                      "cer": with_lm["overall"]["cer"], "wer": with_lm["overall"]["wer"], "alpha": best["alpha"],
                      "beta": best["beta"], "train_seconds": row["train_seconds"]}
            out.edits[lm_row["system"]], _ = utterance_edits(with_lm["hypotheses"], references, "char")
            lm_row[VS_NO_SELF_TRAINING_COLUMN], significance[lm_row["system"]] = bootstrap_cell(
                out.edits[lm_row["system"]], lm_edits[lm_name], evaluation.ref_units)
            out.rows.append(lm_row)
            entry["test_lm"] = {"no_self_training": lm_rows[lm_name]["cer"], "self_training": lm_row["cer"],
                                "relative_change": lm_row["cer"] / lm_rows[lm_name]["cer"] - 1,
                                "alpha": best["alpha"], "beta": best["beta"]}
        systems[name] = entry
        log(f"self-training {describe_run(run)}; test CER {100 * base['cer']:.2f} -> {100 * row['cer']:.2f}%")
    out.summary = {"settings": settings.to_dict(), "pool_minutes": pool_minutes, "systems": systems,
                   "significance_vs_no_self_training": significance,
                   "evaluation_seconds": time.perf_counter() - started}
    out.markdown = self_training_markdown(out.summary, split)
    return out


def recipe_self_training_rows(spec: SimAdapterRecipe, evaluation: TargetEvaluation, lm: LMSetup | None = None,
                              lm_extra: ExtraRows | None = None, lm_label: str = "4-gram LM") -> ExtraRows:
    """Run (or reuse) the rounds of every system of ``spec.self_training`` and evaluate the rows: the pool
    (:func:`~adaptspeech.recipes.simadapter.self_training_pool.ensure_pool`), the rounds
    (:class:`~adaptspeech.recipes.simadapter.self_training.SelfTrainingRunner`), then :func:`self_training_rows`.

    Args:
        spec: the recipe (its ``self_training`` section).
        evaluation: the protocol's evaluation so far.
        lm: the n-gram LM the teachers label with and the rows with an LM decode with (None: no LM).
        lm_extra: the recipe's LM rows (their rows and edits: the baselines of the rows with the LM).
        lm_label: the LM rows' suffix (``4-gram LM``).
    """
    started = time.perf_counter()
    settings = spec.self_training
    prepared = spec.output_dir / "prepared"
    pool = ensure_pool(spec, settings, prepared)
    runner = SelfTrainingRunner(spec, settings, prepared, pool, lm if settings.use_lm else None)
    runs = runner.run()
    lm_rows = {} if lm_extra is None else {row["system"]: row for row in lm_extra.rows}
    extra = self_training_rows(spec.target, spec.evaluation.split, spec.evaluation.method,
                               dict(spec.evaluation.options), runner.settings, runs, evaluation, lm, lm_rows,
                               {} if lm_extra is None else lm_extra.edits, runner.pool_seconds / 60,
                               lm_label=lm_label)
    extra.summary["seconds"] = time.perf_counter() - started
    log(f"self-training step: {extra.summary['seconds'] / 60:.1f} min")
    return extra


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.2f}"


def _teacher_text(settings: dict[str, Any]) -> str:
    """Who labels round 1, when it is not each system itself."""
    return " (SimAdapter fusion labels round 1 for every system)" if settings.get("teacher") == "fusion" else ""


def _filter_text(settings: dict[str, Any]) -> str:
    """Which labels are kept, as the rounds applied it: the LM agreement filter first, then the confidence filter
    (a minimum, a share of the whole pool, or a share per round), with the confidence method that ranked them."""
    method = settings.get("confidence") or "max_prob/min"
    schedule = settings.get("keep_fraction_schedule")
    if settings.get("min_confidence") is not None:
        confident = f"the labels of confidence {settings['min_confidence']:g} or more ({method})"
    elif schedule:
        shares = ", ".join(f"{100 * share:.0f}%" for share in schedule)
        rounds = ", ".join(str(k) for k in range(1, len(schedule) + 1))
        confident = (f"the most confident {shares} of the pool's labels in rounds {rounds} (later rounds: the last) "
                     f"({method})")
    elif settings.get("keep_fraction") is not None:
        confident = f"the {100 * settings['keep_fraction']:.0f}% most confident labels of the pool ({method})"
    else:
        return "all of the labels are kept"
    agreement = settings.get("max_lm_disagreement")
    if agreement is not None:
        return (f"labels whose best path and the LM hypothesis differ by less than {100 * agreement:g}% CER are kept, "
                f"at most {confident}")
    return f"{confident} are kept"


def self_training_markdown(summary: dict[str, Any], split: str) -> str:
    """The results.md section: the settings, then per system its rounds, then the labels' CER per confidence bin."""
    s = summary["settings"]
    lines = [
        f"### Self-training on {summary['pool_minutes']:.1f} min of untranscribed audio",
        "",
        f"Up to {s['rounds']} rounds of noisy-student training per system: the teacher labels the pool"
        f"{' with the n-gram LM (weights tuned on dev)' if s['use_lm'] else ''}{_teacher_text(s)}, "
        f"{_filter_text(s)}, a student trains as the system did ({s['steps_scale']:g}x its steps) on the labelled "
        "rows and the kept "
        f"pseudo-labelled ones ({100 * s['share']:.0f}% of every batch) with SpecAugment, dropout and speed "
        f"perturbation {s['speed_perturb']}; the rounds stop when dev CER stops improving, and the round with the "
        "lowest dev CER is the self-trained system. Pseudo-label CER: against what the clips say (known for the "
        "synthetic pool, never read by training).",
        "",
        f"| system | round | labels kept | kept min | pseudo-label CER % all / kept | dev CER % | {split} CER % | "
        "student trainable params |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for name, entry in summary["systems"].items():
        lines.append(f"| {name} | 0 (teacher) | - | - | - | {_pct(entry['teacher_dev_cer'])} | "
                     f"{_pct(entry['test']['no_self_training'])} | - |")
        for r in entry["rounds"]:
            quality = r["labels"].get("quality") or {}
            mark = " (chosen)" if r["round"] == entry["chosen_round"] else ""
            lines.append(
                f"| {name} | {r['round']}{mark} | {r['labels']['kept']} of {r['labels']['rows']} | "
                f"{60 * r['labels']['kept_hours']:.1f} | {_pct(quality.get('cer_all'))} / "
                f"{_pct(quality.get('cer_kept'))} | {_pct(r['dev_cer'])} | {_pct(r['test_cer'])} | "
                f"{'-' if r.get('trainable_params') is None else format(r['trainable_params'], ',')} |"
            )
    first = next((e["rounds"][0] for e in summary["systems"].values() if e["rounds"]), None)
    bins = (first or {}).get("labels", {}).get("quality", {}).get("bins") if first else None
    if bins:
        lines += ["", "Pseudo-labels of the first system's round 1 by utterance confidence:", "",
                  "| confidence | labels | CER % |", "| --- | --- | --- |"]
        lines += [f"| [{b['low']:.1f}, {b['high']:.1f}) | {b['count']} | {_pct(b['cer'])} |" for b in bins]
    lines += ["", f"Evaluation of the self-training rows: {summary['evaluation_seconds']:.0f} s."]
    return "\n".join(lines) + "\n"
