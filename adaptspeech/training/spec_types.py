"""The settings of a stage spec: one typed section per part of the file (:class:`DataSettings`,
:class:`ModelSettings` with its :class:`TrainableSettings`, :class:`~.training_settings.TrainingSettings`,
:class:`StageEvaluationSettings`), each read by attribute, its settings' types and defaults declared once in its fields
and checked once, when the spec is read; and the checks of the nested model settings.

The types themselves (:class:`~adaptspeech.settings.SettingType` and its base types) are those of
:mod:`adaptspeech.settings`. The nested dataclass settings (``model.add_adapters.<lang>``, ``model.fusion``,
``model.config.las`` ...) are checked against the annotations of their dataclass, ``model.config`` against
:class:`~adaptspeech.AdaptSpeechConfig`'s ``__init__`` and ``model.config.backbone_config`` against the backbone's HF
config class (keys and the type of each default value). The ``training`` section holds ``TrainingArguments`` fields:
those adaptspeech gives a default are :class:`~adaptspeech.training.training_settings.TrainingSettings` fields, the
others are checked against ``TrainingArguments``' own fields and passed through
(:mod:`adaptspeech.training.training_settings`).

Beyond the type, a value must be in its range: every count that must be positive is positive (``training.max_steps``
is a positive integer or -1, transformers' "train ``num_train_epochs``"; the batch sizes, the accumulation steps,
the backbone's widths, heads and kernel sizes), every rate is a finite number in its interval
(``training.learning_rate: .inf`` is refused, not trained into a NaN loss). The tables are
:data:`~.training_settings.TRAINING_RANGES` and, for ``model.config.backbone_config``, :func:`backbone_range` (from the
key's name and default value).

Language lists (``data.train_languages``, ``model.active_languages`` ...): a single code is read as a one-element
list (``data.train_languages=ro`` is ``[ro]``, not ``[r, o]``); every code follows the one rule of
:func:`adaptspeech.settings.is_language_code`.
"""

from __future__ import annotations

import inspect
import re
import typing
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from ..adapters.config import FusionConfig, LanguageAdapterConfig
from ..adapters.fusion import FUSION_PATHS
from ..attention.config import AttentionConfig
from ..backbones import BACKBONES, get_backbone_spec
from ..backbones.causal_conv import CHUNK, check_conv_lookahead
from ..configuration import AdaptSpeechConfig
from ..decoding import DECODING_METHODS
from ..errors import StageConfigError
from ..heads.las_config import LASConfig
from ..heads.lid import LIDConfig
from ..settings import (
    ANY,
    BOOL,
    FINITE,
    FINITE_POSITIVE,
    INT,
    LANGUAGE_CODE,
    LANGUAGES,
    MAPPING,
    NON_EMPTY_STR,
    NON_NEGATIVE_INT,
    NUMBER,
    OPEN_UNIT,
    POSITIVE_FLOAT,
    POSITIVE_INT,
    POSITIVE_INTS,
    PROBABILITY,
    SPEED_FACTORS,
    STR,
    SUBSET_SIZE,
    SettingType,
    SpecSection,
    check_dataclass_values,
    check_section,
    check_value,
    choice,
    is_int,
    is_language_code,
    optional,
    setting,
    type_of_annotation,
)

MODEL_INITS = ("config", "pretrained", "backbone")
LANGUAGE_FOLDERS = SettingType(
    "a mapping of language code -> folder (e.g. {sk: pools/sk})",
    lambda v: isinstance(v, Mapping) and len(v) > 0 and all(
        is_language_code(k) and isinstance(p, str) and p.strip() != "" for k, p in v.items()),
    dict,
)
"""``data.lid_extra_audio``: one folder per language."""


# ---- the sections ----------------------------------------------------------------------------------------------


