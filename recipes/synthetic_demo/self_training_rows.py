"""The synthetic demo's self-training rows: the library's noisy-student rounds
(:mod:`adaptspeech.recipes.self_training`) on the target's unlabelled synthetic clips (``self_training.pool_clips`` new
sentences of the training words, training voices; what they say held aside to measure the labels' error), labelled
with the demo's n-gram LM (its ``lm`` section), the rows evaluated as the library writes them
(:mod:`adaptspeech.recipes.self_training_rows`). ``adaptspeech demo --only self_training`` runs them on a finished
demo."""

from __future__ import annotations

import time
from typing import Any

from adaptspeech.progress import log
from adaptspeech.recipes.protocol_evaluation import ExtraRows, TargetEvaluation
from adaptspeech.recipes.self_training import LMSetup, SelfTrainingRunner, ensure_pool
from adaptspeech.recipes.self_training_rows import self_training_rows


def demo_self_training_rows(spec: Any, evaluation: TargetEvaluation, lm_extra: ExtraRows) -> ExtraRows:
    """Run (or reuse) the rounds of every system of ``spec.self_training`` and evaluate the rows.

    Args:
        spec: the demo recipe (:class:`~.demo.SyntheticDemoRecipe`).
        evaluation: the protocol's evaluation so far.
        lm_extra: the LM rows of this evaluation (their rows and edits: the baselines of the rows with the LM).
    """
    started = time.perf_counter()
    settings = spec.self_training
    prepared = spec.output_dir / "prepared"
    pool = ensure_pool(spec, settings, prepared)
    lm = None
    if settings.use_lm and spec.lm.enabled:
        lm = LMSetup(spec.output_dir / "lm", spec.lm.alphas, spec.lm.betas, spec.lm.beam_size)
    runner = SelfTrainingRunner(spec, settings, prepared, pool, lm)
    runs = runner.run()
    lm_rows = {row["system"]: row for row in lm_extra.rows}
    extra = self_training_rows(spec.target, spec.evaluation.split, spec.evaluation.method,
                               dict(spec.evaluation.options), settings, runs, evaluation, lm, lm_rows, lm_extra.edits,
                               runner.pool_seconds / 60, lm_label=spec.lm.label)
    extra.summary["seconds"] = time.perf_counter() - started
    log(f"self-training step: {extra.summary['seconds'] / 60:.1f} min")
    return extra
