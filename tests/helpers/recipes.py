"""Helpers of the recipe tests: the repository's recipe folders (whose own Python the tests load with
:func:`adaptspeech.recipes.recipe_module`), the tiny base model every toy recipe run trains, and the overrides that
make its stages a few steps."""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path

from .cli import FBANK_SHAPE
from .paths import RECIPES

DEMO = RECIPES / "synthetic_demo"
STUDY = RECIPES / "attention_study"

#: the tiny filterbank Conformer (``model.config`` of the base / scratch stages)
TINY = {"backbone_type": "fbank_conformer", "backbone_config": dict(FBANK_SHAPE)}

#: the demo recipe's stages and baselines
DEMO_STAGES = ("base", "source_adapters", "target_adapter", "fusion", "finetune", "scratch")


def few_steps(stages: Iterable[str] = DEMO_STAGES, steps: int = 3, **training: object) -> list[str]:
    """``<stage>.training.*`` overrides: ``steps`` steps of batch 4 without evaluation, plus ``training``."""
    settings = {"max_steps": steps, "per_device_train_batch_size": 4, "eval_strategy": "no", **training}
    return [f"{stage}.training.{key}={value}" for stage in stages for key, value in settings.items()]


ST_POOL_CLIPS = 8
"""The unlabelled clips of the toy self-training runs."""


def self_training_overrides(out: Path, *extra: str) -> list[str]:
    """The toy run: one source language, no baselines, 3 steps a stage, a 2-gram LM of 300 sentences; self-training
    of the adapter alone, at most 2 rounds, the 75% most confident labels, students of 2x3 steps with speed
    perturbation."""
    return [
        f"output_dir={out}", "progress=false", "sources=[cs]", "target=sk", "target_subset=8utt", "baselines={}",
        "corpus.clips_per_language=20", f"base.model.config={json.dumps(TINY)}",
        "source_adapters.model.add_adapters={cs: {bottleneck: 8}}", "source_adapters.model.active_languages=[cs]",
        "source_adapters.model.trainable={adapters: [cs]}", "target_adapter.model.add_adapters={sk: {bottleneck: 8}}",
        "fusion.model.fusion={languages: [cs, sk], target_language: sk, residual: none}",
        "lm.enabled=true", "lm.sentences=300", "lm.order=2", "lm.alphas=[0, 1]", "lm.betas=[0, 1]", "lm.beam_size=8",
        "lm.systems=[target_adapter]", "self_training.beam_size=8",
        "self_training.enabled=true", f"self_training.pool_clips={ST_POOL_CLIPS}", "self_training.rounds=2",
        "self_training.systems=[target_adapter]", "self_training.keep_fraction=0.75",
        *few_steps(("base", "source_adapters", "target_adapter", "fusion"), save_steps=3), *extra,
    ]
