"""One training stage from a YAML-able spec: build or load the model, set up adapters / fusion / trainable groups,
train with :class:`AdaptSpeechTrainer` on a prepared dataset, save, and evaluate per language.

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
    training: {...}                         # transformers.TrainingArguments fields
    evaluation: {method: null, batch_size: 16, options: {}}   # decoder (null: the head's default) of the final and
                                                              # the training-time evaluation (eval_cer, eval_wer)

Every key can be overridden from the command line as ``section.key=value`` (YAML syntax for the value). Every
value is checked against its declared type (:mod:`adaptspeech.training.spec_types`): ``model.trainable.backbone=no``
(the string "no") is refused, not read as true. The head is ``model.config.head`` (or the saved model's, with
``init: pretrained``); there is no ``model.head``.

Trainable adapters are active: without ``model.active_languages`` the adapters in ``model.trainable.adapters`` are
the active ones (routed per utterance by language when there are several); an explicit ``model.active_languages``
(or a fusion) that leaves a trainable adapter out is refused, since that adapter would receive no gradient.
"""

from __future__ import annotations

import copy
import json
import os
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch

from .. import yaml_loader as config_yaml
from .errors import StageConfigError
from .model_setup import check_vocabulary, load_adapters
from .resume import STAGE_SPEC_FILE, checkpoint_problem, last_checkpoint
from .spec_types import (
    DATA_TYPES,
    EVALUATION_TYPES,
    MODEL_INITS,
    MODEL_TYPES,
    STAGE_TYPES,
    TRAINABLE_TYPES,
    check_model_section,
    check_section,
)

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
    "apply_overrides",
    "build_model",
    "last_checkpoint",
    "load_prepared",
    "load_yaml",
    "parse_override",
    "run_stage",
    "select_languages",
]


def parse_override(text: str) -> tuple[list[str], Any]:
    """``"training.learning_rate=3e-4"`` -> (["training", "learning_rate"], 0.0003)."""
    if "=" not in text:
        raise StageConfigError(f"override {text!r} is not of the form section.key=value")
    key, value = text.split("=", 1)
    path = [part for part in key.strip().split(".") if part]
    if not path:
        raise StageConfigError(f"override {text!r} has an empty key")
    return path, config_yaml.load(value) if value.strip() else None


def apply_overrides(spec: dict[str, Any], overrides: list[str]) -> dict[str, Any]:
    """Apply ``section.key=value`` overrides to a copy of ``spec``."""
    spec = copy.deepcopy(spec)
    for text in overrides:
        path, value = parse_override(text)
        node = spec
        for part in path[:-1]:
            if node.get(part) is None:
                node[part] = {}
            if not isinstance(node[part], dict):
                raise StageConfigError(f"override {text!r}: {part!r} is not a section")
            node = node[part]
        node[path[-1]] = value
    return spec


def load_yaml(path: str | os.PathLike) -> dict[str, Any]:
    path = Path(path)
    if not path.is_file():
        raise StageConfigError(f"config file {path} not found")
    try:
        data = config_yaml.load(path.read_text()) or {}
    except config_yaml.YAMLSyntaxError as err:
        first = (str(err).splitlines() or [type(err).__name__])[0]
        raise StageConfigError(f"{path} is not valid YAML: {first}") from err
    if not isinstance(data, dict):
        raise StageConfigError(f"{path} must hold a mapping of settings, found {type(data).__name__}")
    return data


