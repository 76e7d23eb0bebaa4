"""Run an adaptspeech model's encoder on a batch and decode it with any method (decoding stays outside the model)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch


@torch.no_grad()
def transcribe_batch(
    model: Any, batch: Mapping[str, torch.Tensor], method: str = "ctc_greedy", **options: Any
) -> list[list[int]]:
    """Token ids per utterance of ``batch`` (the collator's output) decoded with ``method``.

    Args:
        model: an :class:`~adaptspeech.AdaptSpeechForCTC` / :class:`~adaptspeech.AdaptSpeechForJointCTCAttention`.
        batch: holds the backbone's input (``input_values`` or ``input_features``), optionally ``attention_mask``
            and ``lang_ids``.
        method: one of ``DECODING_METHODS.names()``.
        **options: passed to the decoder (``beam_size``, ``ctc_weight``, ``length_penalty`` ...).
    """
    from . import decode

    inputs = batch.get(model.main_input_name)
    if inputs is None:
        raise ValueError(f"the batch has no {model.main_input_name!r} (keys: {sorted(batch)})")
    was_training = model.training
    model.eval()
    try:
        hidden, frame_mask, _, _ = model.encode(inputs, batch.get("attention_mask"), batch.get("lang_ids"))
        ctc_log_probs = None
        if getattr(model, "ctc_head", None) is not None:
            ctc_log_probs = model.ctc_head(hidden).float().log_softmax(-1)
        return decode(
            method,
            ctc_log_probs=ctc_log_probs,
            ctc_lengths=frame_mask.sum(-1),
            decoder=getattr(model, "las_head", None),
            encoder_hidden_states=hidden,
            encoder_padding_mask=frame_mask,
            **options,
        )
    finally:
        model.train(was_training)