@dataclass
class DataSettings(SpecSection):
    """A stage's ``data`` section: which prepared rows it trains and evaluates on (see
    :mod:`adaptspeech.training.stage`)."""

    what = "data"

    prepared_dir: str = setting(NON_EMPTY_STR, "")
    """The output folder of ``adaptspeech prepare`` (required)."""
    train_languages: list[str] = setting(LANGUAGES, factory=list)
    """The languages trained (required, at least one)."""
    eval_languages: list[str] | None = setting(optional(LANGUAGES))
    """The languages evaluated (None: :attr:`train_languages`)."""
    train_split: str = setting(NON_EMPTY_STR, "train")
    eval_split: str = setting(NON_EMPTY_STR, "dev")
    train_subset: str | int | None = setting(optional(SUBSET_SIZE))
    """A subset size per language (``"10min"``, ``"200utt"``; None: every row)."""
    subset_seed: int = setting(INT, 0)
    max_eval_rows: int | None = setting(optional(POSITIVE_INT))
    language_sampling_temperature: float | None = setting(optional(POSITIVE_FLOAT))
    """T: draw languages with p_l ∝ n_l^(1/T) (None: plain shuffling)."""
    speed_perturb: list[float] | None = setting(optional(SPEED_FACTORS))
    pseudo_labelled_dir: str | None = setting(optional(NON_EMPTY_STR))
    pseudo_labelled_share: float = setting(OPEN_UNIT, 0.5)
    pseudo_labelled_min_confidence: float | None = setting(optional(PROBABILITY))
    lid_extra_audio: dict[str, str] | None = setting(optional(LANGUAGE_FOLDERS))
    """Language -> a pool folder of untranscribed audio in it (``adaptspeech prepare audio-folder`` /
    ``common-voice-other``): its segments train a language-ID head trained alone beside the labelled rows (the head
    needs the language, not a transcript; :func:`check_lid_extra_audio`)."""

    @classmethod
    def read(cls, values: Any, section: str | None = None) -> DataSettings:
        """:meth:`SpecSection.read`, then the required settings."""
        data = super().read(values, section)
        if not data.prepared_dir:
            raise StageConfigError("data.prepared_dir is required (the output folder of `adaptspeech prepare`)")
        if not data.train_languages:
            raise StageConfigError("data.train_languages must list at least one language")
        return data

    @property
    def evaluated_languages(self) -> list[str]:
        """:attr:`eval_languages`, else :attr:`train_languages`."""
        return list(self.eval_languages or self.train_languages)


@dataclass
class TrainableSettings(SpecSection):
    """``model.trainable``: the parameter groups a stage trains. Without the section (or with an empty one) the
    backbone and the head train (:data:`DEFAULT_TRAINABLE`); a section trains what it names."""

    what = "model.trainable"

    backbone: bool = setting(BOOL, False)
    head: bool = setting(BOOL, False)
    adapters: list[str] | None = setting(optional(LANGUAGES))
    fusion: bool = setting(BOOL, False)
    feature_encoder: bool | None = setting(optional(BOOL))
    heads: list[str] | None = setting(optional(LANGUAGES))
    lid: bool = setting(BOOL, False)


DEFAULT_TRAINABLE = TrainableSettings(backbone=True, head=True)
"""What a stage without ``model.trainable`` trains: the backbone and the head."""

_MODEL_HINTS = {
    "head": "the head is model.config.head (init: config / backbone) or the saved model's (init: pretrained)",
}


@dataclass
class ModelSettings(SpecSection):
    """A stage's ``model`` section: how the model is built or loaded and what of it trains (see
    :mod:`adaptspeech.training.stage`). The nested settings (``config``, ``add_adapters``, ``fusion``, ``lid``)
    stay mappings, checked against their own classes when read."""

    what = "model"
    HINTS: ClassVar[Mapping[str, str]] = _MODEL_HINTS

    init: str = setting(choice(*MODEL_INITS), "config")
    path: str | None = setting(optional(NON_EMPTY_STR))
    config: dict[str, Any] | None = setting(optional(MAPPING))
    add_adapters: dict[str, Any] | None = setting(optional(MAPPING))
    fusion: dict[str, Any] | None = setting(optional(MAPPING))
    active_languages: list[str] | None = setting(optional(LANGUAGES))
    trainable: TrainableSettings | None = setting(optional(MAPPING))
    gradient_check_steps: int = setting(NON_NEGATIVE_INT, 10)
    """Steps checked for trainable parameters without gradient (0: off)."""
    load_adapters: dict[str, Any] | None = setting(optional(MAPPING))
    mms_language: str | None = setting(optional(LANGUAGE_CODE))
    lid: dict[str, Any] | None = setting(optional(MAPPING))
    fusion_path: str | None = setting(optional(choice(*FUSION_PATHS)))

    @classmethod
    def read(cls, values: Any, section: str | None = None) -> ModelSettings:
        """:meth:`SpecSection.read`, then the nested settings (types, language codes) and the settings that need
        another (``init: pretrained`` / ``backbone`` need ``path``)."""
        model = super().read(values, section)
        if model.trainable is not None:
            model.trainable = TrainableSettings.read(model.trainable)
        _check_model_settings(model)
        return model

    @property
    def trainable_groups(self) -> TrainableSettings:
        """:attr:`trainable`, or :data:`DEFAULT_TRAINABLE` without the section (or with an empty one)."""
        if self.trainable is None or not self.trainable.to_dict():
            return DEFAULT_TRAINABLE
        return self.trainable


