"""Helpers of the recipe tests: the repository's recipe folders (whose own Python the tests load with
:func:`adaptspeech.recipes.recipe_module`), the tiny base model every toy recipe run trains, and the overrides that
make its stages a few steps."""

from __future__ import annotations

from collections.abc import Iterable

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
