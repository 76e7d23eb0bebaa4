"""The attention study: one base stage trained from scratch once per attention kind, all else equal.

A study folder holds ``recipe.yaml`` with ``kind: attention_study`` (``adaptspeech recipe FOLDER`` dispatches on
it); its settings::

    kind: attention_study
    output_dir: runs/attention_study
    threads: 1                   # torch threads (timings are per thread count)
    seed: 0
    progress: true               # the Trainer's progress bar (false: its log lines)
    prepared_from: runs/synthetic_demo/prepared   # a prepared folder (`adaptspeech prepare`); copied once into
                                            # output_dir/prepared without the datasets cache files, never written
    sources: [cs, pl, sl, it, es]           # training and test languages
    base_stage: ../synthetic_demo/stage_base.yaml   # the stage every kind trains (model, training settings)
    stage: {training: {max_steps: 150}}     # deep-merged over base_stage: the study's budget
    kinds:                       # name -> the attention of every encoder layer (AttentionConfig fields)
      mhsa: {label: Baseline (QK), attention: {kind: mhsa}}
    evaluation: {split: test, method: ctc_greedy, batch_size: 16, options: {}}
    attention_maps: {language: null, seconds: 3.0, overview_layer: -1}
    keep_checkpoints: false

Every setting can be overridden as ``key=value`` (``stage.training.max_steps=20``, ``kinds.ldsa.attention.
context_width=31``). Per kind, :func:`run_kind` trains the stage into ``output_dir/kinds/<kind>`` (resuming from its
last checkpoint if one is there), evaluates it on the sources' test utterances (CER per language and on average,
the wall and CPU seconds of the test-set pass: forward and greedy decoding), counts its parameters and reads its
attention maps on one test utterance (:mod:`.attention_maps`), and writes ``kind_result.json``. A kind with a
``kind_result.json`` is finished: a later run skips it (after checking that its settings are still the same) and
only tabulates it. :func:`write_study_results` writes ``results.md`` / ``results.json``, ``summary.png`` (CER
against training and inference time), ``training_curves.png`` and ``attention_maps/overview.png``.
"""

from __future__ import annotations

import copy
import json
import os
import re
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ..attention.config import AttentionConfig
from ..training.stage import StageConfigError, StageSpec, apply_overrides, load_prepared, load_yaml, select_languages
from .attention_study_report import RESULT_FILE, write_study_results
from .simadapter import RecipeError

#: the ``kind`` field of a study's recipe.yaml
STUDY_KIND = "attention_study"
STUDY_KEYS = (
    "kind",
    "name",
    "output_dir",
    "threads",
    "seed",
    "progress",
    "prepared_from",
    "sources",
    "base_stage",
    "stage",
    "kinds",
    "evaluation",
    "attention_maps",
    "keep_checkpoints",
)
KIND_KEYS = ("label", "attention")
EVALUATION_KEYS = ("split", "method", "batch_size", "options")
MAPS_KEYS = ("language", "seconds", "overview_layer")
TRAIN_TIME_FILE = "train_time.json"
_KIND_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")


class StudyError(RecipeError):
    """A study setting that does not fit; the message names it."""


@dataclass(frozen=True)
class PlannedKind:
    """One model of the study."""

    name: str
    """Its folder name under ``output_dir/kinds`` and its row in the table."""
    label: str
    """What the table calls it (e.g. the seed's name, ``Baseline (QK)``)."""
    attention: dict[str, Any]
    """``model.config.attention`` of every encoder layer (``AttentionConfig`` fields)."""


def _log(message: str) -> None:
    print(f"[attention-study] {message}", flush=True)


# ---- settings --------------------------------------------------------------------------------------------------


def _recipe_file(path: str | os.PathLike) -> Path:
    path = Path(path)
    return path / "recipe.yaml" if path.is_dir() else path


def is_study(path: str | os.PathLike) -> bool:
    """True when ``path`` (a folder with recipe.yaml, or the file) is an attention study (``kind:
    attention_study``)."""
    file = _recipe_file(path)
    if not file.is_file():
        return False
    try:
        return load_yaml(file).get("kind") == STUDY_KIND
    except StageConfigError:
        return False


