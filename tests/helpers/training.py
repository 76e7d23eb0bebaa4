"""Helpers of the training tests: prepared-style rows (16-bin features, labels, text, language), TrainingArguments
for a few CPU steps, and a callback that stops a run at a step (to resume it)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from datasets import Dataset
from transformers import TrainerCallback, TrainingArguments

LANGS = ["cs", "pl", "ro"]
CHARS = "abcdefg"
VOCAB = {"[PAD]": 0, "[UNK]": 1, "<s>": 2, "</s>": 3, "|": 4, **{c: 5 + i for i, c in enumerate(CHARS)}}


def make_dataset(n: int = 12, seed: int = 0, languages: list[str] | None = None) -> Dataset:
    """Prepared-style rows: 16-bin features, labels of a..g, their text and a language (cycling over ``languages``)."""
    languages = languages or LANGS
    gen = torch.Generator().manual_seed(seed)
    rows = []
    for i in range(n):
        frames = int(torch.randint(40, 60, (), generator=gen))
        labels = torch.randint(5, 12, (4,), generator=gen).tolist()
        rows.append(
            {
                "input_features": torch.randn(frames, 16, generator=gen).tolist(),
                "labels": labels,
                "text": "".join(CHARS[i - 5] for i in labels),
                "language": languages[i % len(languages)],
                "input_length": frames,
            }
        )
    return Dataset.from_list(rows)


def waveforms(n: int = 8) -> Dataset:
    """``n`` rows of 0.25 s random waveforms labelled "abc" in ro (wav2vec2-style models)."""
    gen = torch.Generator().manual_seed(0)
    return Dataset.from_list([
        {"input_values": torch.randn(4000, generator=gen).tolist(), "labels": [5, 6, 7], "text": "abc",
         "language": "ro"}
        for _ in range(n)
    ])


def training_args(out: Path, **overrides: Any) -> TrainingArguments:
    """A few CPU steps, batch 4, no reporting."""
    base = dict(
        output_dir=str(out),
        per_device_train_batch_size=4,
        per_device_eval_batch_size=4,
        max_steps=6,
        learning_rate=1e-2,
        logging_steps=2,
        save_strategy="no",
        report_to=[],
        seed=7,
        data_seed=7,
        use_cpu=True,
        disable_tqdm=True,
        dataloader_num_workers=0,
        remove_unused_columns=False,
    )
    base.update(overrides)
    return TrainingArguments(**base)


class StopAt(TrainerCallback):
    """Stop training at the end of step ``step`` (a run cut short, to be resumed)."""

    def __init__(self, step: int) -> None:
        self.step = step

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> Any:
        if state.global_step == self.step:
            control.should_training_stop = True
        return control


class CountSteps(TrainerCallback):
    """The global step at the end of every optimizer step a run trains (``steps``)."""

    def __init__(self) -> None:
        self.steps: list[int] = []

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> Any:
        self.steps.append(state.global_step)
        return control
