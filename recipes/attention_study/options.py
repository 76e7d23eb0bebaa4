"""The command-line options of the attention study's task (``task: attention_study``): none beyond every recipe's.
Declared here, apart from the task, so that ``adaptspeech recipe recipes/attention_study --help`` answers without
importing the task (PyTorch, transformers, peft)."""

from __future__ import annotations

import argparse

from adaptspeech.recipes.options import TASK_OPTIONS


@TASK_OPTIONS.register("attention_study")
def study_options(parser: argparse.ArgumentParser) -> None:
    """No options of its own."""
