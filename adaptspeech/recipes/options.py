"""The command-line options of every recipe task, declared where ``adaptspeech recipe FOLDER`` / ``adaptspeech demo``
find them before parsing without importing the task (its stages, PyTorch, transformers, peft).

:data:`TASK_OPTIONS` maps a task's name (``recipe.yaml``'s ``task:``) to the function that adds its options to the
command's parser: the SimAdapter protocol's (``--dry-run`` and its settings) are here; a recipe folder whose own
Python defines a task declares that task's options in the folder's ``options.py`` (:data:`OPTIONS_FILE`), which
registers them here and imports nothing heavy, as ``recipes/synthetic_demo/options.py`` does. A task whose options
are not in the table may still add them in :meth:`~adaptspeech.recipes.engine.RecipeTask.add_arguments` (the parser
then imports the task). This module imports nothing of the package but the registry and the YAML reader.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib
import importlib.machinery
import importlib.util
import os
import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..registry import Registry

RECIPE_FILE = "recipe.yaml"
OPTIONS_FILE = "options.py"
"""The module of a recipe folder that declares the options of the task the folder's Python defines."""
DEFAULT_TASK = "simadapter"
"""The task of a ``recipe.yaml`` without ``task:``: the SimAdapter protocol."""
LIBRARY_TASKS: dict[str, str] = {DEFAULT_TASK: "adaptspeech.recipes.simadapter.protocol"}
"""The library's tasks: name -> the module that registers it (imported when a recipe asks for a task by name)."""

TaskOptions = Callable[[argparse.ArgumentParser], None]
TASK_OPTIONS: Registry[TaskOptions] = Registry("recipe task options")
"""Task name -> the function adding the task's options to the parser of ``adaptspeech recipe`` / ``demo``."""


def add_dry_run_arguments(parser: Any, prefix: str = "") -> None:
    """The dry run's options (a parser or an argument group): ``--steps``, ``--batch``, ``--seconds``, ``--backbone``,
    ``--precision`` as ``scripts/dry_run_recipe.py`` takes them, ``prefix="dry-run-"`` for ``adaptspeech recipe``'s
    ``--dry-run-steps`` ...; unset ones take ``DryRunSettings``'s defaults
    (:func:`adaptspeech.recipes.simadapter.dry_run.settings_from_arguments`)."""
    parser.add_argument(f"--{prefix}steps", type=int, default=None, metavar="N", help="optimizer steps per stage (3)")
    parser.add_argument(f"--{prefix}batch", type=int, default=None, metavar="N", help="utterances per step (2)")
    parser.add_argument(f"--{prefix}seconds", type=float, default=None, metavar="S", help="mean clip length (2.0)")
    parser.add_argument(
        f"--{prefix}backbone", default=None, metavar="JSON", help="backbone config fields merged over XLS-R 300M's"
    )
    parser.add_argument(
        f"--{prefix}precision",
        choices=("recipe", "fp32"),
        default=None,
        help="recipe: the stages' own bf16 settings (default); fp32: off (CPUs without native bfloat16)",
    )


@TASK_OPTIONS.register(DEFAULT_TASK)
def simadapter_options(parser: argparse.ArgumentParser) -> None:
    """The SimAdapter protocol's options: ``--dry-run`` and the dry run's settings (:mod:`.simadapter.dry_run`)."""
    dry = parser.add_argument_group(
        "dry run",
        "--dry-run runs every stage for a few steps on a tiny corpus in the Common Voice layout, with the real "
        "model shape (a Hub backbone is replaced by a random one of XLS-R 300M's shape), each stage in its own "
        "process, and prints per stage: trainable parameters, seconds per step, peak memory; it writes to "
        "<output_dir>-dry-run",
    )
    dry.add_argument("--dry-run", action="store_true", help="dry-run every stage instead of the real run")
    add_dry_run_arguments(dry, prefix="dry-run-")


def folder_package(folder: Path) -> str:
    """Register the recipe folder ``folder`` as a package (once) and return its name: its modules import each other
    relatively. The name is the folder's name and a digest of its path (two copies do not clash)."""
    resolved = str(folder.resolve())
    stem = re.sub(r"\W", "_", folder.resolve().name)
    name = f"adaptspeech_recipe_{stem}_{hashlib.sha1(resolved.encode()).hexdigest()[:8]}"
    if name not in sys.modules:
        spec = importlib.machinery.ModuleSpec(name, None, is_package=True)
        spec.submodule_search_locations = [resolved]
        sys.modules[name] = importlib.util.module_from_spec(spec)
    return name


def folder_options(folder: str | os.PathLike) -> TaskOptions | None:
    """The options of the task of the recipe folder ``folder`` from :data:`TASK_OPTIONS` (after importing the
    folder's :data:`OPTIONS_FILE` when it has one); None when the folder or its ``recipe.yaml`` cannot be read (the
    command then says why) or its task's options are not in the table."""
    try:  # here, not at the top: the parser of `transcribe --onnx` needs no YAML reader
        from .. import yaml_loader
    except ImportError:  # the runtime extra alone: no task options to show (running the recipe needs the full install)
        return None

    folder = Path(folder)
    folder = folder.parent if folder.name == RECIPE_FILE else folder
    try:
        values = yaml_loader.load((folder / RECIPE_FILE).read_text())
    except (OSError, ValueError):
        return None
    name = values.get("task", DEFAULT_TASK) if isinstance(values, dict) else None
    if not isinstance(name, str):
        return None
    if name not in TASK_OPTIONS and (folder / OPTIONS_FILE).is_file():
        try:
            importlib.import_module(f"{folder_package(folder)}.{Path(OPTIONS_FILE).stem}")
        except Exception:  # the folder's own code: the task's import names the fault when the command runs
            return None
    return TASK_OPTIONS.get(name) if name in TASK_OPTIONS else None
