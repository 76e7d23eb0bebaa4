"""One training stage from a YAML-able spec: build or load the model, set up adapters / fusion / trainable groups
(:func:`~adaptspeech.training.model_setup.build_model`), train with :class:`AdaptSpeechTrainer` on a prepared dataset
(:func:`~adaptspeech.data.prepared_data.load_prepared`), save, and evaluate per language.

A stage spec (``recipes/*/stage_*.yaml``)::

    name: base
    output_dir: runs/demo/base
    data:
      prepared_dir: runs/demo/data          # written by `adaptspeech prepare` (dataset/ + processor/)
      train_languages: [cs, pl, sl]
      eval_languages: [cs, pl, sl]          # default: train_languages
      train_split: train
      eval_split: dev
      train_subset: null                    # e.g. "10min" or "200utt" per language
      subset_seed: 0
      language_sampling_temperature: null   # T: draw languages with p_l ∝ n_l^(1/T) (null: plain shuffling)
      speed_perturb: null                   # e.g. [0.9, 1.0, 1.1]: each training row played at a drawn speed
      pseudo_labelled_dir: null             # written by `adaptspeech pseudo-label`: rows trained beside the labelled
      pseudo_labelled_share: 0.5            # share of every batch drawn from them
      pseudo_labelled_min_confidence: null  # keep the pseudo-labels at least this confident (null: all)
      lid_extra_audio: null                 # e.g. {sk: pools/sk}: untranscribed audio for a language-ID head alone
    model:
      init: config                          # config | pretrained | backbone
      path: null                            # pretrained: a saved adaptspeech model; backbone: an HF checkpoint
      config: {backbone_type: fbank_conformer, ...}   # AdaptSpeechConfig kwargs (init: config / backbone)
      add_adapters: {cs: {bottleneck: 64}}  # languages -> LanguageAdapterConfig fields
      load_adapters: {pol: {path: facebook/mms-1b-all, load_head: false}}   # adapter files (adaptspeech or MMS)
      mms_language: null                    # init: backbone of an MMS checkpoint: the name of its built-in adapter
      fusion: null                          # FusionConfig fields
      active_languages: null                # default: the trainable adapters (routed per utterance when several)
      trainable: {backbone: true, head: true, adapters: [], fusion: false, heads: []}   # heads: per-language heads
      gradient_check_steps: 10              # steps checked for trainable parameters without gradient (0: off)
    training: {...}                         # transformers.TrainingArguments fields (adaptspeech's defaults:
                                            # TrainingSettings; the others passed through, checked)
    evaluation: {method: null, batch_size: 16, options: {}}   # decoder (null: the head's default) of the final and
                                                              # the training-time evaluation (eval_cer, eval_wer)

Every key can be overridden from the command line as ``section.key=value`` (YAML syntax for the value;
:func:`adaptspeech.overrides.apply_overrides`). Every
value is checked against its declared type (:mod:`adaptspeech.training.spec_types`): ``model.trainable.backbone=no``
(the string "no") is refused, not read as true. The head is ``model.config.head`` (or the saved model's, with
``init: pretrained``); there is no ``model.head``.

Speed perturbation (:mod:`adaptspeech.data.speed_perturb`) resamples each training row on the fly; pseudo-labelled
rows (:mod:`adaptspeech.data.pseudo_labelled`) join the labelled ones with their share of every batch
(:mod:`adaptspeech.data.source_mix`); the dev evaluation stays on the labelled data.

Trainable adapters are active: without ``model.active_languages`` the adapters in ``model.trainable.adapters`` are
the active ones (routed per utterance by language when there are several); an explicit ``model.active_languages``
(or a fusion) that leaves a trainable adapter out is refused, since that adapter would receive no gradient.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from transformers import TrainingArguments, set_seed

from ..data.array_rows import column_list, with_array_rows
from ..data.collator import model_collator
from ..data.feature_types import FeatureType
from ..data.pool_overlap import check_pool_rows, held_out
from ..data.pools import language_pool_rows
from ..data.prepared_data import PreparedDataError, load_prepared, select_languages
from ..data.pseudo_labelled import ConfidenceFilter, load_pseudo_labelled
from ..data.source_mix import mix_sources
from ..data.speed_perturb import SpeedPerturbedRows, WaveformReader
from ..data.subsets import language_sampling_probabilities, low_resource_subset, speakers
from ..errors import StageConfigError, TrainingError
from ..lid_evaluation import lid_accuracy
from ..run_lock import OutputDirLock
from ..settings import check_section
from .callbacks import StageSpecCheckpointCallback, unwrap
from .checks import check_model_fits
from .decoding_evaluation import DecodingEvaluation, default_method
from .distributed import ddp_training_defaults, idle_backbone_parameters
from .model_setup import build_model
from .resume import (
    STAGE_SPEC_FILE,
    check_output_dir_free,
    check_resumed_spec,
    checkpoint_problem,
    last_checkpoint,
    remove_earlier_run,
    save_stage_spec,
)
from .spec_types import (
    DATA_TYPES,
    EVALUATION_TYPES,
    MODEL_INITS,
    MODEL_TYPES,
    STAGE_TYPES,
    TRAINABLE_TYPES,
    DataSettings,
    ModelSettings,
    StageEvaluationSettings,
    check_lid_extra_audio,
)
from .trainer import AdaptSpeechTrainer
from .training_settings import TrainingSettings

STAGE_SECTIONS = tuple(STAGE_TYPES)
DATA_KEYS = tuple(DATA_TYPES)
MODEL_KEYS = tuple(MODEL_TYPES)
TRAINABLE_KEYS = tuple(TRAINABLE_TYPES)
EVALUATION_KEYS = tuple(EVALUATION_TYPES)

__all__ = [
    "MODEL_INITS",
    "StageConfigError",
    "StageResult",
    "StageSpec",
    "last_checkpoint",
    "run_stage",
]


@dataclass
class StageSpec:
    """A validated stage spec (see the module docstring): its sections typed and read by attribute
    (``spec.data.train_split``, ``spec.training.logging_steps``), their defaults in their classes
    (:mod:`adaptspeech.training.spec_types`)."""

    name: str
    output_dir: str
    data: DataSettings
    model: ModelSettings
    training: TrainingSettings = field(default_factory=TrainingSettings)
    evaluation: StageEvaluationSettings = field(default_factory=StageEvaluationSettings)
    seed: int = 0

    @classmethod
    def from_dict(cls, spec: dict[str, Any]) -> StageSpec:
        """Validate ``spec``: known settings only, each of its declared type; language lists normalised.

        Raises:
            StageConfigError: one line naming the setting, what it expects and the value.
        """
        spec = check_section("stage", spec, STAGE_TYPES)
        for required in ("name", "output_dir", "data", "model"):
            if spec.get(required) in (None, ""):
                raise StageConfigError(f"stage: missing required setting {required!r}")
        data = DataSettings.read(spec["data"])
        model = ModelSettings.read(spec["model"])
        evaluation = StageEvaluationSettings.read(spec.get("evaluation"))
        training = TrainingSettings.read(spec.get("training"))
        check_lid_extra_audio(data, model)
        return cls(
            name=spec["name"],
            output_dir=spec["output_dir"],
            data=data,
            model=model,
            training=training,
            evaluation=evaluation,
            seed=spec.get("seed", 0),
        )

    def to_dict(self) -> dict[str, Any]:
        """The spec as plain data (what ``stage_spec.json`` records): each section's settings as the file gave them,
        so that a record reads the same whatever defaults a later version gives."""
        spec = {"name": self.name, "output_dir": self.output_dir, "data": self.data.to_dict(),
                "model": self.model.to_dict(), "training": self.training.to_dict(),
                "evaluation": self.evaluation.to_dict(), "seed": self.seed}
        return json.loads(json.dumps(spec, default=str))

    @property
    def checkpoint_dir(self) -> Path:
        """Where the Trainer writes the checkpoints: ``training.output_dir``, else ``OUTPUT_DIR/checkpoints``."""
        return self.training.checkpoint_dir(self.output_dir)


@dataclass
class StageResult:
    """What a stage produced."""

    name: str
    model_dir: Path
    train_seconds: float
    trainable: dict[str, Any]
    eval: dict[str, Any] | None
    log_history: list[dict[str, Any]]
    model: Any = None
    """The trained model (on every process; under DDP each rank holds its own replica)."""


def _is_main_process() -> bool:
    return int(os.environ.get("RANK", "0")) == 0


@dataclass
class StageData:
    """A stage's rows: the processor, the training rows (labelled, then pseudo-labelled ones when the stage has them;
    speed-perturbed when it asks), the evaluation rows and how the two training sources mix."""

    processor: Any
    train: Any
    evaluation: Any
    source_mix: tuple[int, float] | None = None
    """``(labelled rows, pseudo-labelled share of a batch)``, or None: labelled rows only."""
    pseudo_rows: int = 0
    lid_extra_rows: int = 0
    """Rows of ``data.lid_extra_audio``'s pools, after the labelled rows (before any pseudo-labelled ones)."""


