"""The synthetic demo's language-ID report (``adaptspeech demo --lid``, docs/lid.md).

1. **Train** a language-ID head (``stage_lid.yaml``, ``lid.<key>=value`` overrides it) on the fusion stage's model: its
   encoder frozen, over the 6 languages, on ``target_subset`` of each language's training audio (the target has no
   more), written to ``<output_dir>/lid/model`` (the fusion model plus the head). An existing one is reused unless
   ``--lid-retrain``.
2. **Report** on the evaluation split (held-out voices, unseen words), per language: the head's accuracy on whole
   utterances and on their first 1 s and 3 s; the CER with the known language (the system the routing picks for that
   language: the SimAdapter fusion for the target, the language's own adapter for a source) and with automatic
   routing (``evaluate --language auto``), and the difference; the accuracy by utterance duration (0-3 s, 3-5 s,
   > 5 s) for each cut. Where the model folder holds ``lid_calibration.json`` (``evaluate --fit-lid-calibration`` on
   dev), the same for the **hybrid** score (:mod:`adaptspeech.inference.language_id.hybrid`) beside the acoustic head
   alone. Writes ``lid_report.md``, ``lid_report.json``, ``lid_confusion.png`` (whole utterances and 1-s prefixes) and,
   with the hybrid, ``lid_confusion_hybrid.png`` into ``<output_dir>/lid``.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from adaptspeech.overrides import apply_overrides, load_yaml

STAGE_FILE = "stage_lid.yaml"
PREFIX_SECONDS = (1.0, 3.0)
DURATION_BUCKETS = ((0.0, 3.0, "0-3 s"), (3.0, 5.0, "3-5 s"), (5.0, float("inf"), "> 5 s"))
"""Utterance durations the accuracy is broken down by: ``(from, below, name)``."""
LID_PREFIX = "lid."
DEMO_LM_ORDER = 4
"""The order of the demo's per-language character LMs (:func:`language_lms`), chosen on dev on the fully trained demo
(``lid_text_study.py``, docs/lid.md "The text score"): the hybrid with k = 3 is right on 96.17% of dev utterances with
4-grams, 95.83% with 3-grams, 96.00% with 5-grams (and 94.50 / 93.83 / 94.83% when dev's words are first taken out of
the LMs' text)."""


def split_lid_overrides(overrides: Sequence[str]) -> tuple[list[str], list[str]]:
    """``(recipe overrides, LID stage overrides without their "lid." prefix)``."""
    recipe, lid = [], []
    for text in overrides:
        (lid if text.split("=", 1)[0].startswith(LID_PREFIX) else recipe).append(
            text[len(LID_PREFIX):] if text.startswith(LID_PREFIX) else text)
    return recipe, lid


def lid_stage_spec(recipe_dir: Path, spec: Any, prepared: Path, overrides: Sequence[str] = ()) -> dict[str, Any]:
    """The LID stage of a demo run: ``stage_lid.yaml`` over the run's folders and languages, then ``overrides``."""
    stage = load_yaml(recipe_dir / STAGE_FILE)
    languages = [*spec.sources, spec.target]
    out = Path(spec.output_dir)
    stage = {
        **stage,
        "name": "lid",
        "output_dir": str(out / "lid"),
        "seed": spec.seed,
        "data": {"prepared_dir": str(prepared), "train_languages": languages, "train_subset": spec.target_subset,
                 **stage.get("data", {})},
        "model": {**stage.get("model", {}), "init": "pretrained", "path": str(out / "fusion" / "model")},
        "evaluation": {"batch_size": 32, **(stage.get("evaluation") or {})},
    }
    return apply_overrides(stage, list(overrides))


def lid_report(model_dir: Path, prepared: Path, split: str, out_dir: Path, method: str = "ctc_greedy",
               options: dict[str, Any] | None = None, batch_size: int = 32, progress: bool = False) -> dict[str, Any]:
    """Measure and write the report (module docstring, step 2); returns what ``lid_report.json`` holds."""
    from transformers import AutoProcessor

    from adaptspeech import AdaptSpeechForCTC
    from adaptspeech.data.array_rows import column_list
    from adaptspeech.data.prepared_data import load_prepared
    from adaptspeech.evaluation import evaluate_dataset
    from adaptspeech.inference.language_id.hybrid import CALIBRATION_NAME, HybridScorer
    from adaptspeech.inference.language_id.identifiers import HeadIdentifier
    from adaptspeech.inference.language_id.routing import routed_processor, routed_to, system_for
    from adaptspeech.lid_evaluation import choose_languages, evaluate_dataset_auto

    options = dict(options or {})
    model = AdaptSpeechForCTC.from_pretrained(model_dir).eval()
    processor = AutoProcessor.from_pretrained(model_dir)
    dataset, _ = load_prepared(prepared)
    rows = dataset[split]
    rows = rows.select([i for i, lang in enumerate(rows["language"]) if lang in model.config.lid_languages])
    identifier = HeadIdentifier(model, processor)
    scorers: dict[str, Any] = {"acoustic": None}
    if (Path(model_dir) / CALIBRATION_NAME).is_file():
        scorers["hybrid"] = HybridScorer.from_folder(model_dir, identifier.languages)
    truth = column_list(rows, "language")
    durations = duration_seconds(rows, processor)
    systems: dict[str, Any] = {}
    cpu_seconds: dict[str, float] = {"known": 0.0}
    for name, scorer in scorers.items():
        chosen = {cut: choose_languages(model, rows, processor, identifier, scorer, batch_size=batch_size,
                                        prefix_seconds=seconds)
                  for cut, seconds in (("whole", None), *((f"{s:g}s", s) for s in PREFIX_SECONDS))}
        start = time.process_time()
        routed = evaluate_dataset_auto(model, rows, processor, identifier, method, batch_size, progress=progress,
                                       hybrid=scorer, top_k=1 if scorer is None else scorer.calibration.top_k,
                                       **options)
        cpu_seconds[f"routed_{name}"] = time.process_time() - start
        systems[name] = {"accuracy": {cut: choice_report(c, identifier.languages, truth) for cut, c in chosen.items()},
                         "by_duration": {cut: by_duration(c, truth, durations) for cut, c in chosen.items()},
                         "routed": {k: routed[k] for k in ("overall", "lid", "routing")},
                         "routed_cer": {lang: entry["cer"] for lang, entry in routed["per_language"].items()}}
    per_language: dict[str, Any] = {}
    for language in model.config.lid_languages:
        indices = [i for i, lang in enumerate(truth) if lang == language]
        start = time.process_time()
        with routed_to(model, language) as system:
            known = evaluate_dataset(model, rows.select(indices), routed_processor(model, language, processor), method,
                                     batch_size, progress, **options)
        cpu_seconds["known"] += time.process_time() - start
        row: dict[str, Any] = {"system": system, "utterances": len(indices)}
        for name, measured in systems.items():
            tag = "" if name == "acoustic" else f"_{name}"
            for cut, report in measured["accuracy"].items():
                row[f"lid_accuracy_{cut}{tag}"] = report["per_language"][language]["accuracy"]
        row["cer_known"] = known["overall"]["cer"]
        for name, measured in systems.items():
            tag = "" if name == "acoustic" else f"_{name}"
            row[f"cer_routed{tag}"] = measured["routed_cer"][language]
            row[f"cer_difference{tag}"] = row[f"cer_routed{tag}"] - row["cer_known"]
        per_language[language] = row
    assert all(system_for(model, lang) == per_language[lang]["system"] for lang in per_language)
    acoustic = systems["acoustic"]
    result = {"split": split, "method": method, "options": options, "lid": model.config.lid.to_dict(),
              "accuracy": acoustic["accuracy"], "by_duration": acoustic["by_duration"], "routed": acoustic["routed"],
              "per_language": per_language, "cpu_seconds": cpu_seconds}
    if "hybrid" in systems:
        result["hybrid"] = {**systems["hybrid"], "calibration": scorers["hybrid"].calibration.to_dict()}
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "lid_report.json").write_text(json.dumps(result, indent=1, default=float) + "\n")
    (out_dir / "lid_report.md").write_text(report_markdown(result) + "\n")
    plot_confusions(acoustic["accuracy"], out_dir / "lid_confusion.png")
    if "hybrid" in systems:
        plot_confusions(systems["hybrid"]["accuracy"], out_dir / "lid_confusion_hybrid.png")
    return result


