"""The ``training`` section of a stage spec: ``TrainingArguments`` fields, those adaptspeech gives a default declared
as :class:`TrainingSettings` fields, the others checked against ``TrainingArguments``' own fields
(:func:`check_training_arguments`) and passed through; each value in its range (:data:`TRAINING_RANGES`: positive
counts, ``max_steps`` a positive integer or -1, finite rates; ``training.learning_rate: .inf`` is refused, not trained
into a NaN loss). The other sections of the spec are in :mod:`adaptspeech.training.spec_types`.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from transformers import TrainingArguments

from ..errors import StageConfigError
from ..settings import (
    BELOW_ONE,
    BOOL,
    FINITE_NON_NEGATIVE,
    FINITE_POSITIVE,
    INT,
    NON_EMPTY_STR,
    NON_NEGATIVE_INT,
    NUMBER,
    POSITIVE_INT,
    STR,
    SettingType,
    SpecSection,
    check_value,
    is_int,
    optional,
    plain,
    setting,
    unknown_settings_message,
)

MODEL_INITS = ("config", "pretrained", "backbone")


_STEP_FRACTION = "(below 1: a fraction of the training steps)"
STEP_INTERVAL = SettingType(f"a finite number > 0 {_STEP_FRACTION}", FINITE_POSITIVE.accepts)
"""A number of steps between two events (logging, saving, evaluating); below 1 a fraction of the training steps."""
STRINGS = SettingType(
    "a list of strings", lambda v: isinstance(v, (list, tuple)) and all(isinstance(x, str) for x in v), list
)
SAVE_TOTAL_LIMIT = SettingType(
    "a positive integer or null (null: keep every checkpoint)", lambda v: v is None or (is_int(v) and v > 0)
)
REPORT_TO = SettingType(
    "a string, a list of strings or null", lambda v: v is None or isinstance(v, str) or STRINGS.accepts(v)
)

TRAINING_RANGES: dict[str, SettingType] = {
    "max_steps": SettingType(
        "a positive integer (or -1: train training.num_train_epochs)", lambda v: is_int(v) and (v > 0 or v == -1)
    ),
    "num_train_epochs": FINITE_POSITIVE,
    "per_device_train_batch_size": POSITIVE_INT,
    "per_device_eval_batch_size": POSITIVE_INT,
    "gradient_accumulation_steps": POSITIVE_INT,
    "eval_accumulation_steps": optional(POSITIVE_INT),
    "learning_rate": FINITE_POSITIVE,
    "weight_decay": FINITE_NON_NEGATIVE,
    "adam_beta1": BELOW_ONE,
    "adam_beta2": BELOW_ONE,
    "adam_epsilon": FINITE_POSITIVE,
    "max_grad_norm": SettingType("a finite number >= 0 (0: no clipping)", FINITE_NON_NEGATIVE.accepts),
    "label_smoothing_factor": BELOW_ONE,
    "warmup_steps": SettingType(f"a finite number >= 0 {_STEP_FRACTION}", FINITE_NON_NEGATIVE.accepts),
    "save_steps": STEP_INTERVAL,
    "eval_steps": optional(STEP_INTERVAL),
    "eval_delay": FINITE_NON_NEGATIVE,
    "dataloader_prefetch_factor": optional(POSITIVE_INT),
    "torch_empty_cache_steps": optional(POSITIVE_INT),
    "neftune_noise_alpha": optional(FINITE_POSITIVE),
}
"""The range of the ``training`` settings passed through to ``TrainingArguments`` that transformers does not check:
with ``max_steps: -5`` it trained by epochs, with ``gradient_accumulation_steps: 0`` it divided by zero, with
``learning_rate: .inf`` it trained into a NaN loss. Checked after their type (:func:`check_training_arguments`); the
settings of :class:`TrainingSettings` declare their range with their default."""

_ANNOTATION_TYPES: dict[Any, SettingType] = {
    bool: BOOL, int: INT, float: NUMBER, str: STR, type(None): SettingType("null", lambda v: v is None),
}


def argument_type(annotation: Any) -> SettingType | None:
    """The :class:`SettingType` of a ``TrainingArguments`` field's annotation when every alternative is bool / int /
    float / str / None (an int is a valid float, nan is left to the range), else None: not checked here
    (transformers checks enums, lists and mappings itself)."""
    union = typing.get_origin(annotation) in (typing.Union, types.UnionType)
    alternatives = typing.get_args(annotation) if union else (annotation,)
    if not all(a in _ANNOTATION_TYPES for a in alternatives):
        return None
    kinds = [_ANNOTATION_TYPES[a] for a in alternatives]
    if len(kinds) == 1:
        return kinds[0]
    return SettingType(" or ".join(k.description for k in kinds), lambda v: any(k.accepts(v) for k in kinds))


def training_argument_names() -> list[str]:
    """The fields of ``transformers.TrainingArguments`` (``dataclasses.fields``), in their order."""
    return [f.name for f in dataclasses.fields(TrainingArguments)]


def check_training_arguments(values: Mapping[str, Any], section: str = "training") -> dict[str, Any]:
    """``values`` (``TrainingArguments`` fields passed through), checked: a key that is no field is refused with the
    unknown-setting message (naming the closest field), a value whose type does not fit its field's annotation
    (:func:`argument_type`) or that is out of its range (:data:`TRAINING_RANGES`) naming the field, what it expects
    and the value. Returns a copy, values as given.

    Raises:
        StageConfigError: one line naming the setting.
    """
    fields = {f.name: f for f in dataclasses.fields(TrainingArguments)}
    unknown = [key for key in values if key not in fields]
    if unknown:
        allowed = [*TrainingSettings.types(), *sorted(set(fields) - set(TrainingSettings.types()))]
        raise StageConfigError(unknown_settings_message(section, unknown, allowed,
                                                        allowed_in_words=TRAINING_ALLOWED_IN_WORDS))
    for key, value in values.items():
        annotation_type = argument_type(fields[key].type)
        if annotation_type is not None:
            check_value(f"{section}.{key}", annotation_type, value)
        if key in TRAINING_RANGES:
            check_value(f"{section}.{key}", TRAINING_RANGES[key], value)
    return dict(values)


TRAINING_ALLOWED_IN_WORDS = "the fields of transformers.TrainingArguments"
"""The allowed settings of the ``training`` section in the unknown-setting message (too many for one line)."""

_STAGE_CHOSEN = ("output_dir", "seed", "data_seed", "disable_tqdm", "label_names")
"""The :class:`TrainingSettings` whose default (None) is a value of the stage or the run."""


@dataclass
class TrainingSettings(SpecSection):
    """A stage's ``training`` section: ``transformers.TrainingArguments`` fields, read by attribute.

    The fields whose value adaptspeech chooses (its own default, or a value of the stage: the checkpoints' folder,
    the seed, the progress bars, the label names) are declared here, each with its type and default. Every other
    ``TrainingArguments`` field the section sets is kept in :attr:`passthrough`, checked once when the section is
    read (:func:`check_training_arguments`: a field of ``TrainingArguments``, of its annotation's type, in its
    range) and passed through as given. :meth:`keyword_arguments` is what the stage gives ``TrainingArguments``.
    """

    what = "training"

    output_dir: str | None = setting(optional(NON_EMPTY_STR))
    """The checkpoints' folder (None: ``OUTPUT_DIR/checkpoints``; :meth:`checkpoint_dir`)."""
    seed: int | None = setting(optional(INT))
    """None: the stage's ``seed``."""
    data_seed: int | None = setting(optional(INT))
    """None: the stage's ``seed``."""
    disable_tqdm: bool | None = setting(optional(BOOL))
    """None: progress bars as the run asks (``adaptspeech train --no-progress`` hides them)."""
    label_names: list[str] | None = setting(optional(STRINGS))
    """None: the targets of what the stage trains (``labels``; ``lid_targets`` for a language-ID head alone)."""
    report_to: str | list[str] | None = setting(REPORT_TO, factory=list)
    """No logging integration unless one is named."""
    remove_unused_columns: bool = setting(BOOL, False)
    """The collator reads columns that the model's forward does not take (``language``, ``input_length``)."""
    save_strategy: str = setting(STR, "steps")
    save_total_limit: int | None = setting(SAVE_TOTAL_LIMIT, 2)
    logging_steps: float = setting(STEP_INTERVAL, 25)
    dataloader_num_workers: int = setting(NON_NEGATIVE_INT, 0)
    passthrough: dict[str, Any] = field(default_factory=dict)
    """The other ``TrainingArguments`` fields the section sets, as given (checked)."""

    @classmethod
    def read(cls, values: Any, section: str | None = None) -> TrainingSettings:
        """The section from its mapping (None: the defaults): :meth:`SpecSection.read` of adaptspeech's settings,
        :func:`check_training_arguments` of the others, which it keeps in :attr:`passthrough`.

        Raises:
            StageConfigError: one line naming the setting (an unknown one with the closest field).
        """
        section = section or cls.what
        values = {} if values is None else values
        if not isinstance(values, Mapping):
            raise StageConfigError(f"{section}: expected a mapping of settings, got {values!r}")
        own = cls.types()
        others = {key: value for key, value in values.items() if key not in own}
        passthrough = check_training_arguments(others, section) if others else {}
        made = super().read({key: value for key, value in values.items() if key in own}, section)
        made.passthrough = passthrough
        made._given = tuple(values)
        return made

    def to_dict(self) -> dict[str, Any]:
        """The settings the section gave, in its order, as it gave them (every setting when built directly)."""
        own = self.types()
        names = self._given if self._given is not None else [*own, *self.passthrough]
        return {name: plain(getattr(self, name) if name in own else self.passthrough[name]) for name in names}

    def checkpoint_dir(self, stage_output_dir: str | Path) -> Path:
        """Where the Trainer writes the checkpoints: :attr:`output_dir`, else ``<stage_output_dir>/checkpoints``."""
        return Path(self.output_dir or Path(stage_output_dir) / "checkpoints")

    def keyword_arguments(
        self, stage_output_dir: str | Path, seed: int, progress: bool, label_names: list[str] | None = None
    ) -> dict[str, Any]:
        """The keyword arguments of ``TrainingArguments``: adaptspeech's settings (a setting left to None takes the
        stage's value), then :attr:`passthrough`.

        Args:
            stage_output_dir: the stage's ``output_dir`` (the checkpoints go to :meth:`checkpoint_dir`).
            seed: the stage's ``seed`` (of :attr:`seed` and :attr:`data_seed` unless set).
            progress: show progress bars (:attr:`disable_tqdm` unless set).
            label_names: the batch keys of the targets (None: ``["labels"]``), unless :attr:`label_names` is set.
        """
        chosen = {"output_dir": str(self.checkpoint_dir(stage_output_dir)), "seed": seed, "data_seed": seed,
                  "disable_tqdm": not progress, "label_names": list(label_names or ["labels"])}
        own = {}
        for name in self.types():
            value = getattr(self, name)
            own[name] = chosen[name] if name in _STAGE_CHOSEN and value is None else plain(value)
        return {**own, **self.passthrough}
