"""The attention study: one base stage trained from scratch once per attention kind, all else equal.

``recipe.yaml`` names this module (``python: study.py``) and its task (``task: attention_study``); the engine imports
the module, which registers the task. Its settings (beside those every recipe has)::

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
``kind_result.json`` is finished: a later run skips it (after checking that its settings are still the same,
:func:`finished_kind`) and only tabulates it. :func:`~.report.write_study_results` writes ``results.md`` /
``results.json``, ``summary.png`` (CER against training and inference time), ``training_curves.png`` and
``attention_maps/overview.png``.
"""

from __future__ import annotations

import copy
import json
import re
import shutil
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import torch

from adaptspeech.attention.config import AttentionConfig
from adaptspeech.data.prepared_data import load_prepared, select_languages
from adaptspeech.overrides import load_yaml
from adaptspeech.progress import log
from adaptspeech.recipes.engine import RECIPE_TASKS, Action, RecipeTask, schedule, set_threads
from adaptspeech.recipes.spec import EvaluationSettings, RecipeError, RecipeSpec, Section, check_settings, plain
from adaptspeech.saved_model import load_saved_model
from adaptspeech.settings import (
    BOOL,
    FINITE_POSITIVE,
    INT,
    LANGUAGES,
    MAPPING,
    NON_EMPTY_STR,
    STR,
    SettingType,
    optional,
)
from adaptspeech.training.stage import StageConfigError, StageSpec

from .report import RESULT_FILE, write_study_results

STUDY_TASK = "attention_study"
"""The study's task name (``task:`` in its recipe.yaml)."""
TAG = "attention-study"
"""The study's log lines start ``[attention-study]``."""
TRAIN_TIME_FILE = "train_time.json"
_KIND_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
_STAGE_SECTIONS = ("data", "model", "training", "evaluation")


class StudyError(RecipeError):
    """A study setting that does not fit; the message names it."""


@dataclass(frozen=True)
class StudyKind:
    """One model of the study: an attention kind with its settings, in every encoder layer."""

    name: str
    """Its folder name under ``output_dir/kinds`` and its row in the table."""
    label: str
    """What the table calls it (the name in the papers, e.g. ``Baseline (QK)``)."""
    attention: dict[str, Any]
    """``model.config.attention`` of every encoder layer (``AttentionConfig`` fields)."""

    SETTINGS: ClassVar[Mapping[str, SettingType]] = {"label": optional(STR), "attention": MAPPING}

    @classmethod
    def from_dict(cls, name: str, values: Any) -> StudyKind:
        """The entry ``kinds.<name>`` (``{label, attention}``), its attention checked by ``AttentionConfig``."""
        if not _KIND_NAME.match(str(name)):
            raise StudyError(f"kinds: {name!r} is not a usable folder name (letters, digits, _ . -)")
        entry = check_settings(f"kinds.{name}", values if values is not None else {}, cls.SETTINGS, StudyError)
        attention = entry.get("attention")
        if not isinstance(attention, dict) or "kind" not in attention:
            raise StudyError(f"kinds.{name}.attention: expected a mapping with at least 'kind', got {values!r}")
        try:
            AttentionConfig.from_dict(dict(attention))
        except ValueError as err:
            raise StudyError(f"kinds.{name}: {err}") from err
        return cls(str(name), str(entry.get("label") or name), dict(attention))


@dataclass(frozen=True)
class MapSettings(Section):
    """The ``attention_maps`` section: the test utterance the maps are read on and the overview's layer.

    Args:
        language: its language (None: the first source).
        seconds: the utterance whose duration is closest to this.
        overview_layer: the layer of ``attention_maps/overview.png`` (an index into the layers: -1 = the last).
    """

    language: str | None = None
    seconds: float = 3.0
    overview_layer: int = -1

    SETTINGS: ClassVar[Mapping[str, SettingType]] = {
        "language": optional(NON_EMPTY_STR),
        "seconds": SettingType(FINITE_POSITIVE.description, FINITE_POSITIVE.accepts, float),
        "overview_layer": INT,
    }


