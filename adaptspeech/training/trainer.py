"""``AdaptSpeechTrainer``: a thin ``transformers.Trainer`` subclass.

What it adds to the stock Trainer:

* the loss terms the model reports (``loss_ctc``, ``loss_att``, ``loss_fusion_reg``, ``loss_fusion_guide``) are
  averaged over the logging window (and over processes) and logged beside ``loss``; the fusion regulariser and the
  guide loss are already part of the model's ``loss``;
* the guide-loss weight follows ``guide_weight * guide_decay ** step`` (:class:`FusionGuideScheduleCallback`);
* every checkpoint also gets an adapter-only copy (:class:`AdapterCheckpointCallback`);
* evaluation decodes greedily and reports WER / CER overall and per language (``eval_wer``, ``eval_cer_ro``, ...)
  when built with :func:`adaptspeech.training.metrics.build_compute_metrics`.

Everything else (optimizer, scheduler, gradient accumulation, mixed precision, DDP / DeepSpeed through accelerate,
``resume_from_checkpoint`` with optimizer, scheduler, sampler and RNG state) is the stock Trainer's.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

import torch
from transformers import Trainer

from .callbacks import AdapterCheckpointCallback, FusionGuideScheduleCallback

LOSS_TERMS = ("loss_ctc", "loss_att", "loss_fusion_reg", "loss_fusion_guide")


class AdaptSpeechTrainer(Trainer):
    """``Trainer`` for adaptspeech models; takes the same arguments as ``transformers.Trainer``."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.add_callback(FusionGuideScheduleCallback())
        self.add_callback(AdapterCheckpointCallback())
        self._loss_sums: dict[str, torch.Tensor] = defaultdict(lambda: torch.zeros((), dtype=torch.float64))
        self._loss_counts: dict[str, int] = defaultdict(int)

    def compute_loss(
        self,
        model: torch.nn.Module,
        inputs: dict[str, Any],
        return_outputs: bool = False,
        num_items_in_batch: torch.Tensor | int | None = None,
    ) -> torch.Tensor | tuple[torch.Tensor, Any]:
        outputs = model(**inputs)
        loss = outputs["loss"]
        if model.training:
            for term in LOSS_TERMS:
                value = outputs.get(term)
                if value is not None:
                    self._loss_sums[term] = self._loss_sums[term] + value.detach().to("cpu", torch.float64)
                    self._loss_counts[term] += 1
        return (loss, outputs) if return_outputs else loss

    def log(self, logs: dict[str, float], start_time: float | None = None) -> None:
        if "loss" in logs and self._loss_counts:
            for term, count in self._loss_counts.items():
                mean = (self._loss_sums[term] / count).to(self.args.device, torch.float32)
                logs[term] = round(self.accelerator.gather(mean.reshape(1)).mean().item(), 6)
            self._loss_sums.clear()
            self._loss_counts.clear()
        super().log(logs, start_time)