def _select_data(spec: StageSpec) -> StageData:
    """The processor, training rows and evaluation rows of a stage; array columns read as numpy
    (:func:`~adaptspeech.data.array_rows.with_array_rows`)."""
    data = spec.data
    try:
        dataset, processor = load_prepared(data.prepared_dir)
        train_split, eval_split = data.train_split, data.eval_split
        for split in (train_split, eval_split):
            if split not in dataset:
                raise StageConfigError(f"data: split {split!r} not prepared; prepared splits: {sorted(dataset)}")
        train_languages = list(data.train_languages)
        eval_languages = data.evaluated_languages
        train = select_languages(dataset[train_split], train_languages, train_split, "data.train_languages")
        evaluation_set = select_languages(dataset[eval_split], eval_languages, eval_split, "data.eval_languages")
    except PreparedDataError as err:
        raise StageConfigError(str(err)) from None
    if data.train_subset:
        held = speakers(dataset["test"]) if "test" in dataset else set()
        train = low_resource_subset(train, data.train_subset, seed=data.subset_seed, exclude_speakers=held)
    lid_extra_rows = 0
    for language, folder in (data.lid_extra_audio or {}).items():
        try:
            pool = language_pool_rows(folder, language, processor.feature_extractor, data.prepared_dir,
                                      f"data.lid_extra_audio.{language}")
        except (OSError, ValueError) as err:
            raise StageConfigError(str(err)) from None
        train, lid_extra_rows = mix_sources(train, pool), lid_extra_rows + len(pool)
    if data.max_eval_rows:
        evaluation_set = evaluation_set.shuffle(seed=0).select(range(min(len(evaluation_set), data.max_eval_rows)))
    source_mix, pseudo_rows = None, 0
    if data.pseudo_labelled_dir:
        try:
            pseudo = load_pseudo_labelled(data.pseudo_labelled_dir, train_languages, processor.tokenizer,
                                          ConfidenceFilter(data.pseudo_labelled_min_confidence))
            for language in sorted(set(pseudo.unique("language"))):
                check_pool_rows(pseudo.filter(lambda lang, wanted=language: lang == wanted,
                                              input_columns=["language"]),
                                held_out(data.prepared_dir, language),
                                f"data.pseudo_labelled_dir {data.pseudo_labelled_dir}")
        except (OSError, ValueError) as err:
            raise StageConfigError(str(err)) from None
        source_mix, pseudo_rows = (len(train), float(data.pseudo_labelled_share)), len(pseudo)
        train = mix_sources(train, pseudo)
    train = with_array_rows(train)
    if data.speed_perturb:
        features = FeatureType.of(processor.feature_extractor)
        train = SpeedPerturbedRows(train, data.speed_perturb, features, WaveformReader.of_prepared(
            data.prepared_dir), features.encoder_stride, seed=spec.seed)
    return StageData(processor, train, with_array_rows(evaluation_set), source_mix, pseudo_rows, lid_extra_rows)