@dataclass
class StageSpec:
    """A validated stage spec (see the module docstring)."""

    name: str
    output_dir: str
    data: dict[str, Any]
    model: dict[str, Any]
    training: dict[str, Any] = field(default_factory=dict)
    evaluation: dict[str, Any] = field(default_factory=dict)
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
        data = check_section("data", spec["data"], DATA_TYPES)
        if not data.get("prepared_dir"):
            raise StageConfigError("data.prepared_dir is required (the output folder of `adaptspeech prepare`)")
        if not data.get("train_languages"):
            raise StageConfigError("data.train_languages must list at least one language")
        model = check_model_section(spec["model"])
        init = model.get("init", "config")
        if init in ("pretrained", "backbone") and not model.get("path"):
            raise StageConfigError(f"model.init={init!r} needs model.path")
        evaluation = check_section("evaluation", spec.get("evaluation") or {}, EVALUATION_TYPES)
        if evaluation.get("method") is not None:
            from ..decoding import DECODING_METHODS

            if evaluation["method"] not in DECODING_METHODS:
                raise StageConfigError(
                    f"evaluation.method {evaluation['method']!r} unknown; allowed values: "
                    f"{', '.join(DECODING_METHODS.names())}"
                )
        training = dict(spec.get("training") or {})
        from transformers import TrainingArguments

        allowed = set(TrainingArguments.__dataclass_fields__)
        unknown = sorted(set(training) - allowed)
        if unknown:
            raise StageConfigError(
                f"training: unknown TrainingArguments field(s) {', '.join(unknown)} "
                "(see transformers.TrainingArguments for the allowed ones)"
            )
        from .checks import check_training_values

        check_training_values(training)
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
        """The spec as plain data (what ``stage_spec.json`` records)."""
        return json.loads(json.dumps(asdict(self), default=str))


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


def load_prepared(prepared_dir: str | os.PathLike) -> tuple[Any, Any]:
    """``(DatasetDict, Wav2Vec2Processor)`` written by ``adaptspeech prepare``."""
    from datasets import load_from_disk
    from transformers import Wav2Vec2Processor

    from ..data.prepared_corpus import COMPLETE_MARKER

    prepared_dir = Path(prepared_dir)
    for sub in ("dataset", "processor"):
        if not (prepared_dir / sub).is_dir():
            raise StageConfigError(
                f"data.prepared_dir {prepared_dir} has no {sub}/ folder: run `adaptspeech prepare` first"
            )
    if not (prepared_dir / COMPLETE_MARKER).is_file():
        raise StageConfigError(
            f"data.prepared_dir {prepared_dir} has no {COMPLETE_MARKER}: `adaptspeech prepare` did not finish "
            "writing it; run it again"
        )
    return load_from_disk(str(prepared_dir / "dataset")), Wav2Vec2Processor.from_pretrained(prepared_dir / "processor")


def select_languages(dataset: Any, languages: list[str], split: str, what: str) -> Any:
    present = set(dataset.unique("language"))
    missing = [lang for lang in languages if lang not in present]
    if missing:
        raise StageConfigError(f"{what}: language(s) {missing} are not in the {split} split (it has {sorted(present)})")
    wanted = set(languages)
    return dataset.filter(lambda lang: lang in wanted, input_columns=["language"])


def model_class_for_head(head: str) -> type:
    """The adaptspeech model class of a head, from the head registry (``HEADS.get(head).model_class``)."""
    from ..heads import HEADS

    if head not in HEADS:
        raise StageConfigError(f"model.config.head: {HEADS.unknown_message(head)}")
    return HEADS.get(head).model_class


def saved_head(path: Path) -> str:
    """The head recorded in a saved model's ``config.json``."""
    config = path / "config.json"
    if not config.is_file():
        raise StageConfigError(f"model.path {path} has no config.json (pass the model/ folder a stage saved)")
    try:
        return str(json.loads(config.read_text()).get("head", "ctc"))
    except json.JSONDecodeError as err:
        raise StageConfigError(f"{config} is not valid JSON ({err.msg})") from None


