"""``adaptspeech recipe`` / ``adaptspeech demo``: run a recipe folder (the offline demo is ``recipes/synthetic_demo``).

The command knows no recipe by name: it parses the options every recipe has (overrides, ``--only``,
``--no-progress``), and the task of the folder named on the command line adds its own (the SimAdapter protocol's
``--dry-run``, those a recipe folder's own task declares) before the command line is parsed, as ESPnet's
``Task.add_task_arguments``; ``adaptspeech recipe FOLDER --help`` lists them. The options come from the tasks' option
table (:mod:`adaptspeech.recipes.options`, light), so that ``--help`` imports no PyTorch. The engine
(:mod:`adaptspeech.recipes.engine`) then loads the folder and its task runs it.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from ..recipes.options import RECIPE_FILE, folder_options
from .common import CommandError, _split_list, torch_missing_line

# ---- recipe / demo -------------------------------------------------------------------------------------------


def _add_recipe_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "overrides", nargs="*", metavar="KEY=VALUE", help="overrides, e.g. target=ro or base.training.max_steps=200"
    )
    parser.add_argument(
        "--only",
        default=None,
        metavar="STEP,STEP",
        help="run only these steps of the recipe (its stages, or the steps its task names); the others are reused "
        "from an earlier run or left as they are",
    )
    parser.add_argument("--no-progress", action="store_true", help="hide the progress bars")


class _TaskOptions:
    """Mixed into the parser of ``recipe`` / ``demo``: before parsing, the task of the recipe folder named on the
    command line adds its own options (:meth:`add_task_options`)."""

    _recipe_folder: Callable[[Sequence[str]], str | Path | None]
    _task_options_added: bool = False

    def add_task_options(self, args: Sequence[str]) -> None:
        """Add the options of the task of the recipe folder in ``args`` (once; nothing when the folder cannot be
        read: the command then says why)."""
        if self._task_options_added:
            return
        folder = self._recipe_folder(args)
        if folder is not None:
            declared = folder_options(folder)  # the task's option table: no import of the task (nor of torch)
            if declared is not None:
                declared(self)  # type: ignore[arg-type]
                self._task_options_added = True
                return
            try:
                from ..recipes.engine import add_task_arguments

                self._task_options_added = add_task_arguments(folder, self)  # type: ignore[arg-type]
            except ImportError as err:  # no PyTorch: the runner stops with the line saying what to install
                if torch_missing_line(self.prog, err) is None:
                    raise

    def parse_known_args(self, args: Sequence[str] | None = None, namespace: Any = None) -> Any:
        self.add_task_options(list(args or []))
        return super().parse_known_args(args, namespace)  # type: ignore[misc]


def _with_task_options(
    parser: argparse.ArgumentParser, recipe_folder: Callable[[Sequence[str]], str | Path | None]
) -> None:
    """Make ``parser`` (a subcommand's parser, of the command's own parser class) add the recipe task's options
    before it parses; ``recipe_folder`` finds the folder in the subcommand's arguments."""
    parser.__class__ = type(f"Recipe{type(parser).__name__}", (_TaskOptions, type(parser)), {})
    parser._recipe_folder = recipe_folder  # type: ignore[attr-defined]


def _first_positional(parser: argparse.ArgumentParser, args: Sequence[str]) -> str | None:
    """The first argument that is neither an option, nor an option's value, nor a ``KEY=VALUE`` override."""
    takes_value = {
        option for action in parser._actions if action.nargs != 0 for option in action.option_strings
    }
    skip = False
    for arg in map(str, args):
        if skip:
            skip = False
        elif arg.startswith("-"):
            skip = arg in takes_value
        elif "=" not in arg:
            return arg
    return None


def _option_value(args: Sequence[str], option: str) -> str | None:
    """The value of ``option`` in ``args`` (``--recipe DIR`` or ``--recipe=DIR``), else None."""
    args = [str(arg) for arg in args]
    for i, arg in enumerate(args):
        if arg == option and i + 1 < len(args):
            return args[i + 1]
        if arg.startswith(f"{option}="):
            return arg.split("=", 1)[1]
    return None


def _add_recipe(subparsers: argparse._SubParsersAction) -> None:
    recipe = subparsers.add_parser(
        "recipe",
        help="run a recipe folder: the SimAdapter protocol (base, source adapters, target adapter, fusion, "
        "baselines) or the task its own Python defines",
        description="Run every step of a recipe folder (recipe.yaml, the files it names, its own Python) and write "
        "its results in its output_dir (the SimAdapter protocol: results.md / results.json, fusion_heatmap.png and "
        "training_curves.png). `adaptspeech recipe FOLDER --help` also lists the options of the folder's task.",
    )
    recipe.add_argument("recipe_dir", metavar="RECIPE_DIR", help="a folder with recipe.yaml")
    _add_recipe_options(recipe)
    _with_task_options(recipe, lambda args: _first_positional(recipe, args))
    recipe.set_defaults(func=_run_recipe)


def _add_demo(subparsers: argparse._SubParsersAction) -> None:
    demo = subparsers.add_parser(
        "demo",
        help="the offline synthetic SimAdapter demo (recipes/synthetic_demo)",
        description="Build the synthetic corpus, train the multilingual base, the adapters and the fusion and the "
        "baselines, and print the results table; fully offline. Same as `adaptspeech recipe recipes/synthetic_demo`.",
    )
    demo.add_argument("--recipe", default=None, metavar="RECIPE_DIR", help="another recipe folder")
    _add_recipe_options(demo)
    _with_task_options(demo, lambda args: _option_value(args, "--recipe") or _demo_folder_or_none())
    demo.set_defaults(func=_run_demo)


def demo_recipe_dir() -> Path:
    """``recipes/synthetic_demo`` beside the package (a source checkout), else in the current folder."""
    from .. import __file__ as package_file

    for candidate in (
        Path(package_file).resolve().parents[1] / "recipes" / "synthetic_demo",
        Path.cwd() / "recipes" / "synthetic_demo",
    ):
        if (candidate / "recipe.yaml").is_file():
            return candidate
    raise CommandError(
        "cannot find recipes/synthetic_demo beside the package or in the current folder; pass --recipe RECIPE_DIR"
    )


def _demo_folder_or_none() -> Path | None:
    try:
        return demo_recipe_dir()
    except CommandError:
        return None


def _run_recipe_folder(recipe_dir: str | Path, args: argparse.Namespace) -> int:
    from ..recipes.engine import run_command

    if not (Path(recipe_dir) / RECIPE_FILE).is_file():
        raise CommandError(f"{recipe_dir}: no such recipe folder (a folder with {RECIPE_FILE} and the files it names)")
    overrides = list(args.overrides) + (["progress=false"] if args.no_progress else [])
    return run_command(recipe_dir, overrides, _split_list(args.only) or None, args)


def _run_recipe(args: argparse.Namespace) -> int:
    return _run_recipe_folder(args.recipe_dir, args)


def _run_demo(args: argparse.Namespace) -> int:
    return _run_recipe_folder(args.recipe or demo_recipe_dir(), args)
