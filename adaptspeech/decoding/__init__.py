"""Decoding, outside the model: CTC greedy / prefix beam search, attention greedy / beam search, and
one-pass joint CTC/attention beam search, plus :func:`decode`, a dispatcher by method name over the
:data:`DECODING_METHODS` registry (:mod:`.registry`: what each method reads and takes).

Every method takes tensors (CTC log-probabilities and/or the LAS head with the encoder output) and
returns token ids; map them to text with the tokenizer.
"""

from __future__ import annotations

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
from .registry import (
    DECODING_METHODS,
    DecodingInputs,
    DecodingMethod,
    check_decoder,
    decode,
    decoders_for,
    method_names,
    register_decoding_method,
)

__all__ = [
    "DECODING_METHODS",
    "AttentionScorer",
    "CTCPrefixScorer",
    "CTCPrefixState",
    "DecodingInputs",
    "DecodingMethod",
    "Hypothesis",
    "Scorer",
    "attention_beam_search",
    "attention_greedy_decode",
    "batch_beam_search",
    "check_decoder",
    "ctc_greedy_decode",
    "ctc_prefix_beam_search",
    "decode",
    "decoders_for",
    "end_detected",
    "evaluating",
    "joint_beam_search",
    "max_output_lengths",
    "method_names",
    "model_decoding_inputs",
    "register_decoding_method",
    "transcribe_batch",
]