_BASE_STAGE = SettingType(
    "a stage file (a path from the recipe folder) or the stage's settings",
    lambda v: (isinstance(v, str) and v.strip() != "") or isinstance(v, Mapping),
)


@dataclass(frozen=True, kw_only=True)
class StudySpec(RecipeSpec):
    """The study's settings (module docstring), checked once when loaded.

    Args:
        prepared_from: the prepared folder the study copies.
        sources: training and test languages.
        base_stage: the stage every kind trains (its settings).
        base_stage_file: the file they were read from (None: given inline).
        stage: settings deep-merged over ``base_stage``.
        kinds: the models, in table order.
        evaluation: the sources' test-set pass.
        attention_maps: where the maps are read.
        keep_checkpoints: keep a finished kind's checkpoints.
    """

    prepared_from: Path
    sources: tuple[str, ...]
    base_stage: dict[str, Any]
    base_stage_file: str | None = None
    stage: dict[str, Any] = field(default_factory=dict)
    kinds: tuple[StudyKind, ...]
    evaluation: EvaluationSettings = field(default_factory=EvaluationSettings)
    attention_maps: MapSettings = field(default_factory=MapSettings)
    keep_checkpoints: bool = False

    SETTINGS: ClassVar[Mapping[str, SettingType]] = {
        "prepared_from": NON_EMPTY_STR,
        "sources": LANGUAGES,
        "base_stage": _BASE_STAGE,
        "stage": MAPPING,
        "kinds": MAPPING,
        "evaluation": MAPPING,
        "attention_maps": MAPPING,
        "keep_checkpoints": BOOL,
    }
    REQUIRED: ClassVar[tuple[str, ...]] = ("prepared_from", "sources", "base_stage", "kinds")
    ERROR: ClassVar[type[RecipeError]] = StudyError

    @classmethod
    def convert(cls, values: dict[str, Any], folder: Path) -> dict[str, Any]:
        values = super().convert(values, folder)
        values["prepared_from"] = Path(values["prepared_from"])
        values["sources"] = tuple(values["sources"])
        base = values["base_stage"]
        if isinstance(base, str):
            values["base_stage_file"] = base
            values["base_stage"] = load_yaml(folder / base)
        else:
            values["base_stage"] = dict(base)
        stage = check_settings("stage", values.get("stage") or {}, dict.fromkeys(_STAGE_SECTIONS, MAPPING), StudyError)
        if "attention" in ((stage.get("model") or {}).get("config") or {}):
            raise StudyError("stage.model.config.attention: set by each entry of kinds (kinds.<name>.attention)")
        values["stage"] = stage
        values["kinds"] = tuple(StudyKind.from_dict(name, entry) for name, entry in values["kinds"].items())
        values["evaluation"] = EvaluationSettings.from_dict("evaluation", values.get("evaluation"), StudyError)
        values["attention_maps"] = MapSettings.from_dict("attention_maps", values.get("attention_maps"), StudyError)
        return values

    def to_dict(self) -> dict[str, Any]:
        values = super().to_dict()
        values["base_stage"] = values.pop("base_stage_file") or values["base_stage"]
        values["kinds"] = {k.name: {"label": k.label, "attention": plain(k.attention)} for k in self.kinds}
        return values


# ---- settings of one kind --------------------------------------------------------------------------------------


def _deep_merge(base: dict[str, Any], over: Mapping[str, Any]) -> dict[str, Any]:
    """``base`` with ``over`` merged in: nested mappings merge key by key, anything else replaces."""
    merged = copy.deepcopy(base)
    for key, value in over.items():
        if isinstance(value, Mapping) and isinstance(merged.get(key), dict):
            merged[key] = _deep_merge(merged[key], value)
        else:
            merged[key] = copy.deepcopy(value)
    return merged