def _deep_merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    """``base`` with ``over`` merged in: nested mappings merge key by key, anything else replaces."""
    merged = copy.deepcopy(base)
    for key, value in over.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = _deep_merge(merged[key], value)
        else:
            merged[key] = copy.deepcopy(value)
    return merged


def _check_mapping(section: str, values: Any, allowed: tuple[str, ...]) -> dict[str, Any]:
    if values is None:
        return {}
    if not isinstance(values, dict):
        raise StudyError(f"{section}: expected a mapping of settings, got {values!r}")
    unknown = sorted(set(values) - set(allowed))
    if unknown:
        raise StudyError(f"{section}: unknown setting(s) {', '.join(unknown)}; allowed: {', '.join(allowed)}")
    return values


def load_study(path: str | os.PathLike, overrides: list[str] | None = None) -> dict[str, Any]:
    """Read a study's ``recipe.yaml``, apply ``a.b=value`` overrides, load its base stage; validate.

    The base stage (``base_stage``: a path relative to the recipe folder, or the stage settings themselves) is kept
    under ``_base_stage``; the recipe folder under ``_dir``.

    Raises:
        StudyError: one line naming the setting.
    """
    file = _recipe_file(path)
    if not file.is_file():
        raise StudyError(f"{file}: no such file (an attention study is a folder with recipe.yaml)")
    study = apply_overrides(load_yaml(file), overrides or [])
    study["_dir"] = str(file.parent)
    _check_mapping("recipe", {k: v for k, v in study.items() if k != "_dir"}, STUDY_KEYS)
    if study.get("kind") != STUDY_KIND:
        raise StudyError(f"{file}: kind must be {STUDY_KIND!r}, got {study.get('kind')!r}")
    for key in ("output_dir", "prepared_from", "sources", "base_stage", "kinds"):
        if not study.get(key):
            raise StudyError(f"recipe: missing required setting {key!r}")
    sources = study["sources"]
    if not isinstance(sources, list) or not all(isinstance(s, str) for s in sources):
        raise StudyError(f"sources: expected a list of language codes, got {sources!r}")
    base = study["base_stage"]
    study["_base_stage"] = load_yaml(file.parent / base) if isinstance(base, str) else dict(base)
    stage = _check_mapping("stage", study.get("stage"), ("data", "model", "training", "evaluation"))
    if "attention" in ((stage.get("model") or {}).get("config") or {}):
        raise StudyError("stage.model.config.attention: set by each entry of kinds (kinds.<name>.attention)")
    if not isinstance(study["kinds"], dict):
        raise StudyError(f"kinds: expected a mapping of name -> {{label, attention}}, got {study['kinds']!r}")
    for name, entry in study["kinds"].items():
        if not _KIND_NAME.match(str(name)):
            raise StudyError(f"kinds: {name!r} is not a usable folder name (letters, digits, _ . -)")
        entry = _check_mapping(f"kinds.{name}", entry, KIND_KEYS)
        if not isinstance(entry.get("attention"), dict) or "kind" not in entry["attention"]:
            raise StudyError(f"kinds.{name}.attention: expected a mapping with at least 'kind', got {entry!r}")
        try:
            AttentionConfig.from_dict(dict(entry["attention"]))
        except ValueError as err:
            raise StudyError(f"kinds.{name}: {err}") from err
    _check_mapping("evaluation", study.get("evaluation"), EVALUATION_KEYS)
    _check_mapping("attention_maps", study.get("attention_maps"), MAPS_KEYS)
    return study


def study_plan(study: dict[str, Any]) -> list[PlannedKind]:
    """The kinds of ``study`` in the order of ``kinds``."""
    return [
        PlannedKind(str(name), str(entry.get("label") or name), dict(entry["attention"]))
        for name, entry in study["kinds"].items()
    ]