def duration_seconds(rows: Any, processor: Any) -> list[float]:
    """Each row's duration in seconds (its ``duration`` column, else its model input's length)."""
    from adaptspeech.data.array_rows import column_list
    from adaptspeech.data.feature_types import FeatureType

    if "duration" in rows.column_names:
        return [float(d) for d in column_list(rows, "duration")]
    kind = FeatureType.of(processor.feature_extractor)
    per_second = kind.num_units(kind.sampling_rate)
    return [n / per_second for n in column_list(rows, "input_length")]


def choice_report(chosen: Sequence[str], languages: Sequence[str], truth: Sequence[str]) -> dict[str, Any]:
    """:func:`~adaptspeech.lid_evaluation.accuracy_report` of chosen languages (one per row)."""
    from adaptspeech.lid_evaluation import accuracy_report

    index = {lang: i for i, lang in enumerate(languages)}
    one_hot = np.full((len(chosen), len(languages)), -np.inf, np.float32)
    one_hot[np.arange(len(chosen)), [index[lang] for lang in chosen]] = 0.0
    return accuracy_report(one_hot, languages, truth)


def by_duration(chosen: Sequence[str], truth: Sequence[str], durations: Sequence[float]) -> dict[str, Any]:
    """Accuracy and row count per :data:`DURATION_BUCKETS` bucket (None where it holds no row)."""
    out = {}
    for low, high, name in DURATION_BUCKETS:
        hits = [c == t for c, t, d in zip(chosen, truth, durations, strict=True) if low <= d < high]
        out[name] = {"accuracy": float(np.mean(hits)) if hits else None, "utterances": len(hits)}
    return out


