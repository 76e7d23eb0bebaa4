"""Checks that a stage's settings fit, run before any long work so that a bad setting ends with one clear line.

* :func:`check_model_fits`: the model against the data and the evaluation settings: the evaluation decoder needs the
  head it decodes, the input feature size matches the data's, the width divides into the attention heads, and one
  forward pass on two training rows runs. The forward pass is in eval mode without gradients and draws no random
  numbers, so a seeded run is the same with or without the check.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import torch

from ..decoding.registry import decoders_for
from ..errors import StageConfigError
from ..heads import HEADS
from .decoding_evaluation import default_method

if TYPE_CHECKING:
    from .spec_types import StageEvaluationSettings

def supported_decoders(model: Any) -> list[str]:
    """The decoding methods the model's head supports (those reading the output layers it has)."""
    return list(decoders_for(HEADS.get(model.config.head).outputs))


def _backbone_setting(model: Any, name: str) -> Any:
    return getattr(getattr(model.config, "backbone_config", None), name, None)


def check_model_fits(
    model: Any, collator: Any, rows: Sequence[Mapping[str, Any]], evaluation: StageEvaluationSettings | None = None
) -> None:
    """Check ``model`` against a few training ``rows`` (collated by ``collator``) and the evaluation settings.

    Args:
        model: the stage's model (trainable groups set).
        collator: the stage's data collator.
        rows: at least one training row; the first two are run through the model.
        evaluation: the stage's ``evaluation`` section (its ``method``).

    Raises:
        StageConfigError: naming the setting that does not fit, or quoting the error of the forward pass.
    """
    method = (evaluation.method if evaluation is not None else None) or default_method(model)
    supported = supported_decoders(model)
    if method not in supported:
        raise StageConfigError(
            f"evaluation.method {method!r} does not fit a model with head={model.config.head!r}; "
            f"allowed values: {', '.join(supported)}"
        )
    hidden, heads = _backbone_setting(model, "hidden_size"), _backbone_setting(model, "num_attention_heads")
    if isinstance(hidden, int) and isinstance(heads, int) and heads > 0 and hidden % heads:
        raise StageConfigError(
            f"model.config.backbone_config: hidden_size {hidden} is not a multiple of num_attention_heads {heads}"
        )
    if len(rows) == 0:
        raise StageConfigError("the training split has no rows for data.train_languages (after data.train_subset)")
    batch = collator([rows[i] for i in range(min(2, len(rows)))])
    inputs = batch[model.main_input_name]
    mel_bins = _backbone_setting(model, "num_mel_bins")
    if model.main_input_name == "input_features" and mel_bins is not None and inputs.shape[-1] != mel_bins:
        raise StageConfigError(
            f"model.config.backbone_config.num_mel_bins is {mel_bins} but the prepared data have "
            f"{inputs.shape[-1]} filterbank channels per frame"
        )
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            model(**batch)
    except (RuntimeError, ValueError, IndexError, KeyError) as err:
        first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise StageConfigError(f"the model does not run on the prepared data (a forward pass failed): {first}") from err
    finally:
        model.train(was_training)
