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
    model:
      init: config                          # config | pretrained | backbone
      path: null                            # pretrained: a saved adaptspeech model; backbone: an HF checkpoint
      config: {backbone_type: fbank_conformer, ...}   # AdaptSpeechConfig kwargs (init: config / backbone)
      add_adapters: {cs: {bottleneck: 64}}  # languages -> LanguageAdapterConfig fields
      fusion: null                          # FusionConfig fields
      active_languages: null
      trainable: {backbone: true, head: true, adapters: [], fusion: false}
    training: {...}                         # transformers.TrainingArguments fields

Every key can be overridden from the command line as ``section.key=value`` (YAML syntax for the value).
"""

from __future__ import annotations

import copy
import json
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
import yaml

from .. import yaml_loader as config_yaml

STAGE_SECTIONS = ("name", "output_dir", "data", "model", "training", "evaluation", "seed")
DATA_KEYS = (
    "prepared_dir",
    "train_languages",
    "eval_languages",
    "train_split",
    "eval_split",
    "train_subset",
    "subset_seed",
    "max_eval_rows",
)
MODEL_KEYS = ("init", "path", "config", "add_adapters", "fusion", "active_languages", "trainable", "head")
MODEL_INITS = ("config", "pretrained", "backbone")
TRAINABLE_KEYS = ("backbone", "head", "adapters", "fusion", "feature_encoder")
EVALUATION_KEYS = ("method", "batch_size", "options")


class StageConfigError(ValueError):
    """A stage spec that does not fit; the message names the setting and the allowed values."""


def _check_keys(section: str, data: dict[str, Any], allowed: tuple[str, ...]) -> None:
    unknown = sorted(set(data) - set(allowed))
    if unknown:
        raise StageConfigError(
            f"{section}: unknown setting(s) {', '.join(unknown)}; allowed settings: {', '.join(allowed)}"
        )


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
    except yaml.YAMLError as err:
        raise StageConfigError(f"{path} is not valid YAML: {str(err).splitlines()[0]}") from err
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
        _check_keys("stage", spec, STAGE_SECTIONS)
        for required in ("name", "output_dir", "data", "model"):
            if spec.get(required) in (None, ""):
                raise StageConfigError(f"stage: missing required setting {required!r}")
        data = dict(spec["data"])
        _check_keys("data", data, DATA_KEYS)
        if not data.get("prepared_dir"):
            raise StageConfigError("data.prepared_dir is required (the output folder of `adaptspeech prepare`)")
        if not data.get("train_languages"):
            raise StageConfigError("data.train_languages must list at least one language")
        model = dict(spec["model"])
        _check_keys("model", model, MODEL_KEYS)
        init = model.get("init", "config")
        if init not in MODEL_INITS:
            raise StageConfigError(f"model.init {init!r} unknown; allowed values: {', '.join(MODEL_INITS)}")
        if init in ("pretrained", "backbone") and not model.get("path"):
            raise StageConfigError(f"model.init={init!r} needs model.path")
        _check_keys("model.trainable", dict(model.get("trainable") or {}), TRAINABLE_KEYS)
        evaluation = dict(spec.get("evaluation") or {})
        _check_keys("evaluation", evaluation, EVALUATION_KEYS)
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
            name=str(spec["name"]),
            output_dir=str(spec["output_dir"]),
            data=data,
            model=model,
            training=training,
            evaluation=evaluation,
            seed=int(spec.get("seed", 0)),
        )


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

    prepared_dir = Path(prepared_dir)
    for sub in ("dataset", "processor"):
        if not (prepared_dir / sub).is_dir():
            raise StageConfigError(
                f"data.prepared_dir {prepared_dir} has no {sub}/ folder: run `adaptspeech prepare` first"
            )
    return load_from_disk(str(prepared_dir / "dataset")), Wav2Vec2Processor.from_pretrained(prepared_dir / "processor")


def select_languages(dataset: Any, languages: list[str], split: str, what: str) -> Any:
    present = set(dataset.unique("language"))
    missing = [lang for lang in languages if lang not in present]
    if missing:
        raise StageConfigError(f"{what}: language(s) {missing} are not in the {split} split (it has {sorted(present)})")
    wanted = set(languages)
    return dataset.filter(lambda lang: lang in wanted, input_columns=["language"])


def build_model(model_spec: dict[str, Any], processor: Any) -> Any:
    """Create / load the model of a stage and apply its adapter, fusion and trainable settings."""
    from ..modeling import AdaptSpeechForCTC, AdaptSpeechForJointCTCAttention

    init = model_spec.get("init", "config")
    kwargs = dict(model_spec.get("config") or {})
    tokenizer = processor.tokenizer
    kwargs.setdefault("vocab_size", len(tokenizer))
    kwargs.setdefault("pad_token_id", tokenizer.pad_token_id)
    if tokenizer.bos_token_id is not None:
        kwargs.setdefault("bos_token_id", tokenizer.bos_token_id)
        kwargs.setdefault("eos_token_id", tokenizer.eos_token_id)
    head = kwargs.get("head", "ctc")
    cls = AdaptSpeechForCTC if head == "ctc" else AdaptSpeechForJointCTCAttention
    if init == "config":
        from ..configuration import AdaptSpeechConfig

        model = cls(AdaptSpeechConfig(**kwargs))
    elif init == "backbone":
        model = cls.from_backbone(model_spec["path"], **kwargs)
    else:
        path = Path(model_spec["path"])
        if not path.exists():
            raise StageConfigError(f"model.path {path} does not exist (did the previous stage run?)")
        model = cls.from_pretrained(path)
    if model.config.vocab_size != len(tokenizer):
        raise StageConfigError(
            f"the model's vocabulary ({model.config.vocab_size}) does not match the processor's ({len(tokenizer)})"
        )
    for language, settings in (model_spec.get("add_adapters") or {}).items():
        if language not in model.config.adapters:
            model.add_language_adapter(language, **(settings or {}))
    fusion = model_spec.get("fusion")
    if fusion:
        fusion = dict(fusion)
        languages = fusion.pop("languages")
        model.add_fusion(languages, **fusion)
    if model_spec.get("active_languages") is not None:
        model.set_active_languages(list(model_spec["active_languages"]))
    trainable = dict(model_spec.get("trainable") or {"backbone": True, "head": True})
    model.set_trainable(
        adapters=trainable.get("adapters") or [],
        fusion=bool(trainable.get("fusion", False)),
        head=bool(trainable.get("head", False)),
        backbone=bool(trainable.get("backbone", False)),
        feature_encoder=trainable.get("feature_encoder"),
    )
    return model


def run_stage(spec: StageSpec | dict[str, Any], resume: bool | str = False, progress: bool = True) -> StageResult:
    """Train one stage; returns where the model went, the training time and the dev evaluation.

    Args:
        spec: the stage spec (a dict is validated with :meth:`StageSpec.from_dict`).
        resume: True resumes from the last checkpoint in ``output_dir``; a path resumes from that checkpoint.
    """
    from transformers import TrainingArguments, set_seed

    from ..data.collator import DataCollatorCTCWithPadding
    from ..data.subsets import low_resource_subset, speakers
    from ..evaluation import _routing_languages, evaluate_dataset, feature_type_of_model
    from .callbacks import unwrap
    from .checks import check_model_fits
    from .distributed import ddp_training_defaults
    from .metrics import argmax_logits, build_compute_metrics
    from .trainer import AdaptSpeechTrainer

    if isinstance(spec, dict):
        spec = StageSpec.from_dict(spec)
    set_seed(spec.seed)
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

    model = build_model(spec.model, processor)
    output_dir = Path(spec.output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)
    routing = _routing_languages(model)
    collator = DataCollatorCTCWithPadding(
        processor,
        language_to_id=model.language_to_id if routing else None,
        feature_type=feature_type_of_model(model),
    )
    check_model_fits(model, collator, train, spec.evaluation)  # a setting that does not fit: one line, before training
    training = {
        "output_dir": str(output_dir / "checkpoints"),
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
    training.setdefault("label_names", ["labels", "lang_ids"] if routing else ["labels"])
    distributed = int(os.environ.get("WORLD_SIZE", "1")) > 1
    probe = collator([train[i] for i in range(min(2, len(train)))]) if distributed else None
    training, _ = ddp_training_defaults(model, training, probe)  # find_unused_parameters, non-re-entrant checkpointing
    args = TrainingArguments(**training)
    trainer = AdaptSpeechTrainer(
        model=model,
        args=args,
        train_dataset=train,
        eval_dataset=evaluation_set if args.eval_strategy != "no" else None,
        data_collator=collator,
        compute_metrics=build_compute_metrics(processor.tokenizer, model.adapter_languages if routing else None),
        preprocess_logits_for_metrics=argmax_logits,
    )
    resume_from = None
    if resume:
        resume_from = resume if isinstance(resume, str) else last_checkpoint(Path(args.output_dir))
    start = time.perf_counter()
    trainer.train(resume_from_checkpoint=resume_from)
    train_seconds = time.perf_counter() - start
    model = unwrap(trainer.model)
    model_dir = output_dir / "model"
    if trainer.is_world_process_zero():
        model.save_pretrained(model_dir)
        processor.save_pretrained(model_dir)
    evaluation = None
    if trainer.is_world_process_zero():
        ev = spec.evaluation
        evaluation = evaluate_dataset(
            model,
            evaluation_set,
            processor,
            method=ev.get("method", "ctc_greedy"),
            batch_size=int(ev.get("batch_size", 16)),
            progress=progress,
            **(ev.get("options") or {}),
        )
        summary = {
            "stage": spec.name,
            "train_seconds": train_seconds,
            "train_rows": len(train),
            "train_hours": float(sum(train["duration"])) / 3600 if "duration" in train.column_names else None,
            "trainable": model.trainable_parameters(),
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


def last_checkpoint(folder: Path) -> str | None:
    """The complete checkpoint of the highest step in ``folder`` (None: none).

    A run killed while saving leaves a ``checkpoint-N`` folder without ``trainer_state.json`` (the Trainer writes it
    last); such a folder is skipped, so ``--resume`` picks the previous, complete one.
    """
    from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR

    if not folder.is_dir():
        return None
    steps = []
    for path in folder.glob(f"{PREFIX_CHECKPOINT_DIR}-*"):
        suffix = path.name[len(PREFIX_CHECKPOINT_DIR) + 1 :]
        if suffix.isdigit() and (path / "trainer_state.json").is_file():
            steps.append((int(suffix), path))
    return str(max(steps)[1]) if steps else None


def torch_threads(threads: int | None) -> None:
    """Use ``threads`` CPU threads (None: leave torch's default)."""
    if threads:
        torch.set_num_threads(int(threads))
