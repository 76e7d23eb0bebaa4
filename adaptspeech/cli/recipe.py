"""``adaptspeech recipe`` / ``adaptspeech demo``: run a multi-stage recipe (the offline demo)."""

from __future__ import annotations

import argparse
from pathlib import Path

from .common import CommandError, _split_list, library_progress_bars

# ---- recipe / demo -------------------------------------------------------------------------------------------


def _add_recipe_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "overrides", nargs="*", metavar="KEY=VALUE", help="overrides, e.g. target=ro or base.training.max_steps=200"
    )
    parser.add_argument(
        "--only",
        default=None,
        metavar="STAGE,STAGE",
        help="run only these stages / baselines (the others must have run before); lm: re-run the n-gram LM rows",
    )
    parser.add_argument("--no-progress", action="store_true", help="hide the progress bars")
    curve = parser.add_argument_group(
        "transfer curve",
        "--curve trains and evaluates every method (zero-shot base, from scratch, full fine-tuning, target adapter, "
        "SimAdapter) on nested subsets of the target's training audio, reusing (or first training) the base and the "
        "source adapters in output_dir; settings per budget chosen on dev from curve.yaml's grid (curve.<key>=value "
        "overrides it); writes <output_dir>/curve/curve_results.md, curve_results.json, transfer_curve.png",
    )
    curve.add_argument("--curve", default=None, metavar="BUDGET,BUDGET", help="target budgets, e.g. 1min,3min,10min")
    curve.add_argument(
        "--curve-methods",
        default=None,
        metavar="METHOD,METHOD",
        help="a subset of zero_shot,scratch,finetune,adapter,simadapter (default: all)",
    )
    curve.add_argument(
        "--curve-plan",
        action="store_true",
        help="print every budget's audio and the grid runs with their steps, train nothing (prepares the data)",
    )
    dry = parser.add_argument_group(
        "dry run",
        "--dry-run runs every stage for a few steps on a tiny corpus in the Common Voice layout, with the real model "
        "shape (a Hub backbone is replaced by a random one of XLS-R 300M's shape), each stage in its own process, and "
        "prints per stage: trainable parameters, seconds per step, peak memory; it writes to <output_dir>-dry-run",
    )
    dry.add_argument("--dry-run", action="store_true", help="dry-run every stage instead of the real run")
    dry.add_argument("--dry-run-steps", type=int, default=None, metavar="N", help="optimizer steps per stage (3)")
    dry.add_argument("--dry-run-batch", type=int, default=None, metavar="N", help="utterances per step (2)")
    dry.add_argument("--dry-run-seconds", type=float, default=None, metavar="S", help="mean clip length (2.0)")
    dry.add_argument(
        "--dry-run-backbone", default=None, metavar="JSON", help="backbone config fields over XLS-R 300M's"
    )
    dry.add_argument(
        "--dry-run-precision",
        choices=("recipe", "fp32"),
        default=None,
        help="recipe: the stages' own bf16 settings (default); fp32: off (CPUs without native bfloat16)",
    )


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
    from ..recipes.attention_study import is_study, run_study_cli

    if is_study(recipe_dir):  # recipe.yaml with kind: attention_study
        return run_study_cli(recipe_dir, args)
    from ..recipes.demo_lm import LM_STEP
    from ..recipes.dry_run import STEP_NAMES
    from ..recipes.simadapter import BASELINE_NAMES, STAGE_NAMES, load_recipe, run_recipe

    only = _split_list(args.only) or None
    allowed = STEP_NAMES if args.dry_run else (*STAGE_NAMES, *BASELINE_NAMES, LM_STEP)
    unknown = sorted(set(only or []) - set(allowed))
    if unknown:
        raise CommandError(f"--only: unknown stage(s) {', '.join(unknown)}; allowed values: {', '.join(allowed)}")
    if not Path(recipe_dir).exists():
        raise CommandError(f"{recipe_dir}: no such recipe folder (a folder with recipe.yaml and the stage files)")
    overrides = list(args.overrides) + (["progress=false"] if args.no_progress else [])
    if args.curve is not None:
        return _curve(recipe_dir, overrides, args, only)
    if args.curve_plan or args.curve_methods or any(text.startswith("curve.") for text in overrides):
        raise CommandError("--curve-plan, --curve-methods and curve.* settings need --curve BUDGET,BUDGET")
    if args.dry_run:
        return _dry_run(recipe_dir, overrides, args, only)
    recipe = load_recipe(recipe_dir, overrides)
    with library_progress_bars(enabled=bool(recipe.get("progress", True))):
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


def _curve(recipe_dir: str | Path, overrides: list[str], args: argparse.Namespace, only: list[str] | None) -> int:
    from ..recipes.curve_settings import load_curve_settings, split_curve_overrides
    from ..recipes.simadapter import load_recipe
    from ..recipes.transfer_curve import run_curve

    if args.dry_run or only:
        raise CommandError("--curve runs its own stages: it does not combine with --dry-run or --only")
    budgets = _split_list(args.curve)
    if not budgets:
        raise CommandError("--curve: give the target budgets, e.g. --curve 1min,3min,10min,30min")
    recipe_overrides, curve_overrides = split_curve_overrides(overrides)
    settings = load_curve_settings(recipe_dir, curve_overrides, budgets, _split_list(args.curve_methods) or None)
    recipe = load_recipe(recipe_dir, recipe_overrides)
    with library_progress_bars(enabled=bool(recipe.get("progress", True))):
        result = run_curve(recipe, settings, plan_only=args.curve_plan)
    if args.curve_plan:
        from ..recipes.curve_report import plan_markdown

        print(plan_markdown(result["budgets"], result["plan"]))
        return 0
    folder = Path(result["folder"])
    print((folder / "curve_results.md").read_text())
    print(f"wrote {folder / 'curve_results.md'}, curve_results.json, transfer_curve.png")
    return 0


def _dry_run(recipe_dir: str | Path, overrides: list[str], args: argparse.Namespace, only: list[str] | None) -> int:
    from ..recipes.dry_run import run_dry_run, settings_from_arguments

    result = run_dry_run(recipe_dir, overrides, settings_from_arguments(args), only=only)
    print(result["markdown"])
    minutes = result["total_seconds"] / 60
    print(f"wrote {Path(result['output_dir']) / 'dry_run.md'} and dry_run.json ({minutes:.1f} min)")
    if result["failed"]:
        print(f"failed: {', '.join(result['failed'])}")
        return 1
    return 0


def _run_recipe(args: argparse.Namespace) -> int:
    return _run_recipe_folder(args.recipe_dir, args)


def _run_demo(args: argparse.Namespace) -> int:
    return _run_recipe_folder(args.recipe or demo_recipe_dir(), args)
