"""The declared type of every stage setting, one table per section, and the checks that refuse a value of the wrong
type with one line naming the setting, the expected type and the value.

YAML 1.2 reads ``backbone: no`` as the *string* ``"no"``, which Python takes as true: without these checks
``model.trainable.backbone=no`` trains the backbone. Each section of a stage spec (the top level, ``data``,
``model``, ``model.trainable``, ``evaluation``) has a table here (:data:`STAGE_TYPES`, :data:`DATA_TYPES`,
:data:`MODEL_TYPES`, :data:`TRAINABLE_TYPES`, :data:`EVALUATION_TYPES`); the nested dataclass settings
(``model.add_adapters.<lang>``, ``model.fusion``, ``model.config.las`` ...) are checked against the annotations of
their dataclass, ``model.config`` against :class:`~adaptspeech.AdaptSpeechConfig`'s ``__init__`` and
``model.config.backbone_config`` against the backbone's HF config class (keys and the type of each default value).
The ``training`` section has its own check (:func:`adaptspeech.training.checks.check_training_values`).

Beyond the type, a value must be in its range: every count that must be positive is positive (``training.max_steps``
is a positive integer or -1, transformers' "train ``num_train_epochs``"; the batch sizes, the accumulation steps,
the backbone's widths, heads and kernel sizes), every rate is a finite number in its interval
(``training.learning_rate: .inf`` is refused, not trained into a NaN loss). The tables are :data:`TRAINING_RANGES`
and, for ``model.config.backbone_config``, :func:`backbone_range` (from the key's name and default value).

Language lists (``data.train_languages``, ``model.active_languages`` ...): a single code is read as a one-element
list (``data.train_languages=ro`` is ``[ro]``, not ``[r, o]``); every code must look like an ISO 639 code: 2 or 3
lower-case letters, optionally followed by subtags (``ro``, ``pt-BR``, ``zh-CN``, ``rm-sursilv``).
"""

from __future__ import annotations

import dataclasses
import difflib
import inspect
import math
import re
import types
import typing
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from ..adapters.fusion import FUSION_PATHS
from ..errors import StageConfigError
from ..settings import is_int as _is_int

_ISO_LIKE = re.compile(r"^[a-z]{2,3}(?:[-_][A-Za-z0-9]{1,8})*$")


@dataclass(frozen=True)
class SettingType:
    """What a setting accepts.

    Args:
        description: the expected type in words (``"true or false"``, ``"an integer"`` ...).
        accepts: True for a value of the right type.
        normalise: turns an accepted value into the stored one (default: unchanged).
    """

    description: str
    accepts: Callable[[Any], bool]
    normalise: Callable[[Any], Any] = lambda value: value


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _is_finite(value: Any) -> bool:
    return _is_number(value) and math.isfinite(value)


BOOL = SettingType("true or false", lambda v: isinstance(v, bool))
INT = SettingType("an integer", _is_int)
POSITIVE_INT = SettingType("a positive integer", lambda v: _is_int(v) and v > 0)
NON_NEGATIVE_INT = SettingType("an integer >= 0", lambda v: _is_int(v) and v >= 0)
FLOAT = SettingType("a number", _is_finite, float)  # nan and infinity are not (YAML's .nan, .inf)
NUMBER = SettingType("a number", _is_number, float)
"""Any number, nan and infinity included: the type of a backbone setting, whose range (:func:`backbone_range`)
names what it must be."""
POSITIVE_FLOAT = SettingType("a number > 0", lambda v: _is_finite(v) and v > 0, float)
STR = SettingType("a string", lambda v: isinstance(v, str))
NON_EMPTY_STR = SettingType("a non-empty string", lambda v: isinstance(v, str) and v.strip() != "")
MAPPING = SettingType("a mapping of settings", lambda v: isinstance(v, Mapping), dict)
ANY = SettingType("any value", lambda v: True)
FINITE = SettingType("a finite number", _is_finite)
FINITE_POSITIVE = SettingType("a finite number > 0", lambda v: _is_finite(v) and v > 0)
FINITE_NON_NEGATIVE = SettingType("a finite number >= 0", lambda v: _is_finite(v) and v >= 0)
PROBABILITY = SettingType("a number in [0, 1]", lambda v: _is_finite(v) and 0 <= v <= 1)
BELOW_ONE = SettingType("a number in [0, 1)", lambda v: _is_finite(v) and 0 <= v < 1)
OPEN_UNIT = SettingType("a number in (0, 1)", lambda v: _is_finite(v) and 0 < v < 1, float)
SPEED_FACTORS = SettingType(
    "a non-empty list of speed factors in (0.5, 2] (e.g. [0.9, 1.0, 1.1])",
    lambda v: isinstance(v, (list, tuple)) and len(v) > 0 and all(_is_finite(x) and 0.5 < x <= 2 for x in v),
    lambda v: [float(x) for x in v],
)
POSITIVE_INTS = SettingType(
    "a list of positive integers", lambda v: isinstance(v, (list, tuple)) and all(_is_int(x) and x > 0 for x in v)
)


