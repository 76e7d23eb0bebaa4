"""Typed settings records: the one strict ``from_dict``, the integer test, and the flat layout of registered options.

Every group of settings in adaptspeech (an adapter type's options, the fusion, an attention kind's options, the
attention itself) is a dataclass validated once, in ``__post_init__``, and built from a JSON / YAML mapping by
:meth:`Settings.from_dict`, which refuses an unknown key naming it and the allowed ones. A :class:`Settings` also
reads by key as the dict it is saved as (``config.fusion["languages"]``), so code written against the saved layout
keeps working beside the typed attributes (``config.fusion.languages``).

Registries whose entries carry an options class (attention kinds, adapter types; see
:meth:`adaptspeech.registry.Registry.register`) save their settings *flat*, every entry's options side by side in one
mapping (``{"kind": "ldsa", "context_width": 7}``). :func:`flat_layout` turns that layout into a dataclass, so input
can be checked against the field annotations before it is typed.

The settings of a file a user writes (a stage spec, a recipe) are checked against a :class:`SettingType` per
setting: :func:`check_section` refuses an unknown key (naming the closest allowed one: "did you mean") and a value of
the wrong type with one line naming the setting, the expected type and the value. YAML 1.2 reads ``backbone: no`` as
the *string* ``"no"``, which Python takes as true: without these checks ``model.trainable.backbone=no`` would train
the backbone. A :class:`SpecSection` is a section of such a file read by attribute: its fields carry their type and
their default, the one place of both.

Language codes follow one rule everywhere (:func:`is_language_code`): 2 or 3 lower-case letters, optionally followed
by subtags (``ro``, ``pt-BR``, ``zh-CN``, ``rm-sursilv``, MMS's ``cmn-script_simplified``); they name folders,
adapter files and dataset configs. A language list given as one code is a one-element list (``ro`` is ``[ro]``).
"""

from __future__ import annotations

import dataclasses
import difflib
import math
import re
import types
import typing
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, TypeVar

from .errors import StageConfigError

S = TypeVar("S", bound="Settings")
P = TypeVar("P", bound="SpecSection")


def is_int(value: object) -> bool:
    """An integer that is not a bool (``True`` is an ``int`` to Python, never a count to a user)."""
    return isinstance(value, int) and not isinstance(value, bool)


def unknown_keys(unknown: Iterable[Any], allowed: Iterable[str], hints: Mapping[str, str] | None = None) -> str:
    """``a (did you mean b?), c``: the unknown keys, sorted, each with its hint (``hints``: key -> a sentence saying
    where that setting is) or the closest allowed key."""
    allowed = [str(a) for a in allowed]
    parts = []
    for key in sorted(unknown, key=str):
        hint = (hints or {}).get(str(key))
        close = difflib.get_close_matches(str(key), allowed, n=1)
        if hint:
            parts.append(f"{key} ({hint})")
        elif close:
            parts.append(f"{key} (did you mean {close[0]}?)")
        else:
            parts.append(str(key))
    return ", ".join(parts)


def unknown_settings_message(
    what: str,
    unknown: Iterable[Any],
    allowed: Iterable[str],
    hints: Mapping[str, str] | None = None,
    allowed_in_words: str | None = None,
) -> str:
    """``what: unknown setting(s) a (did you mean b?), c; allowed settings: b, d``: the one message of an unknown
    setting, everywhere (the unknown ones sorted, each with its hint or closest allowed key; the allowed ones in the
    order given, or ``allowed_in_words`` where the list is too long for one line: "the fields of
    transformers.TrainingArguments")."""
    allowed = [str(a) for a in allowed]
    listed = allowed_in_words if allowed_in_words is not None else ", ".join(allowed)
    return f"{what}: unknown setting(s) {unknown_keys(unknown, allowed, hints)}; allowed settings: {listed}"


def unknown_settings(what: str, unknown: Iterable[Any], allowed: Iterable[str]) -> ValueError:
    """:func:`unknown_settings_message` as a ValueError (to raise)."""
    return ValueError(unknown_settings_message(what, unknown, allowed))