def _freeze_unused_backbone_parameters(model: Any, probe: dict[str, torch.Tensor]) -> list[str]:
    """Freeze the backbone parameters its own forward never uses (reported as trainable, they would get no
    gradient); returns their names."""
    idle = idle_backbone_parameters(model, probe)
    parameters = dict(model.named_parameters())
    for name in idle:
        parameters[name].requires_grad_(False)
    return idle


def _trained_parts(model: Any) -> tuple[bool, bool]:
    """``(the language-ID head trains, something else trains)``: a stage training only the language-ID head feeds
    it ``lid_targets`` and no transcripts (its forward runs the encoder up to the pooled layer, without adapters)."""
    groups = model.trainable_parameters()["groups"]
    lid = groups.get("lid", {}).get("trainable", 0) > 0
    other = any(v["trainable"] > 0 for g, v in groups.items() if g != "lid")
    return lid, other or not lid


def _training_arguments(
    spec: StageSpec, model: Any, probe: dict[str, torch.Tensor], progress: bool, label_names: list[str] | None = None
) -> Any:
    """The stage's ``TrainingArguments``: its ``training`` section's keyword arguments
    (:meth:`~adaptspeech.training.training_settings.TrainingSettings.keyword_arguments`) with the DDP defaults for
    ``model`` (:func:`~adaptspeech.training.distributed.ddp_training_defaults`; ``probe`` is looked through under DDP
    only)."""
    training = spec.training.keyword_arguments(spec.output_dir, spec.seed, progress, label_names)
    distributed = int(os.environ.get("WORLD_SIZE", "1")) > 1
    training, _ = ddp_training_defaults(model, training, probe if distributed else None)
    return TrainingArguments(**training)