def optional(setting_type: SettingType) -> SettingType:
    """``setting_type`` or null."""
    return SettingType(
        f"{setting_type.description} or null",
        lambda v: v is None or setting_type.accepts(v),
        lambda v: None if v is None else setting_type.normalise(v),
    )


def choice(*values: str) -> SettingType:
    """One of ``values`` (the message lists them as the allowed values)."""
    return SettingType(f"one of the allowed values: {', '.join(values)}", lambda v: v in values)


def is_language_code(value: Any) -> bool:
    """True for an ISO 639-like code: 2 or 3 lower-case letters, optionally with subtags (``pt-BR``)."""
    return isinstance(value, str) and bool(_ISO_LIKE.match(value))


LANGUAGE_CODE = SettingType(
    "a language code (ISO 639: 2 or 3 lower-case letters, optionally with subtags: ro, pt-BR, zh-CN)",
    is_language_code,
)


def _language_list(value: Any) -> list[str]:
    return [value] if isinstance(value, str) else list(value)


LANGUAGES = SettingType(
    "a list of language codes (ISO 639: 2 or 3 lower-case letters, optionally with subtags: ro, pt-BR, zh-CN)",
    lambda v: is_language_code(v) or (isinstance(v, (list, tuple)) and all(is_language_code(x) for x in v)),
    _language_list,
)
SUBSET_SIZE = SettingType(
    'a subset size (a number and a unit: "10min", "1.5h", "200utt"; an integer is a number of utterances)',
    lambda v: (isinstance(v, str) and v.strip() != "") or (_is_int(v) and v > 0),
)


# ---- the tables ------------------------------------------------------------------------------------------------

STAGE_TYPES: dict[str, SettingType] = {
    "name": NON_EMPTY_STR,
    "output_dir": NON_EMPTY_STR,
    "data": MAPPING,
    "model": MAPPING,
    "training": optional(MAPPING),
    "evaluation": optional(MAPPING),
    "seed": INT,
}
DATA_TYPES: dict[str, SettingType] = {
    "prepared_dir": NON_EMPTY_STR,
    "train_languages": LANGUAGES,
    "eval_languages": optional(LANGUAGES),
    "train_split": NON_EMPTY_STR,
    "eval_split": NON_EMPTY_STR,
    "train_subset": optional(SUBSET_SIZE),
    "subset_seed": INT,
    "max_eval_rows": optional(POSITIVE_INT),
    "language_sampling_temperature": optional(POSITIVE_FLOAT),
    "speed_perturb": optional(SPEED_FACTORS),
    "pseudo_labelled_dir": optional(NON_EMPTY_STR),
    "pseudo_labelled_share": OPEN_UNIT,
    "pseudo_labelled_min_confidence": optional(PROBABILITY),
}
MODEL_INITS = ("config", "pretrained", "backbone")
MODEL_TYPES: dict[str, SettingType] = {
    "init": choice(*MODEL_INITS),
    "path": optional(NON_EMPTY_STR),
    "config": optional(MAPPING),
    "add_adapters": optional(MAPPING),
    "fusion": optional(MAPPING),
    "active_languages": optional(LANGUAGES),
    "trainable": optional(MAPPING),
    "gradient_check_steps": NON_NEGATIVE_INT,
    "load_adapters": optional(MAPPING),
    "mms_language": optional(LANGUAGE_CODE),
    "lid": optional(MAPPING),
    "fusion_path": optional(choice(*FUSION_PATHS)),
}
TRAINABLE_TYPES: dict[str, SettingType] = {
    "backbone": BOOL,
    "head": BOOL,
    "adapters": optional(LANGUAGES),
    "fusion": BOOL,
    "feature_encoder": optional(BOOL),
    "heads": optional(LANGUAGES),
    "lid": BOOL,
}
EVALUATION_TYPES: dict[str, SettingType] = {
    "method": optional(NON_EMPTY_STR),
    "batch_size": POSITIVE_INT,
    "options": optional(MAPPING),
}

