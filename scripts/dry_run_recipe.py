"""Dry run of a real-data recipe: every stage for a few steps with the real model shape on a tiny corpus.

The same as ``adaptspeech recipe RECIPE_DIR --dry-run``; see :mod:`adaptspeech.recipes.simadapter.dry_run` for what it
runs and measures (trainable parameters, seconds per step, peak memory per stage, each stage in its own process).

    python scripts/dry_run_recipe.py recipes/common_voice                     # XLS-R 300M shape, 3 steps x batch 2
    python scripts/dry_run_recipe.py recipes/common_voice --steps 2 --seconds 1 target=cs
    python scripts/dry_run_recipe.py recipes/common_voice --only fusion,evaluate   # re-run steps, reuse the rest
"""

from __future__ import annotations

import sys

from adaptspeech.recipes.simadapter.dry_run import main

if __name__ == "__main__":
    sys.exit(main())