def _resolve_resume(resume: bool | str, checkpoints: Path) -> str | None:
    if not resume:
        return None
    if isinstance(resume, str):
        problem = checkpoint_problem(resume)
        if problem:
            raise StageConfigError(f"--resume {resume}: not a complete checkpoint: {problem}")
        return resume
    return last_checkpoint(checkpoints, report=lambda line: print(f"adaptspeech: {line}", file=sys.stderr))


def run_stage(
    spec: StageSpec | dict[str, Any], resume: bool | str = False, progress: bool = True, overwrite: bool = False
) -> StageResult:
    """Train one stage; returns where the model went, the training time and the dev evaluation.

    The run holds ``OUTPUT_DIR/adaptspeech.lock`` (a second run into the same folder is refused), records its spec in
    ``OUTPUT_DIR/stage_spec.json`` at a fresh start and in every checkpoint, and refuses to resume with settings
    other than those of the first start or of the run that wrote the checkpoint. A fresh start into an
    ``output_dir`` that holds another run's results (checkpoints, ``model/``) is refused unless ``overwrite``.

    Args:
        spec: the stage spec (a dict is validated with :meth:`StageSpec.from_dict`).
        resume: True resumes from the last complete checkpoint in ``output_dir`` (none: a fresh start); a path resumes
            from that checkpoint.
        overwrite: a fresh start removes the results of an earlier run in ``output_dir`` first (its checkpoints,
            ``model/``, ``stage_summary.json``, ``log_history.json``, ``stage_spec.json``). A recipe passes it for
            the stage folders it owns.
    """
    if isinstance(spec, dict):
        spec = StageSpec.from_dict(spec)
    if resume and overwrite:
        raise StageConfigError("resume and overwrite exclude each other (resume continues what overwrite removes)")
    output_dir = Path(spec.output_dir)
    checkpoints = spec.checkpoint_dir
    main = _is_main_process()
    with OutputDirLock(output_dir, enabled=main):
        resume_from = _resolve_resume(resume, checkpoints)
        if resume_from is not None:
            check_resumed_spec(output_dir, spec.to_dict(), checkpoint=resume_from)
        elif not overwrite:
            check_output_dir_free(output_dir, checkpoints, spec.to_dict())
        return _train(spec, resume_from, progress, overwrite)


def _record_start(spec: StageSpec, resume_from: str | None, overwrite: bool, checkpoints: Path) -> None:
    """Once every check passed, right before training: a fresh start (with ``overwrite``: after removing the earlier
    run, so that a setting refused before training leaves that run whole) records its spec in
    ``OUTPUT_DIR/stage_spec.json``; a run resumed from another folder's checkpoint records it when the folder has
    none. Main process only."""
    if not _is_main_process():
        return
    output_dir = Path(spec.output_dir)
    if resume_from is None:
        if overwrite:
            removed = remove_earlier_run(output_dir, checkpoints)
            if removed:
                print(f"adaptspeech: overwrite: removed the earlier run in {output_dir} ({', '.join(removed)})",
                      file=sys.stderr)
        save_stage_spec(output_dir, spec.to_dict())
    elif not (output_dir / STAGE_SPEC_FILE).is_file():
        save_stage_spec(output_dir, spec.to_dict())