_STEP_FRACTION = "(below 1: a fraction of the training steps)"
TRAINING_RANGES: dict[str, SettingType] = {
    "max_steps": SettingType(
        "a positive integer (or -1: train training.num_train_epochs)", lambda v: _is_int(v) and (v > 0 or v == -1)
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
    "warmup_ratio": PROBABILITY,
    "logging_steps": SettingType(f"a finite number > 0 {_STEP_FRACTION}", FINITE_POSITIVE.accepts),
    "save_steps": SettingType(f"a finite number > 0 {_STEP_FRACTION}", FINITE_POSITIVE.accepts),
    "eval_steps": optional(SettingType(f"a finite number > 0 {_STEP_FRACTION}", FINITE_POSITIVE.accepts)),
    "eval_delay": FINITE_NON_NEGATIVE,
    "save_total_limit": SettingType(
        "a positive integer or null (null: keep every checkpoint)", lambda v: v is None or (_is_int(v) and v > 0)
    ),
    "dataloader_num_workers": NON_NEGATIVE_INT,
    "dataloader_prefetch_factor": optional(POSITIVE_INT),
    "torch_empty_cache_steps": optional(POSITIVE_INT),
    "neftune_noise_alpha": optional(FINITE_POSITIVE),
}
"""The range of the ``training`` settings (``TrainingArguments`` fields) that transformers does not check: with
``max_steps: -5`` it trained by epochs, with ``gradient_accumulation_steps: 0`` it divided by zero, with
``learning_rate: .inf`` it trained into a NaN loss. Checked after their type
(:func:`adaptspeech.training.checks.check_training_values`)."""

_HINTS = {
    "model.head": "the head is model.config.head (init: config / backbone) or the saved model's (init: pretrained)",
}


# ---- checking --------------------------------------------------------------------------------------------------


def unknown_keys(section: str, unknown: list[str], allowed: Iterable[str]) -> str:
    """``a (did you mean b?), c``: the unknown keys of ``section``, each with its hint or the closest allowed key."""
    allowed = list(allowed)
    parts = []
    for key in unknown:
        hint = _HINTS.get(f"{section}.{key}")
        close = difflib.get_close_matches(str(key), allowed, n=1)
        if hint:
            parts.append(f"{key} ({hint})")
        elif close:
            parts.append(f"{key} (did you mean {close[0]}?)")
        else:
            parts.append(str(key))
    return ", ".join(parts)


def unknown_settings_message(section: str, unknown: list[str], allowed: list[str]) -> str:
    """``section: unknown setting(s) a (did you mean b?); allowed settings: ...``."""
    return f"{section}: unknown setting(s) {unknown_keys(section, unknown, allowed)}; allowed settings: " \
        f"{', '.join(sorted(allowed))}"


def check_value(setting: str, setting_type: SettingType, value: Any) -> Any:
    """The normalised ``value`` of ``setting``, or :class:`StageConfigError` naming the setting, type and value."""
    if not setting_type.accepts(value):
        raise StageConfigError(f"{setting}: expected {setting_type.description}, got {value!r}")
    return setting_type.normalise(value)


def check_section(section: str, values: Any, table: Mapping[str, SettingType]) -> dict[str, Any]:
    """Refuse unknown keys (naming the closest valid one) and values of the wrong type; return a normalised copy.

    Args:
        section: the section's name in messages (``"data"``, ``"model.trainable"``; ``"stage"`` for the top level).
        values: the section's mapping.
        table: setting name -> :class:`SettingType`.
    """
    if not isinstance(values, Mapping):
        raise StageConfigError(f"{section}: expected a mapping of settings, got {values!r}")
    unknown = [key for key in values if key not in table]
    if unknown:
        raise StageConfigError(unknown_settings_message(section, unknown, list(table)))
    prefix = "" if section == "stage" else f"{section}."
    return {key: check_value(f"{prefix}{key}", table[key], value) for key, value in values.items()}


def type_of_annotation(annotation: Any) -> SettingType:
    """The :class:`SettingType` of a Python annotation (bool / int / float / str / list / dict / a class / unions)."""
    if annotation is Any or annotation is typing.Any:
        return ANY
    if annotation is type(None) or annotation is None:
        return SettingType("null", lambda v: v is None)
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType):
        alternatives = [type_of_annotation(a) for a in typing.get_args(annotation)]
        return SettingType(
            " or ".join(a.description for a in alternatives), lambda v: any(a.accepts(v) for a in alternatives)
        )
    simple = {bool: BOOL, int: INT, float: FLOAT, str: STR}
    if annotation in simple:
        return simple[annotation]
    if annotation in (list, tuple) or origin in (list, tuple):
        args = [a for a in typing.get_args(annotation) if a is not Ellipsis]
        item = type_of_annotation(args[0]) if len(args) == 1 else ANY
        what = "a list" if item is ANY else f"a list of {item.description.removeprefix('a ').removeprefix('an ')}s"
        return SettingType(what, lambda v: isinstance(v, (list, tuple)) and all(item.accepts(x) for x in v))
    if annotation in (dict, Mapping) or origin in (dict, Mapping, typing.Mapping):
        return MAPPING
    if isinstance(annotation, type):
        return SettingType(
            f"a mapping of settings or a {annotation.__name__}", lambda v: isinstance(v, (Mapping, annotation))
        )
    return ANY


