"""Decoding, outside the model: CTC greedy / prefix beam search, attention greedy / beam search, and
one-pass joint CTC/attention beam search, plus :func:`decode`, a dispatcher by method name over the
:data:`DECODING_METHODS` registry (:mod:`.registry`: what each method reads and takes).

Every method takes tensors (CTC log-probabilities and/or the LAS head with the encoder output) and
returns token ids; map them to text with the tokenizer.
"""

from __future__ import annotations

import importlib
from typing import Any

_HOMES = {
    "AttentionScorer": "attention_beam",
    "attention_beam_search": "attention_beam",
    "attention_greedy_decode": "attention_greedy",
    "Scorer": "beam_search",
    "batch_beam_search": "beam_search",
    "end_detected": "beam_search",
    "ctc_greedy_decode": "ctc_greedy",
    "ctc_prefix_beam_search": "ctc_prefix_beam",
    "CTCPrefixScorer": "ctc_prefix_score",
    "CTCPrefixState": "ctc_prefix_score",
    "Hypothesis": "hypothesis",
    "joint_beam_search": "joint",
    "max_output_lengths": "lengths",
    "evaluating": "model_decoding",
    "model_decoding_inputs": "model_decoding",
    "transcribe_batch": "model_decoding",
    "DECODING_METHODS": "registry",
    "DecodingInputs": "registry",
    "DecodingMethod": "registry",
    "check_decoder": "registry",
    "decode": "registry",
    "decoders_for": "registry",
    "method_names": "registry",
    "register_decoding_method": "registry",
}
"""The module each public name lives in: names load on first use, so that the registry (which imports no torch) is
read without importing the decoders (the command line builds its parser from it)."""


def __getattr__(name: str) -> Any:
    if name in _HOMES:
        return getattr(importlib.import_module(f".{_HOMES[name]}", __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


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
