"""YAML for configs and command-line overrides: a YAML 1.2 parser (ruamel.yaml) with the 1.2 core schema.

PyYAML implements YAML 1.1, where ``3e-4`` is a *string* (1.1 floats need a dot), ``no`` / ``off`` / ``yes`` are
booleans, ``010`` is 8 (octal), ``1:30`` is 90 (base 60) and ``2024-05-01`` is a date. Each surprises users of
training configs (``learning_rate: 3e-4``, ``eval_strategy: no``, ``max_duration: 1:30``), so :func:`load` resolves
plain scalars exactly by the YAML 1.2 core schema and nothing else:

- null: ``null`` ``Null`` ``NULL`` ``~`` and the empty value;
- bool: ``true`` ``True`` ``TRUE`` ``false`` ``False`` ``FALSE``;
- int: ``[-+]?[0-9]+`` (base 10: ``010`` is 10), ``0o[0-7]+`` (octal), ``0x[0-9a-fA-F]+`` (hexadecimal);
- float: ``[-+]?(\\.[0-9]+|[0-9]+(\\.[0-9]*)?)([eE][-+]?[0-9]+)?`` (``3e-4``, ``1e3``, ``.5``), ``[-+]?.inf``,
  ``.nan`` (the three spellings of each);
- everything else is a string (``yes``, ``no``, ``on``, ``off``, ``1:30``, ``2024-05-01``, ``1_000``, ``0b101``).

The merge key ``<<`` keeps working. A key repeated in one mapping is an error (PyYAML kept the last value
silently). Every parse error is raised as :class:`YAMLSyntaxError`, one line naming the problem and its position.
"""

from __future__ import annotations

import re
from typing import Any

import yaml as _pyyaml
from ruamel.yaml import YAML
from ruamel.yaml.error import MarkedYAMLError, YAMLError
from ruamel.yaml.resolver import BaseResolver

__all__ = ["CORE_SCHEMA_RESOLVERS", "CoreSchemaResolver", "YAMLSyntaxError", "load"]


class YAMLSyntaxError(_pyyaml.YAMLError, ValueError):
    """Text that is not valid YAML (or repeats a key); the message is one line with the line and column.

    A ``ValueError``, so the command line prints it as one line. It also derives from PyYAML's ``YAMLError`` for
    callers that still catch that one; catch ``YAMLSyntaxError`` instead.
    """


CORE_SCHEMA_RESOLVERS: tuple[tuple[str, re.Pattern[str], tuple[str, ...]], ...] = (
    ("tag:yaml.org,2002:null", re.compile(r"^(?:~|null|Null|NULL|)$"), ("~", "n", "N", "")),
    ("tag:yaml.org,2002:bool", re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"), tuple("tTfF")),
    ("tag:yaml.org,2002:int", re.compile(r"^(?:[-+]?[0-9]+|0o[0-7]+|0x[0-9a-fA-F]+)$"), tuple("-+0123456789")),
    (
        "tag:yaml.org,2002:float",
        re.compile(
            r"^(?:[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)(?:[eE][-+]?[0-9]+)?"
            r"|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN))$"
        ),
        tuple("-+0123456789."),
    ),
    ("tag:yaml.org,2002:merge", re.compile(r"^<<$"), ("<",)),
)
"""``(tag, pattern, possible first characters)`` of every implicit type: the YAML 1.2 core schema plus the merge key.

The int pattern is tried before the float pattern (``10`` is an int); a plain scalar no pattern matches is a string.
"""


class CoreSchemaResolver(BaseResolver):
    """ruamel.yaml resolver of :data:`CORE_SCHEMA_RESOLVERS`, whatever ``%YAML`` directive the text carries."""

    def __init__(self, version: Any = None, loader: Any = None) -> None:
        super().__init__(loader)

    @property
    def processing_version(self) -> tuple[int, int]:
        """Always 1.2 (the constructors then read ``010`` as ten and ``3e-4`` without a warning)."""
        return (1, 2)


for _tag, _pattern, _first in CORE_SCHEMA_RESOLVERS:
    CoreSchemaResolver.add_implicit_resolver_base(_tag, _pattern, list(_first))


def _parser() -> YAML:
    parser = YAML(typ="safe", pure=True)
    parser.Resolver = CoreSchemaResolver
    return parser


def _one_line(err: YAMLError) -> str:
    """``problem (line L, column C)`` of a ruamel.yaml error, or its first line."""
    if isinstance(err, MarkedYAMLError) and err.problem:
        mark = err.problem_mark or err.context_mark
        where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark is not None else ""
        context = f"{err.context}: " if err.context else ""
        return " ".join(f"{context}{err.problem}{where}".split())
    return " ".join((str(err).splitlines() or [type(err).__name__])[0].split())


def load(text: str) -> Any:
    """Parse YAML text by the YAML 1.2 core schema (see the module docstring).

    Returns:
        The document's value: ``dict``, ``list``, ``str``, ``int``, ``float``, ``bool`` or ``None`` (an empty text
        gives ``None``).

    Raises:
        YAMLSyntaxError: the text is not YAML, holds several documents, or repeats a key in a mapping.
    """
    try:
        return _parser().load(text)
    except YAMLError as err:
        raise YAMLSyntaxError(_one_line(err)) from err