def _construct(model_spec: dict[str, Any], processor: Any) -> Any:
    init = model_spec.get("init", "config")
    if init == "pretrained":
        path = Path(model_spec["path"])
        if not path.exists():
            raise StageConfigError(f"model.path {path} does not exist (did the previous stage run?)")
        return model_class_for_head(saved_head(path)).from_pretrained(path)
    kwargs = dict(model_spec.get("config") or {})
    tokenizer = processor.tokenizer
    kwargs.setdefault("vocab_size", len(tokenizer))
    kwargs.setdefault("pad_token_id", tokenizer.pad_token_id)
    if tokenizer.bos_token_id is not None:
        kwargs.setdefault("bos_token_id", tokenizer.bos_token_id)
        kwargs.setdefault("eos_token_id", tokenizer.eos_token_id)
    cls = model_class_for_head(kwargs.get("head", "ctc"))
    try:
        if init == "backbone":
            return cls.from_backbone(model_spec["path"], mms_language=model_spec.get("mms_language"), **kwargs)
        from ..configuration import AdaptSpeechConfig
        from .model_size import check_model_size

        config = AdaptSpeechConfig(**kwargs)
        check_model_size(cls, config, kwargs.get("backbone_config"))  # counted on the meta device, before building
        return cls(config)
    except StageConfigError:
        raise
    except (ValueError, KeyError) as err:
        message = err.args[0] if isinstance(err, KeyError) and err.args else str(err)
        raise StageConfigError(f"model.config: {message}") from err


def _activate_trainable_adapters(
    model: Any, model_spec: dict[str, Any], trainable_adapters: list[str], trainable_fusion: bool = False
) -> None:
    """Make the trainable adapters the active ones (see the module docstring), or refuse a setting that leaves one
    of them (or a trainable fusion) out of the forward pass."""
    active = model_spec.get("active_languages")
    if active is not None:
        try:
            model.set_active_languages(list(active))
        except KeyError as err:
            raise StageConfigError(f"model.active_languages: {err.args[0]}") from None
        if trainable_fusion and model.config.fusion is not None:
            raise StageConfigError(
                f"model.trainable.fusion: the fusion would not train: model.active_languages {list(active)} switches "
                "it off (active languages run their own adapters); remove model.active_languages or "
                "model.trainable.fusion"
            )
    elif trainable_adapters and not model.config.fusion_active:
        model.set_active_languages(list(trainable_adapters))
    if model.config.fusion_active:
        reached, what = list(model.config.fusion["languages"]), "the fusion's languages (model.fusion.languages)"
    else:
        reached, what = list(model.config.active_languages), "model.active_languages"
    idle = [lang for lang in trainable_adapters if lang not in reached]
    if idle:
        raise StageConfigError(
            f"model.trainable.adapters {idle} would not train: they are not among {what} {reached}; add them there "
            "or remove them from model.trainable.adapters"
        )


def build_model(model_spec: dict[str, Any], processor: Any) -> Any:
    """Create / load the model of a stage and apply its adapter, fusion, active-language and trainable settings.

    ``init: pretrained`` reads the head from the saved ``config.json`` and loads the class the head registry names
    for it, so a saved ``las`` / ``ctc_las`` model loads as what it is.
    """
    model = _construct(model_spec, processor)
    if model_spec.get("mms_language") and model_spec.get("init", "config") != "backbone":
        raise StageConfigError("model.mms_language names the built-in adapter of an MMS checkpoint: use it with "
                               "model.init: backbone")
    load_adapters(model, model_spec.get("load_adapters") or {})
    try:
        for language, settings in (model_spec.get("add_adapters") or {}).items():
            if language not in model.config.adapters:
                model.add_language_adapter(language, **(settings or {}))
        fusion = model_spec.get("fusion")
        if fusion:
            fusion = dict(fusion)
            languages = fusion.pop("languages")
            model.add_fusion(languages, **fusion)
    except (ValueError, KeyError) as err:
        message = err.args[0] if isinstance(err, KeyError) and err.args else str(err)
        raise StageConfigError(f"model.add_adapters / model.fusion: {message}") from err
    trainable = dict(model_spec.get("trainable") or {"backbone": True, "head": True})
    adapters = list(trainable.get("adapters") or [])
    unknown = [lang for lang in adapters if lang not in model.config.adapters]
    if unknown:
        raise StageConfigError(
            f"model.trainable.adapters: no adapter for {unknown}; languages with one: {sorted(model.config.adapters)} "
            "(add one with model.add_adapters)"
        )
    heads = list(trainable.get("heads") or [])
    no_head = [lang for lang in heads if lang not in model.config.language_heads]
    if no_head:
        raise StageConfigError(
            f"model.trainable.heads: no language head for {no_head}; languages with one: "
            f"{sorted(model.config.language_heads)}"
        )
    _activate_trainable_adapters(model, model_spec, adapters, bool(trainable.get("fusion", False)))
    check_vocabulary(model, processor.tokenizer)
    try:
        model.set_trainable(
            adapters=adapters,
            fusion=trainable.get("fusion", False),
            head=trainable.get("head", False),
            backbone=trainable.get("backbone", False),
            feature_encoder=trainable.get("feature_encoder"),
            heads=heads,
        )
    except ValueError as err:  # what the checks above do not already name (e.g. a fusion the model lacks)
        raise StageConfigError(f"model.trainable: {err}") from None
    return model


