"""Training on the stock ``transformers.Trainer``."""

from ..errors import StageConfigError, TrainingError
from .callbacks import AdapterCheckpointCallback, FusionGuideScheduleCallback, write_adapter_only_checkpoint
from .decoding_evaluation import DecodingEvaluation
from .gradient_check import GradientCheckCallback
from .trainer import LOSS_TERMS, AdaptSpeechTrainer

__all__ = [
    "LOSS_TERMS",
    "AdaptSpeechTrainer",
    "AdapterCheckpointCallback",
    "DecodingEvaluation",
    "FusionGuideScheduleCallback",
    "GradientCheckCallback",
    "StageConfigError",
    "TrainingError",
    "write_adapter_only_checkpoint",
]