@dataclass
class StageEvaluationSettings(SpecSection):
    """A stage's ``evaluation`` section: the decoder of its final and its training-time evaluation."""

    what = "evaluation"

    method: str | None = setting(optional(NON_EMPTY_STR))
    """A decoding method (``adaptspeech.decoding.DECODING_METHODS``; None: the head's default)."""
    batch_size: int = setting(POSITIVE_INT, 16)
    options: dict[str, Any] | None = setting(optional(MAPPING))
    """The method's options (``{beam_size: 8}``)."""

    @classmethod
    def read(cls, values: Any, section: str | None = None) -> StageEvaluationSettings:
        """:meth:`SpecSection.read`, then the method against the decoding registry."""
        evaluation = super().read(values, section)
        if evaluation.method is not None and evaluation.method not in DECODING_METHODS:
            raise StageConfigError(
                f"evaluation.method {evaluation.method!r} unknown; allowed values: "
                f"{', '.join(DECODING_METHODS.names())}"
            )
        return evaluation


def check_lid_extra_audio(data: DataSettings, model: ModelSettings) -> None:
    """``data.lid_extra_audio`` against the rest of the spec: each language one of ``data.train_languages``, and a
    stage that trains the language-ID head alone (pool rows carry no transcript). The folders are read later, with
    the data (:func:`adaptspeech.data.pools.language_pool_rows`).

    Raises:
        StageConfigError: one line naming the setting.
    """
    if not data.lid_extra_audio:
        return
    for language in data.lid_extra_audio:
        if language not in data.train_languages:
            raise StageConfigError(f"data.lid_extra_audio.{language}: {language!r} is not one of "
                                   f"data.train_languages ({', '.join(data.train_languages)})")
    groups = model.trainable_groups
    others = [name for name, value in groups.to_dict().items() if name != "lid" and value]
    if not groups.lid or others:
        raise StageConfigError("data.lid_extra_audio: untranscribed audio trains a language-ID head alone "
                               f"(model.trainable: {{lid: true}}); this stage trains {', '.join(others) or 'no head'}")


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
DATA_TYPES: dict[str, SettingType] = DataSettings.types()
MODEL_TYPES: dict[str, SettingType] = ModelSettings.types()
TRAINABLE_TYPES: dict[str, SettingType] = TrainableSettings.types()
EVALUATION_TYPES: dict[str, SettingType] = StageEvaluationSettings.types()

# ---- checking the nested model settings -------------------------------------------------------------------------


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
    if isinstance(default, (list, tuple)) and default and all(is_int(x) and x > 0 for x in default):
        return POSITIVE_INTS
    return None


def backbone_defaults(backbone_type: str) -> dict[str, Any]:
    """Every setting of ``backbone_type``'s ``backbone_config`` with its default: the HF config class's (its
    ``to_dict`` and ``__init__`` parameters) and adaptspeech's own (``BackboneSpec.own_settings``, default None)."""
    spec = get_backbone_spec(backbone_type)
    defaults = spec.build_config(None)
    known = dict(defaults.to_dict())
    known.update({k: getattr(defaults, k, None) for k in inspect.signature(type(defaults).__init__).parameters})
    known.update({k: None for k in spec.own_settings if k not in known})
    return {key: value for key, value in known.items() if key not in ("self", "kwargs") and not key.startswith("_")}


def _check_conv_lookahead(section: str, values: Mapping[str, Any], kernel_size: int | None) -> None:
    """``conv_lookahead`` of ``values`` (if given) against the conformer convolution's ``kernel_size`` (None: the
    checkpoint's, unknown here: the form only); one line naming the setting."""
    lookahead = values.get("conv_lookahead")
    if lookahead is None:
        return
    if kernel_size is None:  # a checkpoint's: its range is checked against its kernel when the model is built
        if lookahead != CHUNK and not (is_int(lookahead) and lookahead >= 0):
            raise StageConfigError(f"{section}.conv_lookahead: expected null (symmetric), chunk (dynamic chunk "
                                   f"convolution), 0 (causal) or a look-ahead in frames, got {lookahead!r}")
        return
    try:
        check_conv_lookahead(lookahead, kernel_size)
    except ValueError as err:
        raise StageConfigError(f"{section}.conv_lookahead: {err}") from None