def check_dataclass_values(section: str, cls: type, values: Any) -> None:
    """Refuse keys that are not fields of the dataclass ``cls`` and values that do not fit the field's annotation."""
    if not isinstance(values, Mapping):
        raise StageConfigError(f"{section}: expected a mapping of settings, got {values!r}")
    hints = typing.get_type_hints(cls)
    names = [f.name for f in dataclasses.fields(cls)]
    check_section(section, values, {name: type_of_annotation(hints[name]) for name in names})


def _init_parameter_types(cls: type) -> dict[str, SettingType]:
    hints = typing.get_type_hints(cls.__init__)
    parameters = inspect.signature(cls.__init__).parameters
    return {
        name: type_of_annotation(hints.get(name, Any))
        for name, p in parameters.items()
        if name != "self" and p.kind not in (p.VAR_KEYWORD, p.VAR_POSITIONAL)
    }


def _type_of_default(default: Any) -> SettingType:
    """Backbone config values are compared with the type of the config class's default value."""
    if isinstance(default, bool):
        return BOOL
    if isinstance(default, int):
        return INT
    if isinstance(default, float):
        return NUMBER
    if isinstance(default, str):
        return STR
    if isinstance(default, (list, tuple)):
        return SettingType("a list", lambda v: isinstance(v, (list, tuple)))
    if isinstance(default, Mapping):
        return MAPPING
    return ANY


_POSITIVE_DIMENSION = re.compile(r"(_size|_dim|_kernel|_stride|_heads|_groups|_per_group|_embeddings|_positions|_length"
                                 r"|_width|_bins|_base)$")


def backbone_range(key: str, default: Any) -> SettingType | None:
    """The range of a backbone config setting, from its name and the type of its default (None: not checked).

    Widths, head counts, kernel sizes, strides and other dimensions (``hidden_size``, ``num_attention_heads``,
    ``conv_depthwise_kernel_size``, ``conv_dim`` items ...) are positive; other counts (``num_hidden_layers``, the
    SpecAugment mask counts) are >= 0; dropouts and probabilities are in [0, 1], ``*_eps`` > 0, every other float
    finite. Token ids are not checked here (the stage sets them from the vocabulary).
    """
    if isinstance(default, bool) or key.endswith("_token_id"):
        return None
    if isinstance(default, int):
        if _POSITIVE_DIMENSION.search(key):
            return POSITIVE_INT
        return NON_NEGATIVE_INT if default >= 0 else None
    if isinstance(default, float):
        if "dropout" in key or key.endswith("_prob") or key == "layerdrop":
            return PROBABILITY
        return FINITE_POSITIVE if key.endswith("_eps") else FINITE
    if isinstance(default, (list, tuple)) and default and all(_is_int(x) and x > 0 for x in default):
        return POSITIVE_INTS
    return None


def check_backbone_config(section: str, backbone_type: str, values: Any) -> None:
    """Check ``model.config.backbone_config`` against the backbone's HF config class.

    A key the class does not know (``hiden_size``) is refused naming the closest valid key; a value whose type does not
    fit the class's default (``hidden_size: abc``) is refused naming the expected type, a value out of its range
    (``hidden_size: -4``, ``num_attention_heads: 0``, ``hidden_dropout: 1.5``) naming the range
    (:func:`backbone_range`). Keys whose default is null are not checked.
    """
    from ..backbones import get_backbone_spec

    if not isinstance(values, Mapping):
        raise StageConfigError(f"{section}: expected a mapping of settings, got {values!r}")
    defaults = get_backbone_spec(backbone_type).build_config(None)
    known = dict(defaults.to_dict())
    known.update({k: getattr(defaults, k, None) for k in inspect.signature(type(defaults).__init__).parameters})
    table = {
        key: _type_of_default(default)
        for key, default in known.items()
        if key not in ("self", "kwargs") and not key.startswith("_")
    }
    check_section(section, values, table)
    for key, value in values.items():
        value_range = backbone_range(key, known.get(key))
        if value_range is not None:
            check_value(f"{section}.{key}", value_range, value)


