"""The errors a stage spec or a training run ends with (below every floor but the runtime: the settings, the
overrides, the run lock and the trainer raise them): each is one line that names the setting, file or step at fault.

Both are ``ValueError`` subclasses, which the command line prints as one line without a traceback; a fault during
training is also a ``RuntimeError``.
"""

from __future__ import annotations


class StageConfigError(ValueError):
    """A stage spec that does not fit; the message names the setting and the allowed values."""


class TrainingError(RuntimeError, ValueError):
    """Training stopped because continuing would give a silently wrong result (a NaN loss, a trainable parameter
    without gradient, a checkpoint that could not be written); the message names the step and the cause."""