def strict_from_dict(cls: type[Any], data: Any, what: str, allowed: Iterable[str] | None = None) -> Any:
    """``cls(**data)`` for a dataclass ``cls``, refusing a non-mapping and every key outside ``allowed`` (default: the
    fields of ``cls``) with one line naming them.

    Args:
        cls: the dataclass to build.
        data: the settings, e.g. a section of a YAML or JSON file.
        what: the settings' name in messages (``"fusion config"``).
        allowed: the accepted keys, in the order a message lists them (default: the fields of ``cls``, sorted).
    """
    if not isinstance(data, Mapping):
        raise ValueError(f"{what} must be a mapping of settings, got {type(data).__name__}")
    names = list(allowed) if allowed is not None else sorted(f.name for f in dataclasses.fields(cls))
    unknown = set(data) - set(names)
    if unknown:
        raise unknown_settings(what, unknown, names)
    return cls(**data)


def check_finite(settings: Any) -> None:
    """Refuse a float field of a settings dataclass (or a float in a list field) that is nan or infinite: the
    comparisons of a validation pass it (``nan <= 0`` is false) and training stops later on its loss.

    Raises:
        ValueError: ``<what>: <field> must be a finite number, got nan``.
    """
    for item in dataclasses.fields(settings):
        value = getattr(settings, item.name, None)
        values = value if isinstance(value, (list, tuple)) else [value]
        bad = next((v for v in values if isinstance(v, float) and not math.isfinite(v)), None)
        if bad is not None:
            what = getattr(settings, "what", type(settings).__name__)
            raise ValueError(f"{what}: {item.name} must be a finite number, got {bad}")


class Settings:
    """Base of a settings dataclass: strict :meth:`from_dict`, :meth:`to_dict`, and reading by key.

    Subclasses are dataclasses that validate in ``__post_init__`` and name themselves in :attr:`what`.
    """

    #: the settings' name in messages.
    what: ClassVar[str] = "settings"

    def __init_subclass__(cls, **kwargs: Any) -> None:
        """Every subclass's ``__post_init__`` first refuses a non-finite float setting (:func:`check_finite`)."""
        super().__init_subclass__(**kwargs)
        own = cls.__dict__.get("__post_init__")

        def post_init(self: Settings) -> None:
            check_finite(self)
            if own is not None:
                own(self)

        if own is not None or "__post_init__" not in dir(cls):
            cls.__post_init__ = post_init  # type: ignore[attr-defined]

    @classmethod
    def from_dict(cls: type[S], data: Mapping[str, Any]) -> S:
        """Build from :meth:`to_dict`'s output (or a YAML / JSON section), refusing unknown settings."""
        return strict_from_dict(cls, data, cls.what)

    @classmethod
    def parse(cls: type[S], value: S | Mapping[str, Any]) -> S:
        """``value`` itself when it is already typed, else :meth:`from_dict` of the mapping."""
        return value if isinstance(value, cls) else cls.from_dict(value)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-serialisable dict of every setting (the saved layout)."""
        return dataclasses.asdict(self)  # type: ignore[call-overload]

    def __getitem__(self, key: str) -> Any:
        """The saved dict's value of ``key`` (``config.fusion["languages"]``, as before the settings were typed)."""
        data = self.to_dict()
        if key not in data:
            raise KeyError(f"{self.what} has no setting {key!r}; its settings: {', '.join(sorted(data))}")
        return data[key]

    def get(self, key: str, default: Any = None) -> Any:
        """:meth:`__getitem__` with a default for a missing key, as ``dict.get``."""
        return self.to_dict().get(key, default)


def flat_layout(name: str, base: type[Any], options: Iterable[type[Any]], skip: Iterable[str] = ()) -> type[Any]:
    """A dataclass with the fields of ``base`` (minus ``skip``) and of every class in ``options``, side by side: the
    flat layout a registry's settings are saved in (a name declared by several option classes appears once, with the
    first one's default and annotation).

    Args:
        name: the class name.
        base: the dataclass of the settings every entry shares (e.g. the attention's kind, layers, widths).
        options: the registered option dataclasses.
        skip: fields of ``base`` that are not saved flat (e.g. the nested options object itself).
    """
    spec: dict[str, tuple[str, Any, dataclasses.Field]] = {}
    skipped = set(skip)
    for cls in (base, *options):
        hints = typing.get_type_hints(cls)
        for f in dataclasses.fields(cls):
            if f.name in skipped or f.name in spec:
                continue
            default = (
                dataclasses.field(default=f.default)
                if f.default is not dataclasses.MISSING
                else dataclasses.field(default_factory=f.default_factory)
            )
            spec[f.name] = (f.name, hints[f.name], default)
    return dataclasses.make_dataclass(name, list(spec.values()))