def kind_spec(study: dict[str, Any], kind: PlannedKind, prepared: Path) -> dict[str, Any]:
    """The validated stage spec (a dict for :func:`~adaptspeech.training.stage.run_stage`) of one kind: the base
    stage with the study's ``stage`` merged in, its own output folder, the sources, and its attention."""
    spec = _deep_merge(study["_base_stage"], study.get("stage") or {})
    spec["name"] = kind.name
    spec["output_dir"] = str(Path(study["output_dir"]) / "kinds" / kind.name)
    spec["seed"] = int(study.get("seed", spec.get("seed", 0)))
    data = {**(spec.get("data") or {}), "prepared_dir": str(prepared), "train_languages": list(study["sources"])}
    spec["data"] = data
    model = dict(spec.get("model") or {})
    model["config"] = {**(model.get("config") or {}), "attention": dict(kind.attention)}
    spec["model"] = model
    try:
        StageSpec.from_dict(spec)
    except StageConfigError as err:
        raise StudyError(f"kinds.{kind.name}: {err}") from err
    return spec


# ---- data ------------------------------------------------------------------------------------------------------


def prepare_study_data(study: dict[str, Any]) -> Path:
    """Copy ``prepared_from`` into ``output_dir/prepared`` once (without the datasets cache files, which the study
    then writes into its own copy); returns the copy. An existing complete copy is reused."""
    from ..data.pipeline import COMPLETE_MARKER

    source = Path(study["prepared_from"])
    target = Path(study["output_dir"]) / "prepared"
    if (target / COMPLETE_MARKER).is_file():
        _log(f"prepared data found in {target}: reusing it")
        return target
    if not (source / COMPLETE_MARKER).is_file() or not (source / "dataset").is_dir():
        raise StudyError(f"prepared_from: {source} is not a complete prepared folder (run `adaptspeech prepare`)")
    partial = target.with_name(f".{target.name}.partial")
    shutil.rmtree(partial, ignore_errors=True)
    start = time.perf_counter()
    shutil.copytree(source, partial, ignore=shutil.ignore_patterns("cache-*.arrow"))
    partial.rename(target)
    _log(f"copied {source} -> {target} in {time.perf_counter() - start:.0f} s")
    return target


def pick_utterance(test: Any, language: str, seconds: float) -> int:
    """Index (in ``test``) of the ``language`` utterance whose duration is closest to ``seconds`` (first on ties)."""
    languages, durations = test["language"], test["duration"]
    candidates = [i for i, lang in enumerate(languages) if lang == language]
    if not candidates:
        raise StudyError(f"attention_maps.language: no {language!r} utterance in the evaluation split")
    return min(candidates, key=lambda i: (abs(float(durations[i]) - seconds), i))


# ---- one kind --------------------------------------------------------------------------------------------------


def _settings_difference(saved: dict[str, Any], current: dict[str, Any], prefix: str = "") -> str | None:
    """The first setting that differs between two specs, as ``key: old -> new`` (None: the same)."""
    for key in sorted(set(saved) | set(current)):
        a, b = saved.get(key), current.get(key)
        if isinstance(a, dict) and isinstance(b, dict):
            found = _settings_difference(a, b, f"{prefix}{key}.")
            if found:
                return found
        elif a != b:
            return f"{prefix}{key}: {a!r} -> {b!r}"
    return None


def _load_model(folder: Path) -> Any:
    from ..training.stage import model_class_for_head, saved_head

    return model_class_for_head(saved_head(folder)).from_pretrained(folder)


def _attention_parameters(model: torch.nn.Module) -> int | None:
    """Parameters of the attention-kind modules (nested ones counted once, with their parent); None when the
    backbone keeps its own attention (``kind: default``: not counted)."""
    from .attention_maps import attention_modules

    modules = attention_modules(model)
    if not modules:
        return None
    top = [(n, m) for n, m in modules if not any(n.startswith(p + ".") for p, _ in modules)]
    return sum(p.numel() for _, m in top for p in m.parameters())


def _train(spec: dict[str, Any], folder: Path, progress: bool) -> dict[str, Any]:
    """Train the stage (resuming from its last checkpoint if any); record and return its time."""
    from ..training.resume import last_checkpoint
    from ..training.stage import run_stage

    resumed_from = last_checkpoint(folder / "checkpoints") if (folder / "checkpoints").is_dir() else None
    cpu = time.process_time()
    result = run_stage(spec, resume=True, progress=progress)
    timing = {
        "train_seconds": result.train_seconds,
        "train_cpu_seconds": time.process_time() - cpu,
        "resumed_from": resumed_from,
    }
    (folder / TRAIN_TIME_FILE).write_text(json.dumps(timing, indent=2) + "\n")
    return timing


