"""Training on the stock ``transformers.Trainer``."""

from .callbacks import AdapterCheckpointCallback, FusionGuideScheduleCallback, write_adapter_only_checkpoint
from .metrics import argmax_logits, build_compute_metrics, collapse_ctc
from .trainer import LOSS_TERMS, AdaptSpeechTrainer

__all__ = [
    "LOSS_TERMS",
    "AdaptSpeechTrainer",
    "AdapterCheckpointCallback",
    "FusionGuideScheduleCallback",
    "argmax_logits",
    "build_compute_metrics",
    "collapse_ctc",
    "write_adapter_only_checkpoint",
]
