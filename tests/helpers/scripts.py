"""A benchmark script of ``scripts/`` imported as a module for the duration of a test module."""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Iterator
from types import ModuleType

from helpers.paths import SCRIPTS


def script_module(name: str) -> Iterator[ModuleType]:
    """Import ``scripts/<name>.py`` as ``name`` (registered in ``sys.modules`` so that its dataclasses and spawned
    workers resolve it), yield it, then unregister it. Use as the body of a module-scoped fixture."""
    spec = importlib.util.spec_from_file_location(name, SCRIPTS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault(name, module)
    spec.loader.exec_module(module)
    yield module
    if sys.modules.get(name) is module:
        del sys.modules[name]
