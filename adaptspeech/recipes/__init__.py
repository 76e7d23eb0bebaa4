"""Multi-stage recipes (the SimAdapter protocol and its baselines)."""

from .simadapter import RecipeError, load_recipe, run_recipe

__all__ = ["RecipeError", "load_recipe", "run_recipe"]
