"""The stages of a SimAdapter protocol run (:mod:`~adaptspeech.recipes.simadapter.protocol`): the prepared data, the
plan (stages and baselines in the order they run), each stage's spec for the stage runner, training a stage (continuing
one that was interrupted) and reading a stage that ran before."""

from __future__ import annotations

import copy
import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ...data.prepared_corpus import prepare_corpus
from ...data.synthetic import build_synthetic_corpus
from ...progress import log
from ...training.resume import STAGE_SPEC_FILE, changed_settings, last_checkpoint
from ...training.stage import StageSpec, run_stage
from ..spec import RecipeError
from .spec import SimAdapterRecipe

#: the prepared data's folder inside the recipe's ``output_dir``
PREPARED = "prepared"


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
    subset: str | int | None
    """The low-resource budget of its training data (the recipe's ``target_subset`` for target stages)."""


def prepare_data(spec: SimAdapterRecipe) -> Path:
    """Build (synthetic) or locate (Common Voice) the corpus and prepare it once; returns the prepared folder."""
    out = spec.output_dir
    corpus = spec.corpus
    languages = [*spec.sources, spec.target]
    prepared_dir = out / PREPARED
    if (prepared_dir / "dataset" / "dataset_dict.json").is_file() and (prepared_dir / "processor").is_dir():
        log(f"prepared data found in {prepared_dir}: reusing it")
        return prepared_dir
    if corpus.type == "synthetic":
        root: Any = Path(corpus.root or out / "corpus")
        start = time.perf_counter()
        summary = build_synthetic_corpus(
            root,
            languages=languages,
            clips_per_language=corpus.clips_per_language,
            seed=spec.seed if corpus.seed is None else corpus.seed,
            num_workers=corpus.workers,
            progress=spec.progress,
            **corpus.synthetic,
        )
        log(
            f"synthetic corpus: {summary.get('clips_written', '?')} clips written in "
            f"{time.perf_counter() - start:.0f} s -> {root}"
        )
    else:
        root = corpus.root
        if not root:
            raise RecipeError("corpus.root: the Common Voice release folder (cv-corpus-*/) or a Hub dataset id")
    start = time.perf_counter()
    prepare_corpus(root, languages, prepared_dir, **{**spec.prepare, "overwrite": True})  # the recipe's own folder
    log(f"prepared {', '.join(languages)} in {time.perf_counter() - start:.0f} s -> {prepared_dir}")
    return prepared_dir


def recipe_plan(spec: SimAdapterRecipe) -> list[PlannedStage]:
    """The stages and baselines of ``spec`` in the order they run."""
    sources, target, subset = list(spec.sources), spec.target, spec.target_subset
    plan = [
        PlannedStage("base", "stages", sources, None, None),
        PlannedStage("source_adapters", "stages", sources, "base", None),
        PlannedStage("target_adapter", "stages", [target], "source_adapters", subset),
        PlannedStage("fusion", "stages", [target], "target_adapter", subset),
    ]
    for name, previous in (("finetune", "base"), ("scratch", None)):
        if name in spec.baselines:
            plan.append(PlannedStage(name, "baselines", [target], previous, subset))
    return plan


def stage_spec(spec: SimAdapterRecipe, stage: PlannedStage, prepared: Path) -> dict[str, Any]:
    """The validated stage spec (a dict for :func:`~adaptspeech.training.stage.run_stage`) of ``stage``: its stage
    file's settings (a deep copy: callers edit nested sections) with the recipe's output folder, seed, prepared data,
    training languages and budget, and the previous stage's model."""
    settings = copy.deepcopy(spec.stage_settings(stage.group, stage.name))
    settings["name"] = stage.name
    settings["output_dir"] = str(spec.output_dir / stage.name)
    settings.setdefault("seed", spec.seed)
    data = dict(settings.get("data") or {})
    data.setdefault("prepared_dir", str(prepared))
    data.setdefault("train_languages", stage.languages)
    if stage.subset:
        data.setdefault("train_subset", stage.subset)
        data.setdefault("subset_seed", spec.seed)
    settings["data"] = data
    model = dict(settings.get("model") or {})
    if stage.previous is not None and model.get("init", "pretrained") == "pretrained":
        model.setdefault("init", "pretrained")
        model.setdefault("path", str(spec.output_dir / stage.previous / "model"))
    settings["model"] = model
    StageSpec.from_dict(settings)
    return settings