def report_markdown(result: dict[str, Any]) -> str:
    """The per-language table, the accuracy by utterance duration and the confusions of the whole utterances, for the
    acoustic head and (when reported) the hybrid score."""
    systems = {"acoustic": ("", result)}
    if "hybrid" in result:
        systems["hybrid"] = ("_hybrid", result["hybrid"])
    lines: list[str] = []
    for name, (tag, measured) in systems.items():
        names = list(measured["accuracy"])
        header = ["language", "system", "utt", *[f"LID acc. {n} %" for n in names], "CER known %", "CER routed %",
                  "routed - known"]
        if lines:
            lines += ["", f"**{name}** (k = {measured['routed']['routing']['top_k']}):", ""]
        lines += ["| " + " | ".join(header) + " |", "|" + " --- |" * len(header)]
        for language, row in result["per_language"].items():
            cells = [language, row["system"], str(row["utterances"]),
                     *[f"{100 * row[f'lid_accuracy_{n}{tag}']:.2f}" for n in names],
                     f"{100 * row['cer_known']:.2f}", f"{100 * row[f'cer_routed{tag}']:.2f}",
                     f"{100 * row[f'cer_difference{tag}']:+.2f}"]
            lines.append("| " + " | ".join(cells) + " |")
        overall = [f"{100 * measured['accuracy'][n]['accuracy']:.2f}" for n in names]
        lines.append("| **all** | | " + str(measured["accuracy"]["whole"]["num_utterances"]) + " | "
                     + " | ".join(overall) + f" | | {100 * measured['routed']['overall']['cer']:.2f} | |")
        confusion = measured["accuracy"]["whole"]["confusion"]
        errors = [f"{true} -> {guess}: {n}" for true, row in confusion.items() for guess, n in row.items()
                  if guess != true]
        lines += ["", f"Confusions (whole utterances, {name}): {', '.join(errors) if errors else 'none'}."]
    cpu = result.get("cpu_seconds")
    if cpu:
        extra = [f"{name[len('routed_'):]} routing {cpu[name]:.1f} s ({100 * (cpu[name] / cpu['known'] - 1):+.1f}%)"
                 for name in cpu if name.startswith("routed_") and cpu["known"] > 0]
        lines += ["", f"CPU time over the split (process time, one run): recognition with the known language "
                      f"{cpu['known']:.1f} s; " + "; ".join(extra) + "."]
    lines += ["", "Accuracy by utterance duration (%; utterances in the bucket):", "",
              "| scoring | cut | " + " | ".join(name for _, _, name in DURATION_BUCKETS) + " |",
              "|" + " --- |" * (2 + len(DURATION_BUCKETS))]
    for name, (_, measured) in systems.items():
        for cut, buckets in measured["by_duration"].items():
            cells = ["-" if b["accuracy"] is None else f"{100 * b['accuracy']:.2f} ({b['utterances']})"
                     for b in buckets.values()]
            lines.append(f"| {name} | {cut} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def plot_confusions(accuracy: dict[str, Any], path: Path) -> Path:
    """Row-normalised confusion matrices (true language x identified language), whole utterances and 1-s prefixes."""
    from adaptspeech.recipes.plots import pyplot, save_figure

    plt = pyplot()
    panels = [name for name in ("whole", "1s") if name in accuracy]
    fig, axes = plt.subplots(1, len(panels), figsize=(4.6 * len(panels), 4.2), squeeze=False)
    for ax, name in zip(axes[0], panels, strict=True):
        languages = accuracy[name]["languages"]
        counts = np.array([[accuracy[name]["confusion"].get(t, {}).get(p, 0) for p in languages] for t in languages],
                          dtype=float)
        shares = counts / np.maximum(counts.sum(1, keepdims=True), 1)
        ax.imshow(shares, cmap="Blues", vmin=0.0, vmax=1.0)
        ax.set_xticks(range(len(languages)), labels=languages)
        ax.set_yticks(range(len(languages)), labels=languages)
        ax.set_xlabel("identified language")
        ax.set_ylabel("true language")
        ax.set_title(f"{name} ({100 * accuracy[name]['accuracy']:.1f}% correct)", fontsize=10)
        for i in range(len(languages)):
            for j in range(len(languages)):
                if counts[i, j]:
                    ax.text(j, i, f"{int(counts[i, j])}", ha="center", va="center", fontsize=8,
                            color="white" if shares[i, j] > 0.5 else "black")
    return save_figure(fig, path)


def language_lms(prepared: str | Path, out: Path, languages: Sequence[str], order: int = DEMO_LM_ORDER,
                 unit: str = "char") -> dict[str, Path]:
    """An ``order``-gram LM per language of its training transcripts in ``out/<language>/``, over characters
    (:func:`~adaptspeech.inference.language_id.hybrid.build_char_lm`; the test split's words never occur in training,
    so a word LM scores all of them alike) or words (``adaptspeech lm build``)."""
    from adaptspeech.data.prepared_data import load_prepared
    from adaptspeech.inference.language_id.hybrid import build_char_lm
    from adaptspeech.lm.build import build_arpa

    train = load_prepared(str(prepared))[0]["train"]
    folders = {}
    for language in languages:
        texts = [t for t, lang in zip(train["text"], train["language"], strict=True) if lang == language]
        folders[language] = out / language
        if unit == "char":
            build_char_lm(texts, folders[language], order=order)
            continue
        text = out / "text" / f"{language}.txt"
        text.parent.mkdir(parents=True, exist_ok=True)
        text.write_text("\n".join(texts) + "\n", encoding="utf-8")
        build_arpa(text, folders[language], order=order, progress=False)
    return folders


def fit_hybrid_scoring(model_dir: Path, prepared: Path, top_k: int, batch_size: int = 32) -> Any:
    """The demo's hybrid score: character :data:`DEMO_LM_ORDER`-gram LMs of each language's training transcripts in
    ``model_dir`` (:func:`language_lms`), the calibration fitted on dev with ``top_k`` candidates and saved there."""
    from transformers import AutoProcessor

    from adaptspeech import AdaptSpeechForCTC
    from adaptspeech.data.prepared_data import load_prepared
    from adaptspeech.inference.language_id.hybrid import LanguageLMs, install_language_lms
    from adaptspeech.inference.language_id.identifiers import HeadIdentifier
    from adaptspeech.lid_evaluation import fit_lid_calibration

    model = AdaptSpeechForCTC.from_pretrained(model_dir).eval()
    processor = AutoProcessor.from_pretrained(model_dir)
    identifier = HeadIdentifier(model, processor)
    install_language_lms(model_dir, language_lms(prepared, Path(model_dir).parent / "lms", identifier.languages))
    lms = LanguageLMs.from_folder(model_dir, identifier.languages)
    dev = load_prepared(str(prepared))[0]["dev"]
    calibration = fit_lid_calibration(model, dev, processor, identifier, top_k, lms, batch_size=batch_size)
    calibration.save(model_dir)
    return calibration


def run_lid(recipe_dir: Path, spec: Any, overrides: Sequence[str] = (), retrain: bool = False,
            scoring: str = "acoustic", top_k: int = 2) -> dict[str, Any]:
    """Train the head (unless ``<output_dir>/lid/model`` holds one and not ``retrain``); with ``scoring="hybrid"``
    fit the hybrid score (:func:`fit_hybrid_scoring`, unless the model holds one for ``top_k`` and not ``retrain``;
    with ``"acoustic"`` a calibration left from before is removed); then :func:`lid_report`."""
    from adaptspeech.inference.language_id.hybrid import CALIBRATION_NAME, LIDCalibration
    from adaptspeech.recipes.simadapter.stages import prepare_data
    from adaptspeech.training.stage import run_stage

    prepared = prepare_data(spec)
    stage = lid_stage_spec(recipe_dir, spec, prepared, overrides)
    model_dir = Path(stage["output_dir"]) / "model"
    if retrain or not (model_dir / "config.json").is_file():
        run_stage(stage, progress=spec.progress, overwrite=True)
    calibration = model_dir / CALIBRATION_NAME
    if scoring == "acoustic":
        calibration.unlink(missing_ok=True)
    elif retrain or not calibration.is_file() or LIDCalibration.load(model_dir).top_k != top_k:
        fit_hybrid_scoring(model_dir, Path(prepared), top_k)
    evaluation = spec.evaluation
    return lid_report(model_dir, Path(prepared), evaluation.split, Path(stage["output_dir"]), evaluation.method,
                      dict(evaluation.options or {}), progress=spec.progress)