def kind_spec(study: StudySpec, kind: StudyKind, prepared: Path) -> dict[str, Any]:
    """The validated stage spec (a dict for :func:`~adaptspeech.training.stage.run_stage`) of one kind: the base
    stage with the study's ``stage`` merged in, its own output folder, the sources, and its attention."""
    spec = _deep_merge(study.base_stage, study.stage)
    spec["name"] = kind.name
    spec["output_dir"] = str(study.output_dir / "kinds" / kind.name)
    spec["seed"] = study.seed
    data = {**(spec.get("data") or {}), "prepared_dir": str(prepared), "train_languages": list(study.sources)}
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


def prepare_study_data(study: StudySpec) -> Path:
    """Copy ``prepared_from`` into ``output_dir/prepared`` once (without the datasets cache files, which the study
    then writes into its own copy); returns the copy. An existing complete copy is reused."""
    from adaptspeech.data.prepared_corpus import COMPLETE_MARKER

    source = study.prepared_from
    target = study.output_dir / "prepared"
    if (target / COMPLETE_MARKER).is_file():
        log(f"prepared data found in {target}: reusing it", TAG)
        return target
    if not (source / COMPLETE_MARKER).is_file() or not (source / "dataset").is_dir():
        raise StudyError(f"prepared_from: {source} is not a complete prepared folder (run `adaptspeech prepare`)")
    partial = target.with_name(f".{target.name}.partial")
    shutil.rmtree(partial, ignore_errors=True)
    start = time.perf_counter()
    shutil.copytree(source, partial, ignore=shutil.ignore_patterns("cache-*.arrow"))
    partial.rename(target)
    log(f"copied {source} -> {target} in {time.perf_counter() - start:.0f} s", TAG)
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
    from adaptspeech.training.resume import last_checkpoint
    from adaptspeech.training.stage import run_stage

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


def evaluate_kind(study: StudySpec, model: Any, test: Any, processor: Any) -> dict[str, Any]:
    """CER on the sources' test utterances (per language, their mean, overall) and the seconds of the pass."""
    from adaptspeech.evaluation import evaluate_dataset

    evaluation = study.evaluation
    model.eval()
    wall, cpu = time.perf_counter(), time.process_time()
    metrics = evaluate_dataset(
        model,
        test,
        processor,
        method=evaluation.method,
        batch_size=evaluation.batch_size,
        progress=False,
        **dict(evaluation.options),
    )
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    per_language = {lang: metrics["per_language"][lang]["cer"] for lang in study.sources}
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


def kind_attention_maps(study: StudySpec, kind: StudyKind, model: Any, test: Any, processor: Any) -> dict[str, Any]:
    """Read and plot the attention maps of ``model`` on the study's chosen test utterance; the weights go to
    ``kinds/<kind>/attention_maps.npz``, the grid to ``attention_maps/<kind>.png``."""
    from adaptspeech.data.collator import DataCollatorCTCWithPadding
    from adaptspeech.data.feature_types import feature_type_of_model

    from .attention_maps import attention_modules, model_attention_maps, plot_attention_maps

    settings = study.attention_maps
    language = settings.language or study.sources[0]
    index = pick_utterance(test, language, settings.seconds)
    row = test[index]
    utterance = {"index": index, "language": language, "seconds": float(row["duration"]), "text": row["text"]}
    if not attention_modules(model):
        return {"utterance": utterance, "skipped": "the backbone's own attention (kind: default) is not read"}
    collator = DataCollatorCTCWithPadding(processor, feature_type=feature_type_of_model(model))
    batch = collator([row])
    batch.pop("labels", None)
    batch = {k: v.to(model.device) for k, v in batch.items()}
    maps = model_attention_maps(model, batch)
    out = study.output_dir
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


def finished_kind(study: StudySpec, kind: StudyKind, prepared: Path) -> dict[str, Any]:
    """The ``kind_result.json`` of a kind that finished before, unless its settings changed since (refused: its
    folder must be removed to retrain it, or the settings restored)."""
    spec = kind_spec(study, kind, prepared)
    folder = Path(spec["output_dir"])
    result_path = folder / RESULT_FILE
    saved = json.loads(result_path.read_text())
    changed = _settings_difference(saved["spec"], json.loads(json.dumps(spec)))
    if changed:
        raise StudyError(
            f"kinds.{kind.name}: finished with other settings ({changed}); remove {folder} to retrain it, or "
            "restore the settings"
        )
    log(f"{kind.name}: finished before, skipped ({result_path})", TAG)
    return saved


