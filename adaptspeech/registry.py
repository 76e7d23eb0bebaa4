"""A tiny name -> class table.

Every swappable part of adaptspeech (attention kinds, adapter types, fusion types, heads, backbones)
lives in one :class:`Registry`. Configs validate names against these tables, so an unknown name is
refused at construction with the allowed values listed, and tests parametrise over ``names()``.

An entry may carry its own options class (a :class:`~adaptspeech.settings.Settings` dataclass), registered in the
same call (``@ATTENTION.register("ldsa", options=LDSAOptions)``), as peft registers a tuner with its config class:
adding an entry with settings is its own file and one registration, and every question about a setting (which
entries read it, its default) is answered from these classes.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator
from typing import Any, Generic, TypeVar

T = TypeVar("T")


class Registry(Generic[T]):
    """A named table of classes (or factories).

    Args:
        kind (`str`): what the table holds, used in error messages (e.g. ``"attention"``).
    """

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self._table: dict[str, T] = {}
        self._options: dict[str, type[Any]] = {}

    def register(self, name: str, options: type[Any] | None = None) -> Callable[[T], T]:
        """Decorator: ``@REGISTRY.register("name")`` adds the decorated class under ``name``.

        Args:
            name: the entry's name (what configs hold).
            options: the entry's options dataclass, if it has settings of its own (see the module docstring).

        Raises:
            ValueError: if ``name`` is already registered (a silent overwrite would hide a bug).
        """

        def decorator(obj: T) -> T:
            if name in self._table:
                raise ValueError(
                    f"{self.kind} {name!r} is already registered (by {self._table[name]!r}); pick another name"
                )
            self._table[name] = obj
            if options is not None:
                self._options[name] = options
            return obj

        return decorator

    def options(self, name: str) -> type[Any] | None:
        """The options class registered with ``name`` (None: the entry has no settings of its own)."""
        self.get(name)  # KeyError naming the allowed values
        return self._options.get(name)

    def name_of_options(self, options: type[Any]) -> str:
        """The name whose options class is exactly ``options``."""
        for name, cls in self._options.items():
            if cls is options:
                return name
        raise KeyError(f"{options.__name__} is not the options class of any registered {self.kind}")

    def option_owners(self) -> dict[str, list[str]]:
        """Setting name -> the entries whose options class has it (sorted), over every registered options class."""
        owners: dict[str, list[str]] = {}
        for name in self.names():
            cls = self._options.get(name)
            for f in dataclasses.fields(cls) if cls is not None else ():
                owners.setdefault(f.name, []).append(name)
        return owners

    def option_classes(self) -> list[type[Any]]:
        """The distinct options classes, in the order of the sorted names."""
        found: list[type[Any]] = []
        for name in self.names():
            cls = self._options.get(name)
            if cls is not None and cls not in found:
                found.append(cls)
        return found

    def get(self, name: str) -> T:
        """Return the entry registered under ``name``.

        Raises:
            KeyError: naming the unknown value and listing the allowed ones.
        """
        try:
            return self._table[name]
        except KeyError:
            raise KeyError(self.unknown_message(name)) from None

    def check(self, name: str, setting: str) -> None:
        """Raise ``ValueError`` naming ``setting`` if ``name`` is not registered."""
        if name not in self._table:
            raise ValueError(f"{setting}: {self.unknown_message(name)}")

    def unknown_message(self, name: object) -> str:
        return f"unknown {self.kind} {name!r}; allowed values: {', '.join(sorted(self._table))}"

    def names(self) -> list[str]:
        """The registered names, sorted."""
        return sorted(self._table)

    def __contains__(self, name: object) -> bool:
        return name in self._table

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())

    def __len__(self) -> int:
        return len(self._table)
