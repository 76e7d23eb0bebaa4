"""Recipes: the engine that loads and runs a recipe folder (:mod:`.engine`, settings typed in :mod:`.spec`, the
command-line options of each task in :mod:`.options`), the tables and plots a run writes (:mod:`.tables`,
:mod:`.plots`), and in :mod:`.simadapter` the SimAdapter protocol and its baselines as the library's recipe task
(:mod:`.simadapter.protocol`), its stages, self-training rounds and dry run (:mod:`.simadapter.dry_run`). Studies live
in their recipe folders (``recipes/<name>/``) with their own Python, which the engine loads.

Importing the package is light (the command line reads a task's options from :mod:`.options` without PyTorch); the
names below load on first use (PEP 562), after the SimAdapter protocol registers itself (task ``simadapter``).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from . import simadapter
    from .engine import RECIPE_TASKS, RecipeTask, load_recipe, recipe_module, run_recipe
    from .spec import RecipeError, RecipeSpec

_EXPORTS = {
    "RECIPE_TASKS": ".engine",
    "RecipeTask": ".engine",
    "load_recipe": ".engine",
    "recipe_module": ".engine",
    "run_recipe": ".engine",
    "RecipeError": ".spec",
    "RecipeSpec": ".spec",
}

__all__ = [
    "RECIPE_TASKS",
    "RecipeError",
    "RecipeSpec",
    "RecipeTask",
    "load_recipe",
    "recipe_module",
    "run_recipe",
    "simadapter",
]


def __getattr__(name: str) -> Any:
    """The public names, loaded on first use (the SimAdapter protocol registered first)."""
    if name != "simadapter" and name not in _EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    importlib.import_module(".simadapter.protocol", __name__)  # registers the SimAdapter protocol
    if name == "simadapter":
        return importlib.import_module(".simadapter", __name__)
    return getattr(importlib.import_module(_EXPORTS[name], __name__), name)
