"""A tiny name -> class table.

Every swappable part of adaptspeech (attention kinds, adapter types, fusion types, heads, backbones)
lives in one :class:`Registry`. Configs validate names against these tables, so an unknown name is
refused at construction with the allowed values listed, and tests parametrise over ``names()``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Generic, TypeVar

T = TypeVar("T")


class Registry(Generic[T]):
    """A named table of classes (or factories).

    Args:
        kind (`str`): what the table holds, used in error messages (e.g. ``"attention"``).
    """

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self._table: dict[str, T] = {}

    def register(self, name: str) -> Callable[[T], T]:
        """Decorator: ``@REGISTRY.register("name")`` adds the decorated class under ``name``.

        Raises:
            ValueError: if ``name`` is already registered (a silent overwrite would hide a bug).
        """

        def decorator(obj: T) -> T:
            if name in self._table:
                raise ValueError(
                    f"{self.kind} {name!r} is already registered (by {self._table[name]!r}); pick another name"
                )
            self._table[name] = obj
            return obj

        return decorator

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