# ---- setting types: what a setting of a user's file accepts ------------------------------------------------------


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


def is_number(value: Any) -> bool:
    """An int or float that is not a bool."""
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def is_finite(value: Any) -> bool:
    """A number (:func:`is_number`) that is neither nan nor infinite."""
    return is_number(value) and math.isfinite(value)


BOOL = SettingType("true or false", lambda v: isinstance(v, bool))
INT = SettingType("an integer", is_int)
POSITIVE_INT = SettingType("a positive integer", lambda v: is_int(v) and v > 0)
NON_NEGATIVE_INT = SettingType("an integer >= 0", lambda v: is_int(v) and v >= 0)
FLOAT = SettingType("a number", is_finite, float)  # nan and infinity are not (YAML's .nan, .inf)
NUMBER = SettingType("a number", is_number, float)
"""Any number, nan and infinity included: the type of a backbone setting, whose range names what it must be."""
POSITIVE_FLOAT = SettingType("a number > 0", lambda v: is_finite(v) and v > 0, float)
STR = SettingType("a string", lambda v: isinstance(v, str))
NON_EMPTY_STR = SettingType("a non-empty string", lambda v: isinstance(v, str) and v.strip() != "")
MAPPING = SettingType("a mapping of settings", lambda v: isinstance(v, Mapping), dict)
ANY = SettingType("any value", lambda v: True)
FINITE = SettingType("a finite number", is_finite)
FINITE_POSITIVE = SettingType("a finite number > 0", lambda v: is_finite(v) and v > 0)
FINITE_NON_NEGATIVE = SettingType("a finite number >= 0", lambda v: is_finite(v) and v >= 0)
PROBABILITY = SettingType("a number in [0, 1]", lambda v: is_finite(v) and 0 <= v <= 1)
BELOW_ONE = SettingType("a number in [0, 1)", lambda v: is_finite(v) and 0 <= v < 1)
OPEN_UNIT = SettingType("a number in (0, 1)", lambda v: is_finite(v) and 0 < v < 1, float)
SPEED_FACTORS = SettingType(
    "a non-empty list of speed factors in (0.5, 2] (e.g. [0.9, 1.0, 1.1])",
    lambda v: isinstance(v, (list, tuple)) and len(v) > 0 and all(is_finite(x) and 0.5 < x <= 2 for x in v),
    lambda v: [float(x) for x in v],
)
POSITIVE_INTS = SettingType(
    "a list of positive integers", lambda v: isinstance(v, (list, tuple)) and all(is_int(x) and x > 0 for x in v)
)
SUBSET_SIZE = SettingType(
    'a subset size (a number and a unit: "10min", "1.5h", "200utt"; an integer is a number of utterances)',
    lambda v: (isinstance(v, str) and v.strip() != "") or (is_int(v) and v > 0),
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


# ---- language codes: one rule ----------------------------------------------------------------------------------

_LANGUAGE_CODE = re.compile(r"^[a-z]{2,3}(?:[-_][A-Za-z0-9]+)*$")
LANGUAGE_CODE_RULE = "ISO 639: 2 or 3 lower-case letters, optionally with subtags: ro, pt-BR, zh-CN"
"""The rule of :func:`is_language_code` in words, for messages."""


def is_language_code(value: Any) -> bool:
    """True for an ISO 639-like code: 2 or 3 lower-case letters, optionally followed by subtags of letters and digits
    joined by ``-`` or ``_`` (``ro``, ``cnh``, ``pt-BR``, ``rm-sursilv``, ``cmn-script_simplified``). The one rule of
    a language code in adaptspeech: stage specs, recipes, Common Voice languages, adapter and head names."""
    return isinstance(value, str) and bool(_LANGUAGE_CODE.match(value))


def check_language_code(value: Any) -> str:
    """``value`` when it is a language code (:func:`is_language_code`), else ValueError naming it and the rule."""
    if not is_language_code(value):
        raise ValueError(f"language code {value!r} is not valid ({LANGUAGE_CODE_RULE})")
    return value


LANGUAGE_CODE = SettingType(f"a language code ({LANGUAGE_CODE_RULE})", is_language_code)


def _language_list(value: Any) -> list[str]:
    return [value] if isinstance(value, str) else list(value)


LANGUAGES = SettingType(
    f"a list of language codes ({LANGUAGE_CODE_RULE})",
    lambda v: is_language_code(v) or (isinstance(v, (list, tuple)) and all(is_language_code(x) for x in v)),
    _language_list,
)


# ---- checking a section of settings ----------------------------------------------------------------------------


def check_value(setting: str, setting_type: SettingType, value: Any) -> Any:
    """The normalised ``value`` of ``setting``, or :class:`StageConfigError` naming the setting, type and value."""
    if not setting_type.accepts(value):
        raise StageConfigError(f"{setting}: expected {setting_type.description}, got {value!r}")
    return setting_type.normalise(value)


def check_section(
    section: str, values: Any, table: Mapping[str, SettingType], hints: Mapping[str, str] | None = None
) -> dict[str, Any]:
    """Refuse unknown keys (naming the closest valid one) and values of the wrong type; return a normalised copy.

    Args:
        section: the section's name in messages (``"data"``, ``"model.trainable"``; ``"stage"`` for the top level).
        values: the section's mapping.
        table: setting name -> :class:`SettingType`.
        hints: setting name -> where that setting is, for a key that is not one (``model.head``).

    Raises:
        StageConfigError: one line naming the setting.
    """
    if not isinstance(values, Mapping):
        raise StageConfigError(f"{section}: expected a mapping of settings, got {values!r}")
    unknown = [key for key in values if key not in table]
    if unknown:
        raise StageConfigError(unknown_settings_message(section, unknown, sorted(table), hints))
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


def setting(setting_type: SettingType, default: Any = None, factory: Callable[[], Any] | None = None) -> Any:
    """A field of a :class:`SpecSection`: its type and its default (``factory`` for a mutable one), side by side."""
    if factory is not None:
        return dataclasses.field(default_factory=factory, metadata={"type": setting_type})
    return dataclasses.field(default=default, metadata={"type": setting_type})


class SpecSection(Settings):
    """A section of a file a user writes (a stage spec's ``data``, ``model``, ``evaluation``), read by attribute.

    Subclasses are dataclasses whose fields are declared with :func:`setting` (type and default in one place) and
    name their section in :attr:`what`. :meth:`read` checks a mapping against the types (:func:`check_section`) and
    remembers which settings it gave: :meth:`to_dict` returns those (normalised), as the user wrote them, so that a
    record of the section (``stage_spec.json``) reads the same whatever defaults a later version gives. Reading by
    key (``spec.data["train_split"]``, ``.get``) reads that record, as the plain mapping did.
    """

    #: setting name -> where that setting is, for a key that is not one (its hint in the unknown-setting message).
    HINTS: ClassVar[Mapping[str, str]] = {}
    _given: tuple[str, ...] | None = None

    @classmethod
    def types(cls) -> dict[str, SettingType]:
        """Setting name -> :class:`SettingType`, in the order of the fields."""
        return {f.name: f.metadata["type"] for f in dataclasses.fields(cls) if "type" in f.metadata}  # type: ignore

    @classmethod
    def read(cls: type[P], values: Any, section: str | None = None) -> P:
        """The section from its mapping (None: the defaults), checked once; ``section`` names it in messages
        (default: :attr:`what`).

        Raises:
            StageConfigError: one line naming the setting, what it expects and the value.
        """
        checked = check_section(section or cls.what, {} if values is None else values, cls.types(), cls.HINTS)
        made = cls(**checked)
        made._given = tuple(checked)
        return made

    @classmethod
    def from_dict(cls: type[P], data: Mapping[str, Any]) -> P:
        """:meth:`read` (a :class:`StageConfigError`, a ``ValueError``, for a setting that does not fit)."""
        return cls.read(data)

    def to_dict(self) -> dict[str, Any]:
        """The settings given to :meth:`read` (normalised; every setting when built directly)."""
        names = self._given if self._given is not None else [f.name for f in dataclasses.fields(self)]  # type: ignore
        return {name: plain(getattr(self, name)) for name in names}

    def given(self, name: str) -> bool:
        """Whether the file set ``name`` (rather than leaving it to its default)."""
        return name in self.to_dict()


def plain(value: Any) -> Any:
    """``value`` as JSON / YAML data (a nested section as its :meth:`SpecSection.to_dict`)."""
    if isinstance(value, Settings):
        return value.to_dict()
    if isinstance(value, Mapping):
        return {key: plain(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(item) for item in value]
    return value