def check_model_config(section: str, values: Any, init: str) -> None:
    """Check ``model.config``: keys against :class:`~adaptspeech.AdaptSpeechConfig`'s ``__init__`` parameters, values
    against their annotations, language codes, and the nested settings (``backbone_config``, ``adapter_defaults``,
    ``adapters.<lang>``, ``fusion``, ``attention``, ``las``) against their own classes."""
    from ..adapters.config import FusionConfig, LanguageAdapterConfig
    from ..attention.config import AttentionConfig
    from ..backbones import BACKBONES
    from ..configuration import AdaptSpeechConfig
    from ..heads.las_config import LASConfig

    table = _init_parameter_types(AdaptSpeechConfig)
    table["adapter_languages"] = optional(LANGUAGES)
    table["active_languages"] = optional(LANGUAGES)
    table["backbone_type"] = choice(*BACKBONES.names())
    values = check_section(section, values, table)
    if init == "backbone" and "backbone_config" in values:
        raise StageConfigError(
            f"{section}.backbone_config: not used with model.init=backbone (the checkpoint's own config is loaded); "
            "remove it"
        )
    if values.get("backbone_config") is not None:
        check_backbone_config(f"{section}.backbone_config", values.get("backbone_type", "wav2vec2"),
                              values["backbone_config"])
    for key, cls in (("adapter_defaults", LanguageAdapterConfig.flat_layout()), ("fusion", FusionConfig),
                     ("attention", AttentionConfig.flat_layout()), ("las", LASConfig)):
        if values.get(key) is not None:
            check_dataclass_values(f"{section}.{key}", cls, values[key])
    for language, settings in (values.get("adapters") or {}).items():
        check_value(f"{section}.adapters", LANGUAGE_CODE, language)
        if settings is not None:
            check_dataclass_values(f"{section}.adapters.{language}", LanguageAdapterConfig.flat_layout(), settings)
    fusion = values.get("fusion") or {}
    check_fusion_languages(f"{section}.fusion", fusion)


def check_fusion_languages(section: str, fusion: Mapping[str, Any]) -> None:
    """``languages`` (a list of codes) and ``target_language`` (a code) of a fusion section."""
    if "languages" in fusion:
        languages = fusion["languages"]
        if not isinstance(languages, (list, tuple)) or not all(is_language_code(x) for x in languages):
            raise StageConfigError(f"{section}.languages: expected {LANGUAGES.description}, got {languages!r}")
    if fusion.get("target_language") is not None:
        check_value(f"{section}.target_language", LANGUAGE_CODE, fusion["target_language"])


def check_model_section(model: Mapping[str, Any]) -> dict[str, Any]:
    """The whole ``model`` section (types, nested settings, language codes); returns the normalised copy."""
    from ..adapters.config import FusionConfig, LanguageAdapterConfig

    model = check_section("model", model, MODEL_TYPES)
    init = model.get("init", "config")
    if model.get("trainable") is not None:
        model["trainable"] = check_section("model.trainable", model["trainable"], TRAINABLE_TYPES)
    if model.get("config") is not None:
        if init == "pretrained":
            raise StageConfigError(
                "model.config: not used with model.init=pretrained (the saved model's config.json is loaded); remove it"
            )
        check_model_config("model.config", model["config"], init)
    for language, settings in (model.get("add_adapters") or {}).items():
        check_value("model.add_adapters", LANGUAGE_CODE, language)
        if settings is not None:
            check_dataclass_values(f"model.add_adapters.{language}", LanguageAdapterConfig.flat_layout(), settings)
    if model.get("fusion") is not None:
        check_dataclass_values("model.fusion", FusionConfig, model["fusion"])
        check_fusion_languages("model.fusion", model["fusion"])
    if model.get("lid") is not None:
        check_lid_section("model.lid", model["lid"])
    return model


def check_lid_section(section: str, values: Mapping[str, Any]) -> None:
    """``model.lid``: ``languages`` (codes, optional) and the language-ID head's settings
    (:class:`~adaptspeech.heads.lid.LIDConfig`: ``pooling``, ``layer``, the pooling's options)."""
    from ..heads.lid import LIDConfig

    settings = dict(values)
    if settings.get("languages") is not None:
        settings["languages"] = check_value(f"{section}.languages", LANGUAGES, settings["languages"])
    try:
        LIDConfig.from_dict({k: v for k, v in settings.items() if k != "languages"})
    except ValueError as err:
        raise StageConfigError(f"model.{err}") from None  # its messages name lid.<setting>