def evaluate_kind(
    study: dict[str, Any], kind: PlannedKind, model: Any, test: Any, processor: Any
) -> dict[str, Any]:
    """CER on the sources' test utterances (per language, their mean, overall) and the seconds of the pass."""
    from ..evaluation import evaluate_dataset

    evaluation = dict(study.get("evaluation") or {})
    model.eval()
    wall, cpu = time.perf_counter(), time.process_time()
    metrics = evaluate_dataset(
        model,
        test,
        processor,
        method=evaluation.get("method", "ctc_greedy"),
        batch_size=int(evaluation.get("batch_size", 16)),
        progress=False,
        **dict(evaluation.get("options") or {}),
    )
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    per_language = {lang: metrics["per_language"][lang]["cer"] for lang in study["sources"]}
    return {
        "cer_average": float(np.mean(list(per_language.values()))),
        "cer_per_language": per_language,
        "cer_overall": metrics["overall"]["cer"],
        "wer_overall": metrics["overall"]["wer"],
        "test_seconds": wall,
        "test_cpu_seconds": cpu,
        "test_utterances": len(test),
        "decoding": metrics["method"],
    }


def kind_attention_maps(
    study: dict[str, Any], kind: PlannedKind, model: Any, test: Any, processor: Any
) -> dict[str, Any]:
    """Read and plot the attention maps of ``model`` on the study's chosen test utterance; the weights go to
    ``kinds/<kind>/attention_maps.npz``, the grid to ``attention_maps/<kind>.png``."""
    from ..data.collator import DataCollatorCTCWithPadding
    from ..evaluation import feature_type_of_model
    from .attention_maps import attention_modules, model_attention_maps, plot_attention_maps

    settings = dict(study.get("attention_maps") or {})
    language = settings.get("language") or study["sources"][0]
    index = pick_utterance(test, language, float(settings.get("seconds", 3.0)))
    row = test[index]
    utterance = {"index": index, "language": language, "seconds": float(row["duration"]), "text": row["text"]}
    if not attention_modules(model):
        return {"utterance": utterance, "skipped": "the backbone's own attention (kind: default) is not read"}
    collator = DataCollatorCTCWithPadding(processor, feature_type=feature_type_of_model(model))
    batch = collator([row])
    batch.pop("labels", None)
    batch = {k: v.to(model.device) for k, v in batch.items()}
    maps = model_attention_maps(model, batch)
    out = Path(study["output_dir"])
    np.savez_compressed(
        out / "kinds" / kind.name / "attention_maps.npz", **{m.label: m.weights.astype(np.float16) for m in maps}
    )
    frames = maps[0].weights.shape[-1]
    png = plot_attention_maps(
        maps,
        out / "attention_maps" / f"{kind.name}.png",
        f"{kind.name} ({kind.label}): {language} test utterance, {utterance['seconds']:.1f} s, {frames} frames",
    )
    return {
        "utterance": {**utterance, "frames": frames},
        "png": str(png),
        "modules": [{"name": m.name, "label": m.label, "reconstruction_error": m.error} for m in maps],
    }