def _train(spec: StageSpec, resume_from: str | None, progress: bool, overwrite: bool = False) -> StageResult:
    set_seed(spec.seed)
    data = _select_data(spec)
    processor, train, evaluation_set = data.processor, data.train, data.evaluation
    model = build_model(spec.model, processor, list(spec.data.train_languages))
    output_dir = Path(spec.output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)
    lid_trains, ctc_trains = _trained_parts(model)
    collator = model_collator(model, processor, lid_targets=lid_trains, ctc_labels=ctc_trains)
    check_model_fits(model, collator, train, spec.evaluation)  # a setting that does not fit: one line, before training
    probe = collator([train[i] for i in range(min(2, len(train)))])
    frozen_unused = _freeze_unused_backbone_parameters(model, probe)
    args = _training_arguments(spec, model, probe, progress, None if ctc_trains else ["lid_targets"])
    ev = spec.evaluation
    decoding = DecodingEvaluation(
        processor, method=ev.method or default_method(model), batch_size=ev.batch_size, options=dict(ev.options or {})
    )
    trainer = AdaptSpeechTrainer(
        model=model,
        args=args,
        train_dataset=train,
        eval_dataset=evaluation_set if args.eval_strategy != "no" else None,
        data_collator=collator,
        decoding=decoding,
        language_sampling_temperature=spec.data.language_sampling_temperature,
        gradient_check_steps=spec.model.gradient_check_steps,
        source_mix=data.source_mix,
    )
    trainer.add_callback(StageSpecCheckpointCallback(spec.to_dict()))
    _record_start(spec, resume_from, overwrite, Path(args.output_dir))
    if hasattr(train, "reset_counts"):
        train.reset_counts()  # the speed factors of the training reads only (not the checks' probes)
    start, cpu_start = time.perf_counter(), time.process_time()
    trainer.train(resume_from_checkpoint=resume_from)
    train_seconds = time.perf_counter() - start
    train_cpu_seconds = time.process_time() - cpu_start  # all threads: the steadier figure on a shared machine
    model = unwrap(trainer.model)
    model_dir = output_dir / "model"
    evaluation = None
    if trainer.is_world_process_zero():
        save_final_model(model, processor, model_dir, checkpoints=Path(args.output_dir))
        evaluation = decoding.result(model, evaluation_set)
        if lid_trains:
            evaluation = {**(evaluation or {}), "lid": lid_accuracy(model, evaluation_set, processor,
                                                                     batch_size=decoding.batch_size)}
        eval_split = spec.data.eval_split
        labelled_rows = len(train) - data.pseudo_rows - data.lid_extra_rows
        summary = {
            "stage": spec.name,
            "train_seconds": train_seconds,
            "train_cpu_seconds": train_cpu_seconds,
            "train_rows": labelled_rows,
            "train_hours": _hours(train, 0, labelled_rows),
            "lid_extra_audio_rows": data.lid_extra_rows,
            "lid_extra_audio_hours": _hours(train, labelled_rows, labelled_rows + data.lid_extra_rows),
            "pseudo_labelled_rows": data.pseudo_rows,
            "pseudo_labelled_hours": _hours(train, len(train) - data.pseudo_rows, len(train)),
            "speed_perturb": getattr(train, "counts", None),
            "trainable": model.trainable_parameters(),
            "frozen_unused": frozen_unused,
            "language_sampling": _language_sampling_summary(train, spec.data.language_sampling_temperature),
            "active_languages": list(model.config.active_languages),
            f"{eval_split}": evaluation,
            "global_step": trainer.state.global_step,
        }
        (output_dir / "stage_summary.json").write_text(json.dumps(summary, indent=2, default=float) + "\n")
        (output_dir / "log_history.json").write_text(json.dumps(trainer.state.log_history, indent=1) + "\n")
    return StageResult(
        name=spec.name,
        model_dir=model_dir,
        train_seconds=train_seconds,
        trainable=model.trainable_parameters(),
        eval=evaluation,
        log_history=list(trainer.state.log_history),
        model=model,
    )


def save_final_model(model: Any, processor: Any, model_dir: Path, checkpoints: Path) -> None:
    """Write the model and its processor to ``model_dir`` atomically: into a hidden sibling folder first, renamed
    into place once complete, so that a failed write (disk full) never leaves a half-written ``model/`` that a later
    ``init: pretrained`` stage would load.

    Raises:
        TrainingError: the write failed; the partial folder is removed and the message names the last checkpoint.
    """
    partial = model_dir.with_name(f".{model_dir.name}.partial")
    shutil.rmtree(partial, ignore_errors=True)
    try:
        model.save_pretrained(partial)
        processor.save_pretrained(partial)
        if model_dir.exists():
            shutil.rmtree(model_dir)
        partial.rename(model_dir)
    except OSError as err:
        shutil.rmtree(partial, ignore_errors=True)
        last = last_checkpoint(checkpoints)
        kept = f"the last complete checkpoint is {last}" if last else "no checkpoint was written"
        raise TrainingError(
            f"writing the trained model to {model_dir} failed ({err.strerror or err}); nothing was left half-written, "
            f"{kept}: free space and run again with --resume"
        ) from err


def _hours(rows: Any, first: int, end: int) -> float | None:
    """Hours of audio of rows ``[first, end)`` (None without a ``duration`` column)."""
    if "duration" not in rows.column_names:
        return None
    return float(sum(column_list(rows, "duration")[first:end])) / 3600


def _language_sampling_summary(train: Any, temperature: float | None) -> dict[str, Any] | None:
    """The temperature and the resulting probability of drawing each language (None: plain shuffling)."""
    if temperature is None:
        return None
    counts = Counter(train["language"])
    return {"temperature": temperature, "rows": dict(counts),
            "probabilities": language_sampling_probabilities(counts, temperature)}

