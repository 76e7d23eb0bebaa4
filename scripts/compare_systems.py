"""How sure is the demo's ranking? Paired bootstrap of every system against a baseline on the target test set.

Re-decodes the target test set with each stage model a finished recipe run saved (same decoding method and options
as the recipe's evaluation), then prints each system's CER and a paired bootstrap over utterances of its CER minus
the baseline's (:mod:`adaptspeech.metrics.significance`):

    python scripts/compare_systems.py                       # runs/synthetic_demo, baseline: target adapter alone
    python scripts/compare_systems.py --recipe recipes/synthetic_demo --baseline finetune --samples 2000
"""

from __future__ import annotations

import argparse

import torch

from adaptspeech.data.prepared_data import load_prepared, select_languages
from adaptspeech.evaluation import transcribe_dataset
from adaptspeech.metrics.significance import paired_bootstrap, utterance_edits
from adaptspeech.recipes import load_recipe
from adaptspeech.recipes.simadapter.spec import SimAdapterRecipe
from adaptspeech.saved_model import load_saved_model

SYSTEMS = {
    "base": "base, zero-shot",
    "scratch": "from scratch",
    "finetune": "full fine-tuning",
    "target_adapter": "target adapter alone",
    "fusion": "SimAdapter fusion",
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--recipe", default="recipes/synthetic_demo", help="recipe folder (its recipe.yaml)")
    parser.add_argument("--output-dir", default=None, help="the run's output folder (default: the recipe's)")
    parser.add_argument("--baseline", default="target_adapter", choices=sorted(SYSTEMS))
    parser.add_argument("--samples", type=int, default=1000, help="bootstrap resamples")
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)

    recipe = load_recipe(args.recipe, [f"output_dir={args.output_dir}"] if args.output_dir else [])
    if not isinstance(recipe, SimAdapterRecipe):
        raise SystemExit(f"{args.recipe} is not a SimAdapter protocol recipe (task {recipe.task})")
    out = recipe.output_dir
    split, method = recipe.evaluation.split, recipe.evaluation.method
    options = dict(recipe.evaluation.options)
    dataset, processor = load_prepared(out / "prepared")
    test = select_languages(dataset[split], [recipe.target], split, "evaluation")
    references = list(test["text"])

    edits: dict[str, object] = {}
    ref_units = None
    for stage in SYSTEMS:
        model_dir = out / stage / "model"
        if not model_dir.is_dir():
            print(f"{stage}: no model at {model_dir}, skipped")
            continue
        model = load_saved_model(model_dir)
        hypotheses = transcribe_dataset(model, test, processor, method=method, progress=False, **options)
        edits[stage], ref_units = utterance_edits(hypotheses, references, "char")
    if args.baseline not in edits:
        raise SystemExit(f"the baseline {args.baseline!r} has no model under {out}")

    print(f"target {recipe.target}, {split} set: {len(references)} utterances, {int(ref_units.sum())} characters; "
          f"decoding {method} {options or ''}; paired bootstrap, {args.samples} resamples")
    base = edits[args.baseline]
    for stage, stage_edits in edits.items():
        cer = stage_edits.sum() / max(ref_units.sum(), 1)
        line = f"  {SYSTEMS[stage]:<22} CER {100 * cer:6.2f}%"
        if stage != args.baseline:
            result = paired_bootstrap(stage_edits, base, ref_units, num_samples=args.samples)
            line += "   " + result.describe(stage, args.baseline)
        print(line)


if __name__ == "__main__":
    main()