def check_backbone_config(section: str, backbone_type: str, values: Any) -> None:
    """Check ``model.config.backbone_config`` against the backbone's HF config class and adaptspeech's own settings
    (``conv_lookahead`` of the conformer convolution: :func:`~adaptspeech.backbones.causal_conv.check_conv_lookahead`).

    A key the class does not know (``hiden_size``) is refused naming the closest valid key; a value whose type does not
    fit the class's default (``hidden_size: abc``) is refused naming the expected type, a value out of its range
    (``hidden_size: -4``, ``num_attention_heads: 0``, ``hidden_dropout: 1.5``) naming the range
    (:func:`backbone_range`). Keys whose default is null are not checked.
    """
    if not isinstance(values, Mapping):
        raise StageConfigError(f"{section}: expected a mapping of settings, got {values!r}")
    known = backbone_defaults(backbone_type)
    table = {key: _type_of_default(default) for key, default in known.items()}
    check_section(section, values, table)
    for key, value in values.items():
        value_range = backbone_range(key, known.get(key))
        if value_range is not None:
            check_value(f"{section}.{key}", value_range, value)
    if "conv_lookahead" in known:
        _check_conv_lookahead(section, values, values.get("conv_depthwise_kernel_size",
                                                          known.get("conv_depthwise_kernel_size")))


def check_checkpoint_settings(section: str, backbone_type: str | None, values: Any) -> None:
    """``model.config.backbone_config`` with ``model.init: backbone``: only adaptspeech's own settings of the backbone
    (``BackboneSpec.own_settings``, e.g. ``conv_lookahead`` of wav2vec2_conformer) go on the checkpoint's own config.

    Raises:
        StageConfigError: another setting (naming it and the allowed ones), or a bad value.
    """
    own = get_backbone_spec(backbone_type).own_settings if backbone_type else ()
    if not isinstance(values, Mapping):
        raise StageConfigError(f"{section}: expected a mapping of settings, got {values!r}")
    others = sorted(key for key in values if key not in own)
    if others:
        allowed = (f"but for adaptspeech's own settings ({', '.join(own)})" if own else
                   f"({backbone_type} has no adaptspeech setting of its own)" if backbone_type else
                   "(name model.config.backbone_type to give adaptspeech's own settings of the backbone)")
        raise StageConfigError(f"{section}: not used with model.init=backbone (the checkpoint's own config is loaded) "
                               f"{allowed}; remove {', '.join(others)}")
    _check_conv_lookahead(section, values, None)


def check_model_config(section: str, values: Any, init: str) -> None:
    """Check ``model.config``: keys against :class:`~adaptspeech.AdaptSpeechConfig`'s ``__init__`` parameters, values
    against their annotations, language codes, and the nested settings (``backbone_config``, ``adapter_defaults``,
    ``adapters.<lang>``, ``fusion``, ``attention``, ``las``) against their own classes."""
    table = _init_parameter_types(AdaptSpeechConfig)
    table["adapter_languages"] = optional(LANGUAGES)
    table["active_languages"] = optional(LANGUAGES)
    table["backbone_type"] = choice(*BACKBONES.names())
    values = check_section(section, values, table)
    if init == "backbone" and "backbone_config" in values:
        check_checkpoint_settings(f"{section}.backbone_config", values.get("backbone_type"), values["backbone_config"])
    elif values.get("backbone_config") is not None:
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


def _check_model_settings(model: ModelSettings) -> None:
    """The nested settings of a ``model`` section (types, language codes) and the settings that need another."""
    if model.config is not None:
        if model.init == "pretrained":
            raise StageConfigError(
                "model.config: not used with model.init=pretrained (the saved model's config.json is loaded); remove it"
            )
        check_model_config("model.config", model.config, model.init)
    for language, settings in (model.add_adapters or {}).items():
        check_value("model.add_adapters", LANGUAGE_CODE, language)
        if settings is not None:
            check_dataclass_values(f"model.add_adapters.{language}", LanguageAdapterConfig.flat_layout(), settings)
    if model.fusion is not None:
        check_dataclass_values("model.fusion", FusionConfig, model.fusion)
        check_fusion_languages("model.fusion", model.fusion)
    if model.lid is not None:
        check_lid_section("model.lid", model.lid)
    if model.init in ("pretrained", "backbone") and not model.path:
        raise StageConfigError(f"model.init={model.init!r} needs model.path")


def check_lid_section(section: str, values: Mapping[str, Any]) -> None:
    """``model.lid``: ``languages`` (codes, optional) and the language-ID head's settings
    (:class:`~adaptspeech.heads.lid.LIDConfig`: ``pooling``, ``layer``, the pooling's options)."""
    settings = dict(values)
    if settings.get("languages") is not None:
        settings["languages"] = check_value(f"{section}.languages", LANGUAGES, settings["languages"])
    try:
        LIDConfig.from_dict({k: v for k, v in settings.items() if k != "languages"})
    except ValueError as err:
        raise StageConfigError(f"model.{err}") from None  # its messages name lid.<setting>
