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
"""

from __future__ import annotations

import dataclasses
import math
import typing
from collections.abc import Iterable, Mapping
from typing import Any, ClassVar, TypeVar

S = TypeVar("S", bound="Settings")


def is_int(value: object) -> bool:
    """An integer that is not a bool (``True`` is an ``int`` to Python, never a count to a user)."""
    return isinstance(value, int) and not isinstance(value, bool)


def unknown_settings(what: str, unknown: Iterable[str], allowed: Iterable[str]) -> ValueError:
    """``what: unknown setting(s) a, b; allowed settings: c, d`` as a ValueError (to raise); the unknown ones sorted,
    the allowed ones in the order given."""
    return ValueError(
        f"{what}: unknown setting(s) {', '.join(sorted(unknown))}; allowed settings: {', '.join(allowed)}"
    )


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
