"""Decoding, outside the model: CTC greedy / prefix beam search, attention greedy / beam search, and
one-pass joint CTC/attention beam search, plus :func:`decode`, a dispatcher by method name.

Every method takes tensors (CTC log-probabilities and/or the LAS head with the encoder output) and
returns token ids; map them to text with the tokenizer.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from ..heads.las import LASDecoder
from ..registry import Registry
from .attention_beam import AttentionScorer, attention_beam_search
from .attention_greedy import attention_greedy_decode
from .beam_search import Scorer, batch_beam_search, end_detected
from .ctc_greedy import ctc_greedy_decode
from .ctc_prefix_beam import ctc_prefix_beam_search
from .ctc_prefix_score import CTCPrefixScorer, CTCPrefixState
from .hypothesis import Hypothesis
from .joint import joint_beam_search
from .lengths import max_output_lengths
from .model_decoding import evaluating, model_decoding_inputs, transcribe_batch


@dataclass
class DecodingInputs:
    """What a model hands to :func:`decode` (each method uses what it needs)."""

    ctc_log_probs: torch.Tensor | None = None
    ctc_lengths: torch.Tensor | None = None
    decoder: LASDecoder | None = None
    encoder_hidden_states: torch.Tensor | None = None
    encoder_padding_mask: torch.Tensor | None = None

    def need(self, method: str, *names: str) -> None:
        """Raise naming ``method`` and every input in ``names`` that is missing."""
        missing = [name for name in names if getattr(self, name) is None]
        if missing:
            raise ValueError(f"decode(method={method!r}) needs {', '.join(missing)}")


DecodeFunction = Callable[..., list[list[int]]]
DECODING_METHODS: Registry[DecodeFunction] = Registry("decoding method")


def _best(nbest_lists: list[list[Hypothesis]]) -> list[list[int]]:
    return [hyps[0].tokens if hyps else [] for hyps in nbest_lists]


@DECODING_METHODS.register("ctc_greedy")
def _decode_ctc_greedy(inputs: DecodingInputs, **options: Any) -> list[list[int]]:
    inputs.need("ctc_greedy", "ctc_log_probs")
    return ctc_greedy_decode(inputs.ctc_log_probs, inputs.ctc_lengths, **options)


@DECODING_METHODS.register("ctc_beam")
def _decode_ctc_beam(inputs: DecodingInputs, **options: Any) -> list[list[int]]:
    inputs.need("ctc_beam", "ctc_log_probs")
    return _best(ctc_prefix_beam_search(inputs.ctc_log_probs, inputs.ctc_lengths, **options))


@DECODING_METHODS.register("attention_greedy")
def _decode_attention_greedy(inputs: DecodingInputs, **options: Any) -> list[list[int]]:
    inputs.need("attention_greedy", "decoder", "encoder_hidden_states")
    return attention_greedy_decode(inputs.decoder, inputs.encoder_hidden_states, inputs.encoder_padding_mask,
                                   **options)


@DECODING_METHODS.register("attention_beam")
def _decode_attention_beam(inputs: DecodingInputs, **options: Any) -> list[list[int]]:
    inputs.need("attention_beam", "decoder", "encoder_hidden_states")
    return _best(attention_beam_search(inputs.decoder, inputs.encoder_hidden_states,
                                       inputs.encoder_padding_mask, **options))


@DECODING_METHODS.register("joint")
def _decode_joint(inputs: DecodingInputs, **options: Any) -> list[list[int]]:
    inputs.need("joint", "ctc_log_probs")
    return _best(joint_beam_search(inputs.decoder, inputs.encoder_hidden_states, inputs.encoder_padding_mask,
                                   inputs.ctc_log_probs, inputs.ctc_lengths, **options))


def decode(
    method: str,
    *,
    ctc_log_probs: torch.Tensor | None = None,
    ctc_lengths: torch.Tensor | None = None,
    decoder: LASDecoder | None = None,
    encoder_hidden_states: torch.Tensor | None = None,
    encoder_padding_mask: torch.Tensor | None = None,
    **options: Any,
) -> list[list[int]]:
    """Best token ids per utterance with the named method.

    Args:
        method: one of ``DECODING_METHODS.names()``: ``"ctc_greedy"``, ``"ctc_beam"``,
            ``"attention_greedy"``, ``"attention_beam"``, ``"joint"``.
        ctc_log_probs: ``[B, T, V]`` CTC log-probabilities (CTC methods and ``"joint"``).
        ctc_lengths: ``[B]`` real CTC frames.
        decoder: the LAS head (attention methods and ``"joint"``).
        encoder_hidden_states: ``[B, T, D]`` input of the LAS head.
        encoder_padding_mask: ``[B, T]`` True on real frames.
        **options: passed to the method's function (e.g. ``beam_size``, ``ctc_weight``, ``length_penalty``).

    Raises:
        ValueError: unknown method (listing the allowed ones) or a missing input.
    """
    DECODING_METHODS.check(method, "decode(method=...)")
    inputs = DecodingInputs(ctc_log_probs, ctc_lengths, decoder, encoder_hidden_states, encoder_padding_mask)
    return DECODING_METHODS.get(method)(inputs, **options)


__all__ = [
    "DECODING_METHODS",
    "AttentionScorer",
    "CTCPrefixScorer",
    "CTCPrefixState",
    "DecodingInputs",
    "Hypothesis",
    "Scorer",
    "attention_beam_search",
    "attention_greedy_decode",
    "batch_beam_search",
    "ctc_greedy_decode",
    "ctc_prefix_beam_search",
    "decode",
    "end_detected",
    "evaluating",
    "joint_beam_search",
    "max_output_lengths",
    "model_decoding_inputs",
    "transcribe_batch",
]