def _is_main_process() -> bool:
    return int(os.environ.get("RANK", "0")) == 0


def _select_data(spec: StageSpec) -> tuple[Any, Any, Any]:
    """``(processor, training rows, evaluation rows)`` of a stage; array columns read as numpy
    (:func:`~adaptspeech.data.array_rows.with_array_rows`)."""
    from ..data.array_rows import with_array_rows
    from ..data.subsets import low_resource_subset, speakers

    data = spec.data
    dataset, processor = load_prepared(data["prepared_dir"])
    train_split, eval_split = data.get("train_split", "train"), data.get("eval_split", "dev")
    for split in (train_split, eval_split):
        if split not in dataset:
            raise StageConfigError(f"data: split {split!r} not prepared; prepared splits: {sorted(dataset)}")
    train_languages = list(data["train_languages"])
    eval_languages = list(data.get("eval_languages") or train_languages)
    train = select_languages(dataset[train_split], train_languages, train_split, "data.train_languages")
    if data.get("train_subset"):
        held = speakers(dataset["test"]) if "test" in dataset else set()
        train = low_resource_subset(
            train, data["train_subset"], seed=int(data.get("subset_seed", 0)), exclude_speakers=held
        )
    evaluation_set = select_languages(dataset[eval_split], eval_languages, eval_split, "data.eval_languages")
    if data.get("max_eval_rows"):
        evaluation_set = evaluation_set.shuffle(seed=0).select(range(min(len(evaluation_set), data["max_eval_rows"])))
    return processor, with_array_rows(train), with_array_rows(evaluation_set)


def _freeze_unused_backbone_parameters(model: Any, probe: dict[str, torch.Tensor]) -> list[str]:
    """Freeze the backbone parameters its own forward never uses (reported as trainable, they would get no
    gradient); returns their names."""
    from .distributed import idle_backbone_parameters

    idle = idle_backbone_parameters(model, probe)
    parameters = dict(model.named_parameters())
    for name in idle:
        parameters[name].requires_grad_(False)
    return idle