def run_kind(study: dict[str, Any], kind: PlannedKind, prepared: Path) -> dict[str, Any]:
    """Train, evaluate and read one kind unless it finished before; returns its ``kind_result.json``.

    A finished kind whose settings changed since is refused (its folder must be removed to retrain it).
    """
    spec = kind_spec(study, kind, prepared)
    folder = Path(spec["output_dir"])
    result_path = folder / RESULT_FILE
    if result_path.is_file():
        saved = json.loads(result_path.read_text())
        changed = _settings_difference(saved["spec"], json.loads(json.dumps(spec)))
        if changed:
            raise StudyError(
                f"kinds.{kind.name}: finished with other settings ({changed}); remove {folder} to retrain it, or "
                "restore the settings"
            )
        _log(f"{kind.name}: finished before, skipped ({result_path})")
        return saved
    progress = bool(study.get("progress", True))
    trained = all((folder / name).exists() for name in ("stage_summary.json", "model", TRAIN_TIME_FILE))
    if trained:
        _log(f"{kind.name}: trained before, evaluating it")
        timing = json.loads((folder / TRAIN_TIME_FILE).read_text())
    else:
        steps = spec.get("training", {}).get("max_steps")
        _log(f"{kind.name}: training ({kind.attention}, {steps} steps)")
        timing = _train(spec, folder, progress)
    summary = json.loads((folder / "stage_summary.json").read_text())
    dataset, processor = load_prepared(prepared)
    split = (study.get("evaluation") or {}).get("split", "test")
    test = select_languages(dataset[split], list(study["sources"]), split, "evaluation")
    model = _load_model(folder / "model")
    scores = evaluate_kind(study, kind, model, test, processor)
    maps = kind_attention_maps(study, kind, model, test, processor)
    eval_split = spec["data"].get("eval_split", "dev")
    result = {
        "kind": kind.name,
        "label": kind.label,
        "attention": kind.attention,
        **scores,
        "dev_cer": (summary.get(eval_split) or {}).get("overall", {}).get("cer"),
        **timing,
        "steps": summary.get("global_step"),
        "parameters": sum(p.numel() for p in model.parameters()),
        "attention_parameters": _attention_parameters(model),
        "attention_maps": maps,
        "spec": json.loads(json.dumps(spec)),
    }
    partial = result_path.with_suffix(".partial")
    partial.write_text(json.dumps(result, indent=2, default=float) + "\n")
    partial.rename(result_path)
    if not study.get("keep_checkpoints", False):
        shutil.rmtree(folder / "checkpoints", ignore_errors=True)
    return result


# ---- the whole study -------------------------------------------------------------------------------------------


def run_study(study: dict[str, Any], only: list[str] | None = None) -> dict[str, Any]:
    """Run every kind of the plan (``only``: just these) that has not finished, then write the table and figures.

    Returns:
        :func:`write_study_results`'s summary.
    """
    plan = study_plan(study)
    names = [k.name for k in plan]
    unknown = sorted(set(only or []) - set(names))
    if unknown:
        raise StudyError(f"--only: unknown kind(s) {', '.join(unknown)}; the study's kinds: {', '.join(names)}")
    if study.get("threads"):
        torch.set_num_threads(int(study["threads"]))
    out = Path(study["output_dir"])
    out.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    prepared = prepare_study_data(study)
    for kind in plan:
        kind_spec(study, kind, prepared)  # every setting checked before the long work
    selected = [k for k in plan if not only or k.name in only]
    spent: list[float] = []  # seconds of the kinds run now (not the skipped ones), for the estimate
    for number, kind in enumerate(selected, 1):
        kind_start = time.perf_counter()
        _log(f"kind {number}/{len(selected)}: {kind.name}")
        finished_before = (out / "kinds" / kind.name / RESULT_FILE).is_file()
        result = run_kind(study, kind, prepared)
        if not finished_before:
            spent.append(time.perf_counter() - kind_start)
        left = len(selected) - number
        eta = f", about {left * np.mean(spent) / 60:.0f} min left" if spent and left else ""
        _log(
            f"{kind.name}: source test CER {100 * result['cer_average']:.2f}%, train {result['train_seconds']:.0f} s, "
            f"test pass {result['test_seconds']:.1f} s ({(time.perf_counter() - start) / 60:.1f} min so far{eta})"
        )
    return write_study_results(study, plan, run_seconds=time.perf_counter() - start)


def run_study_cli(recipe_dir: str | os.PathLike, args: Any) -> int:
    """``adaptspeech recipe STUDY_FOLDER [--only KIND,KIND] [--no-progress] [key=value ...]``."""
    if getattr(args, "dry_run", False):
        raise StudyError(
            "--dry-run: not for an attention study; run a short one with stage.training.max_steps=N instead"
        )
    only = [k.strip() for k in (args.only or "").split(",") if k.strip()] or None
    overrides = list(args.overrides) + (["progress=false"] if args.no_progress else [])
    study = load_study(recipe_dir, overrides)
    from ..cli.common import library_progress_bars

    with library_progress_bars(enabled=bool(study.get("progress", True))):
        run_study(study, only=only)
    out = Path(study["output_dir"])
    print((out / "results.md").read_text())
    print(f"wrote {out / 'results.md'}, results.json, summary.png, training_curves.png and attention_maps/")
    return 0
