"""A settings file and its command-line overrides: the YAML mapping of a stage or recipe file (:func:`load_yaml`) and
``section.key=value`` overrides applied to it (:func:`apply_overrides`).

Values are read by :mod:`adaptspeech.yaml_loader` (YAML 1.2: ``3e-4`` is a float, ``no`` a string). Every error is a
:class:`~adaptspeech.errors.StageConfigError`, one line naming the file or the override.
"""

from __future__ import annotations

import copy
import os
from pathlib import Path
from typing import Any

from . import yaml_loader
from .errors import StageConfigError

__all__ = ["apply_overrides", "load_yaml", "parse_override"]


def parse_override(text: str) -> tuple[list[str], Any]:
    """``"training.learning_rate=3e-4"`` -> (["training", "learning_rate"], 0.0003); an empty value is None."""
    if "=" not in text:
        raise StageConfigError(f"override {text!r} is not of the form section.key=value")
    key, value = text.split("=", 1)
    path = [part for part in key.strip().split(".") if part]
    if not path:
        raise StageConfigError(f"override {text!r} has an empty key")
    return path, yaml_loader.load(value) if value.strip() else None


def apply_overrides(spec: dict[str, Any], overrides: list[str]) -> dict[str, Any]:
    """Apply ``section.key=value`` overrides to a copy of ``spec`` (missing sections are created)."""
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
    """The mapping of settings in the YAML file at ``path`` (an empty file: ``{}``).

    Raises:
        StageConfigError: the file is missing, is not valid YAML, or holds something other than a mapping.
    """
    path = Path(path)
    if not path.is_file():
        raise StageConfigError(f"config file {path} not found")
    try:
        data = yaml_loader.load(path.read_text()) or {}
    except yaml_loader.YAMLSyntaxError as err:
        first = (str(err).splitlines() or [type(err).__name__])[0]
        raise StageConfigError(f"{path} is not valid YAML: {first}") from err
    if not isinstance(data, dict):
        raise StageConfigError(f"{path} must hold a mapping of settings, found {type(data).__name__}")
    return data