def _training_arguments(spec: StageSpec, model: Any, probe: dict[str, torch.Tensor], progress: bool) -> Any:
    from transformers import TrainingArguments

    from .distributed import ddp_training_defaults

    training = {
        "output_dir": str(Path(spec.output_dir) / "checkpoints"),
        "report_to": [],
        "remove_unused_columns": False,
        "seed": spec.seed,
        "data_seed": spec.seed,
        "save_strategy": "steps",
        "save_total_limit": 2,
        "logging_steps": 25,
        "disable_tqdm": not progress,
        "dataloader_num_workers": 0,
        **spec.training,
    }
    training.setdefault("label_names", ["labels"])
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
    from .resume import check_output_dir_free, check_resumed_spec
    from .run_lock import OutputDirLock

    if isinstance(spec, dict):
        spec = StageSpec.from_dict(spec)
    if resume and overwrite:
        raise StageConfigError("resume and overwrite exclude each other (resume continues what overwrite removes)")
    output_dir = Path(spec.output_dir)
    checkpoints = Path(spec.training.get("output_dir") or output_dir / "checkpoints")
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
    from .resume import remove_earlier_run, save_stage_spec

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
    from transformers import set_seed

    from ..data.collator import DataCollatorCTCWithPadding
    from ..evaluation import _routing_languages, feature_type_of_model
    from .callbacks import StageSpecCheckpointCallback, unwrap
    from .checks import check_model_fits
    from .metrics import DecodingEvaluation, default_method
    from .trainer import AdaptSpeechTrainer

    set_seed(spec.seed)
    processor, train, evaluation_set = _select_data(spec)
    model = build_model(spec.model, processor)
    output_dir = Path(spec.output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)
    collator = DataCollatorCTCWithPadding(
        processor,
        language_to_id=model.language_to_id if _routing_languages(model) else None,
        feature_type=feature_type_of_model(model),
    )
    check_model_fits(model, collator, train, spec.evaluation)  # a setting that does not fit: one line, before training
    probe = collator([train[i] for i in range(min(2, len(train)))])
    frozen_unused = _freeze_unused_backbone_parameters(model, probe)
    args = _training_arguments(spec, model, probe, progress)
    ev = spec.evaluation
    decoding = DecodingEvaluation(
        processor,
        method=ev.get("method") or default_method(model),
        batch_size=int(ev.get("batch_size", 16)),
        options=dict(ev.get("options") or {}),
    )
    trainer = AdaptSpeechTrainer(
        model=model,
        args=args,
        train_dataset=train,
        eval_dataset=evaluation_set if args.eval_strategy != "no" else None,
        data_collator=collator,
        decoding=decoding,
        language_sampling_temperature=spec.data.get("language_sampling_temperature"),
        gradient_check_steps=spec.model.get("gradient_check_steps", 10),
    )
    trainer.add_callback(StageSpecCheckpointCallback(spec.to_dict()))
    _record_start(spec, resume_from, overwrite, Path(args.output_dir))
    start = time.perf_counter()
    trainer.train(resume_from_checkpoint=resume_from)
    train_seconds = time.perf_counter() - start
    model = unwrap(trainer.model)
    model_dir = output_dir / "model"
    evaluation = None
    if trainer.is_world_process_zero():
        save_final_model(model, processor, model_dir, checkpoints=Path(args.output_dir))
        evaluation = decoding.result(model, evaluation_set)
        eval_split = spec.data.get("eval_split", "dev")
        summary = {
            "stage": spec.name,
            "train_seconds": train_seconds,
            "train_rows": len(train),
            "train_hours": float(sum(train["duration"])) / 3600 if "duration" in train.column_names else None,
            "trainable": model.trainable_parameters(),
            "frozen_unused": frozen_unused,
            "language_sampling": _language_sampling_summary(train, spec.data.get("language_sampling_temperature")),
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
    import shutil

    from .errors import TrainingError

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


def _language_sampling_summary(train: Any, temperature: float | None) -> dict[str, Any] | None:
    """The temperature and the resulting probability of drawing each language (None: plain shuffling)."""
    if temperature is None:
        return None
    from collections import Counter

    from ..data.subsets import language_sampling_probabilities

    counts = Counter(train["language"])
    return {"temperature": temperature, "rows": dict(counts),
            "probabilities": language_sampling_probabilities(counts, temperature)}


def torch_threads(threads: int | None) -> None:
    """Use ``threads`` CPU threads (None: leave torch's default)."""
    if threads:
        torch.set_num_threads(int(threads))