def interrupted_checkpoint(settings: dict[str, Any], stage: str) -> str | None:
    """The last complete checkpoint of an interrupted earlier run of ``stage`` (its folder holds checkpoints but no
    ``stage_summary.json``) whose settings are those of ``settings``, to continue from; None: nothing to continue
    (no checkpoint, or the stage finished: a finished stage that runs again retrains).

    The settings are compared as ``adaptspeech train --resume`` compares them
    (:func:`~adaptspeech.training.resume.changed_settings`, with ``OUTPUT_DIR/stage_spec.json`` and the checkpoint's
    own record): the step budget, logging, saving and evaluation may differ.

    Raises:
        RecipeError: the interrupted run has other settings; one line listing them and saying what to do. Nothing
            is removed.
    """
    spec = StageSpec.from_dict(settings)
    output_dir = Path(spec.output_dir)
    if (output_dir / "stage_summary.json").is_file():
        return None
    checkpoint = last_checkpoint(spec.checkpoint_dir, report=lambda line: log(f"stage {stage}: {line}"))
    if checkpoint is None:
        return None
    name = Path(checkpoint).name
    for record in (output_dir / STAGE_SPEC_FILE, Path(checkpoint) / STAGE_SPEC_FILE):
        if not record.is_file():
            continue  # a run from before these records: nothing to compare with, as for --resume
        try:
            before = json.loads(record.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
            raise RecipeError(f"stage {stage}: {output_dir} holds an interrupted run ({name}) whose settings cannot "
                              f"be read ({record}: {err}); remove {output_dir} to train the stage afresh") from None
        changes = changed_settings(before, spec.to_dict())
        if changes:
            raise RecipeError(
                f"stage {stage}: {output_dir} holds an interrupted run of other settings ({name}; {record}): "
                f"{'; '.join(changes)}. Restore these settings to continue it from {name}, or remove {output_dir} "
                "to train the stage afresh"
            )
    return checkpoint


def train_recipe_stage(
    spec: SimAdapterRecipe, stage: PlannedStage, prepared: Path, progress: bool = True, resume: bool = True
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Train one stage of the recipe; returns its ``stage_summary.json`` and its log history.

    An earlier run of the stage that was interrupted (Ctrl-C, a killed job) is continued from its last complete
    checkpoint when its settings are the same (:func:`interrupted_checkpoint`; refused in one line when they are
    not); otherwise the stage trains from step 0, replacing what an earlier run left in its folder (the recipe's
    own). ``resume=False`` always starts afresh (the dry run, which times its steps).
    """
    settings = stage_spec(spec, stage, prepared)
    subset = f" ({stage.subset} each)" if stage.subset else ""
    checkpoint = interrupted_checkpoint(settings, stage.name) if resume else None
    if checkpoint is not None:
        log(f"stage {stage.name}: continuing the interrupted run from {Path(checkpoint).name} (same settings)")
    else:
        log(f"stage {stage.name}: training on {', '.join(stage.languages)}{subset}")
    result = run_stage(settings, resume=checkpoint or False, progress=progress, overwrite=checkpoint is None)
    summary = json.loads((spec.output_dir / stage.name / "stage_summary.json").read_text())
    log(f"stage {stage.name}: {result.train_seconds:.0f} s, dev CER {100 * result.eval['overall']['cer']:.2f}%")
    return summary, result.log_history


def stage_finished(spec: SimAdapterRecipe, name: str) -> bool:
    """Whether the stage ``name`` ran before (its ``stage_summary.json``, written last, is there)."""
    return (spec.output_dir / name / "stage_summary.json").is_file()


def load_stage_outputs(spec: SimAdapterRecipe, name: str) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """``stage_summary.json`` and ``log_history.json`` of a stage that ran before (e.g. skipped by ``--only``)."""
    stage_dir = spec.output_dir / name
    summary_path = stage_dir / "stage_summary.json"
    if not summary_path.is_file():
        raise RecipeError(f"stage {name!r} was skipped (--only) but has not run before: {summary_path}")
    return json.loads(summary_path.read_text()), json.loads((stage_dir / "log_history.json").read_text())
