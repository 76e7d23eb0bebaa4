"""The command-line options of the demo's task (``task: synthetic_demo``): the SimAdapter protocol's, ``--curve`` and
``--lid`` (read by :class:`demo.SyntheticDemo`'s command). Declared here, apart from the task, so that
``adaptspeech demo --help`` lists them without importing the task (PyTorch, transformers, peft): this module imports
nothing heavy (:mod:`adaptspeech.recipes.options`)."""

from __future__ import annotations

import argparse

from adaptspeech.recipes.options import TASK_OPTIONS, simadapter_options

LID_SCORINGS = ("acoustic", "hybrid")
DEMO_LID_SCORING = "hybrid"
"""``--lid-scoring``'s default, measured on the fully trained demo (docs/lid.md): with the mix of layers 0..3 the hybrid
with character LMs is right on 93.3% of the test utterances, the head alone on 86.5%."""
DEMO_LID_TOP_K = 3
"""``--lid-top-k``'s default: k = 3 was the best on dev (96.2% against 95.8% for k = 2, character 4-grams)."""


@TASK_OPTIONS.register("synthetic_demo")
def demo_options(parser: argparse.ArgumentParser) -> None:
    """The protocol's options, then the transfer curve's and the language-ID report's."""
    simadapter_options(parser)
    curve = parser.add_argument_group(
        "transfer curve",
        "--curve trains and evaluates every method (zero-shot base, from scratch, full fine-tuning, target "
        "adapter, SimAdapter) on nested subsets of the target's training audio, reusing (or first training) the "
        "base and the source adapters in output_dir; settings per budget chosen on dev from curve.yaml's grid "
        "(curve.<key>=value overrides it); writes <output_dir>/curve/curve_results.md, curve_results.json, "
        "transfer_curve.png",
    )
    curve.add_argument(
        "--curve", default=None, metavar="BUDGET,BUDGET", help="target budgets, e.g. 1min,3min,10min"
    )
    curve.add_argument(
        "--curve-methods",
        default=None,
        metavar="METHOD,METHOD",
        help="a subset of zero_shot,scratch,finetune,adapter,simadapter (default: all) and self_training (the "
        "self-training arm, curve.self_training.*: run only when named)",
    )
    lid = parser.add_argument_group(
        "language identification",
        "--lid trains a language-ID head on a finished run's fusion model (stage_lid.yaml; lid.<key>=value "
        "overrides it) and reports, per language of the evaluation split, its accuracy on whole utterances and "
        "1 s / 3 s prefixes and the CER of automatic routing against the known language: <output_dir>/lid/"
        "lid_report.md, lid_report.json, lid_confusion.png (docs/lid.md)",
    )
    lid.add_argument("--lid", action="store_true",
                     help="train (or reuse) the language-ID head and write its report")
    lid.add_argument("--lid-retrain", action="store_true", help="with --lid: train the head again")
    lid.add_argument("--lid-scoring", choices=LID_SCORINGS, default=DEMO_LID_SCORING,
                     help="with --lid: hybrid also writes per-language character 4-gram LMs of the training "
                     "transcripts into the model, fits the hybrid score on dev (--lid-top-k candidates) and reports "
                     f"it beside the acoustic head (default {DEMO_LID_SCORING}; docs/lid.md)")
    lid.add_argument("--lid-top-k", type=int, default=DEMO_LID_TOP_K, metavar="K",
                     help=f"with --lid-scoring hybrid: the head's candidates it re-scores (default {DEMO_LID_TOP_K})")
    curve.add_argument(
        "--curve-plan",
        action="store_true",
        help="print every budget's audio and the grid runs with their steps, train nothing (prepares the data)",
    )
