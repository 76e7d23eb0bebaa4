"""Recipes: the engine that loads and runs a recipe folder (:mod:`.engine`, settings typed in :mod:`.spec`), the
SimAdapter protocol and its baselines as the library's recipe task (:mod:`.protocol`), its dry run
(:mod:`.dry_run`), and the tables and plots a run writes (:mod:`.tables`, :mod:`.plots`). Studies live in their
recipe folders (``recipes/<name>/``) with their own Python, which the engine loads."""

from . import protocol  # registers the SimAdapter protocol (task "simadapter")
from .engine import RECIPE_TASKS, RecipeTask, load_recipe, recipe_module, run_recipe
from .spec import RecipeError, RecipeSpec

__all__ = [
    "RECIPE_TASKS",
    "RecipeError",
    "RecipeSpec",
    "RecipeTask",
    "load_recipe",
    "protocol",
    "recipe_module",
    "run_recipe",
]