def run_kind(study: StudySpec, kind: StudyKind, prepared: Path) -> dict[str, Any]:
    """Train (unless trained before), evaluate and read one kind; writes and returns its ``kind_result.json``."""
    spec = kind_spec(study, kind, prepared)
    folder = Path(spec["output_dir"])
    result_path = folder / RESULT_FILE
    trained = all((folder / name).exists() for name in ("stage_summary.json", "model", TRAIN_TIME_FILE))
    if trained:
        log(f"{kind.name}: trained before, evaluating it", TAG)
        timing = json.loads((folder / TRAIN_TIME_FILE).read_text())
    else:
        steps = spec.get("training", {}).get("max_steps")
        log(f"{kind.name}: training ({kind.attention}, {steps} steps)", TAG)
        timing = _train(spec, folder, study.progress)
    summary = json.loads((folder / "stage_summary.json").read_text())
    dataset, processor = load_prepared(prepared)
    split = study.evaluation.split
    test = select_languages(dataset[split], list(study.sources), split, "evaluation")
    model = load_saved_model(folder / "model")
    scores = evaluate_kind(study, model, test, processor)
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
    if not study.keep_checkpoints:
        shutil.rmtree(folder / "checkpoints", ignore_errors=True)
    return result


# ---- the whole study -------------------------------------------------------------------------------------------


def run_study(study: StudySpec, only: Sequence[str] | None = None) -> dict[str, Any]:
    """Run every kind of the study (``only``: just these) that has not finished, then write the table and figures.

    Returns:
        :func:`~.report.write_study_results`'s summary.
    """
    task = AttentionStudy()
    scheduled = [(kind, action) for kind, action in schedule(task, study, only) if action is not Action.LEAVE]
    set_threads(study)
    study.output_dir.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    prepared = prepare_study_data(study)
    for kind in study.kinds:
        kind_spec(study, kind, prepared)  # every setting checked before the long work
    spent: list[float] = []  # seconds of the kinds run now (not the skipped ones), for the estimate
    for number, (kind, action) in enumerate(scheduled, 1):
        assert isinstance(kind, StudyKind)
        kind_start = time.perf_counter()
        log(f"kind {number}/{len(scheduled)}: {kind.name}", TAG)
        if action is Action.REUSE:
            result = finished_kind(study, kind, prepared)
        else:
            result = run_kind(study, kind, prepared)
            spent.append(time.perf_counter() - kind_start)
        left = len(scheduled) - number
        eta = f", about {left * np.mean(spent) / 60:.0f} min left" if spent and left else ""
        log(
            f"{kind.name}: source test CER {100 * result['cer_average']:.2f}%, train {result['train_seconds']:.0f} s, "
            f"test pass {result['test_seconds']:.1f} s ({(time.perf_counter() - start) / 60:.1f} min so far{eta})",
            TAG,
        )
    return write_study_results(study, list(study.kinds), run_seconds=time.perf_counter() - start)


@RECIPE_TASKS.register(STUDY_TASK)
class AttentionStudy(RecipeTask):
    """The attention study (module docstring): a finished kind is skipped, ``--only`` runs some kinds and leaves the
    others as they are; the table lists every finished kind."""

    spec_class = StudySpec
    outside_only = Action.LEAVE
    skip_finished = True
    step_noun = "kind"
    outputs = ("results.md", "results.json", "summary.png", "training_curves.png", "attention_maps")

    def plan(self, spec: RecipeSpec) -> list[StudyKind]:
        assert isinstance(spec, StudySpec)
        return list(spec.kinds)

    def finished(self, spec: RecipeSpec, step: Any) -> bool:
        return (spec.output_dir / "kinds" / step.name / RESULT_FILE).is_file()

    def run(self, spec: RecipeSpec, only: Sequence[str] | None = None) -> dict[str, Any]:
        assert isinstance(spec, StudySpec)
        return run_study(spec, only)
