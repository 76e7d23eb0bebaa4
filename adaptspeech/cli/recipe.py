"""``adaptspeech recipe`` / ``adaptspeech demo``: run a multi-stage recipe (the offline demo)."""

from __future__ import annotations

import argparse
from pathlib import Path

from .common import CommandError, _split_list

# ---- recipe / demo -------------------------------------------------------------------------------------------


def _add_recipe_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "overrides", nargs="*", metavar="KEY=VALUE", help="overrides, e.g. target=ro or base.training.max_steps=200"
    )
    parser.add_argument(
        "--only",
        default=None,
        metavar="STAGE,STAGE",
        help="run only these stages / baselines (the others must have run before)",
    )
    parser.add_argument("--no-progress", action="store_true", help="hide the progress bars")


def _add_recipe(subparsers: argparse._SubParsersAction) -> None:
    recipe = subparsers.add_parser(
        "recipe",
        help="run a SimAdapter recipe: base, source adapters, target adapter, fusion, baselines",
        description="Run every stage of a recipe folder (recipe.yaml + stage_*.yaml), evaluate on the test sets "
        "and write results.md / results.json, fusion_heatmap.png and training_curves.png in its output_dir.",
    )
    recipe.add_argument("recipe_dir", metavar="RECIPE_DIR", help="a folder with recipe.yaml")
    _add_recipe_options(recipe)
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


def _run_recipe_folder(recipe_dir: str | Path, args: argparse.Namespace) -> int:
    from ..recipes.simadapter import BASELINE_NAMES, STAGE_NAMES, load_recipe, run_recipe

    only = _split_list(args.only) or None
    unknown = sorted(set(only or []) - set(STAGE_NAMES + BASELINE_NAMES))
    if unknown:
        raise CommandError(
            f"--only: unknown stage(s) {', '.join(unknown)}; allowed values: {', '.join(STAGE_NAMES + BASELINE_NAMES)}"
        )
    if not Path(recipe_dir).exists():
        raise CommandError(f"{recipe_dir}: no such recipe folder (a folder with recipe.yaml and the stage files)")
    overrides = list(args.overrides) + (["progress=false"] if args.no_progress else [])
    recipe = load_recipe(recipe_dir, overrides)
    run_recipe(recipe, only=only)
    out = Path(recipe["output_dir"])
    print((out / "results.md").read_text())
    written = [
        str(out / name)
        for name in ("results.md", "results.json", "fusion_heatmap.png", "training_curves.png")
        if (out / name).is_file()
    ]
    print(f"wrote {', '.join(written)}")
    return 0


def _run_recipe(args: argparse.Namespace) -> int:
    return _run_recipe_folder(args.recipe_dir, args)


def _run_demo(args: argparse.Namespace) -> int:
    return _run_recipe_folder(args.recipe or demo_recipe_dir(), args)
