"""Run an adaptspeech model's encoder on a batch and decode it with any method (decoding stays outside the model)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

import torch

from .registry import DecodingInputs, decode


@contextmanager
def evaluating(model: Any) -> Iterator[None]:
    """``model`` in eval mode inside the block (dropout off in the encoder and the decoders); its mode is restored."""
    was_training = model.training
    model.eval()
    try:
        yield
    finally:
        model.train(was_training)


@torch.no_grad()
def model_decoding_inputs(
    model: Any,
    inputs: torch.Tensor,
    attention_mask: torch.Tensor | None = None,
    lang_ids: torch.Tensor | None = None,
) -> Any:
    """The encoder's output in the form every decoder reads (:class:`~adaptspeech.decoding.DecodingInputs`).

    Args:
        model: an :class:`~adaptspeech.AdaptSpeechForCTC` / :class:`~adaptspeech.AdaptSpeechForJointCTCAttention`
            (call it inside :func:`evaluating`).
        inputs: the backbone's input, waveforms ``[B, S]`` or filterbanks ``[B, S, F]``.
        attention_mask: ``[B, S]``, True on real samples / frames.
        lang_ids: ``[B]`` language index per utterance (routed models).

    Returns:
        ``DecodingInputs`` with ``ctc_log_probs`` ``[B, T, V]`` (float32 log-softmax; None without a CTC head),
        ``ctc_lengths`` ``[B]``, ``decoder`` (the LAS head or None), ``encoder_hidden_states`` ``[B, T, D]`` and
        ``encoder_padding_mask`` ``[B, T]``. The CTC head is the one the forward picks for these utterances'
        languages (per-language heads; mixing languages whose heads differ is refused as in the forward).
    """
    hidden, frame_mask, _, _ = model.encode(inputs, attention_mask, lang_ids)
    ctc_log_probs = None
    if getattr(model, "ctc_head", None) is not None:
        rows = model.row_languages(lang_ids) if hasattr(model, "row_languages") else None
        ctc_log_probs = model.ctc_head(hidden, row_languages=rows).float().log_softmax(-1)
    return DecodingInputs(ctc_log_probs, frame_mask.sum(-1), getattr(model, "las_head", None), hidden, frame_mask)


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
    inputs = batch.get(model.main_input_name)
    if inputs is None:
        raise ValueError(f"the batch has no {model.main_input_name!r} (keys: {sorted(batch)})")
    with evaluating(model):
        encoded = model_decoding_inputs(model, inputs, batch.get("attention_mask"), batch.get("lang_ids"))
        return decode(
            method,
            ctc_log_probs=encoded.ctc_log_probs,
            ctc_lengths=encoded.ctc_lengths,
            decoder=encoded.decoder,
            encoder_hidden_states=encoded.encoder_hidden_states,
            encoder_padding_mask=encoded.encoder_padding_mask,
            **options,
        )
