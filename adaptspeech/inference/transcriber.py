"""The Python API behind ``adaptspeech transcribe``: recordings of any length -> text (+ timestamps), any decoder.

CTC decoders (``ctc_greedy``, ``ctc_beam``, and an n-gram LM through pyctcdecode) read the recording's CTC
log-probabilities computed chunk by chunk (:mod:`adaptspeech.inference.long_form`), so memory stays bounded however
long the recording; a recording no longer than ``chunk_length_s`` is one encoder call, exactly as unchunked. The
attention and joint decoders read the whole encoder output and run on recordings up to ``chunk_length_s`` (a longer
one is refused with a message naming the CTC decoders).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from ..decoding import ctc_greedy_decode, ctc_prefix_beam_search, evaluating, transcribe_batch
from ..heads import CTC_DECODERS
from . import DEFAULT_CHUNK_LENGTH_S, DEFAULT_STRIDE_LENGTH_S
from .long_form import chunked_ctc_log_probs, model_input
from .model_mixin import MODEL_SAMPLING_RATE, inputs_to_logits_ratio
from .timestamps import ctc_timestamps


@dataclass
class Transcription:
    """One recording's result: ``text``, and with timestamps ``chunks`` = ``[{"text", "start", "end"}, ...]``."""

    text: str
    chunks: list[dict[str, Any]] | None = None
    seconds: float = 0.0
    extra: dict[str, Any] = field(default_factory=dict)


@torch.no_grad()
def transcribe(
    model: Any,
    processor: Any,
    waveforms: Sequence[np.ndarray],
    method: str = "ctc_greedy",
    chunk_length_s: float = DEFAULT_CHUNK_LENGTH_S,
    stride_length_s: float = DEFAULT_STRIDE_LENGTH_S,
    timestamps: str | None = None,
    lm_decoder: Any = None,
    lang_ids: torch.Tensor | None = None,
    chunk_batch_size: int = 4,
    **options: Any,
) -> list[Transcription]:
    """Transcribe 16 kHz mono waveforms one by one.

    Args:
        model: an adaptspeech model (eval mode is set for the call).
        processor: its ``Wav2Vec2Processor`` (feature extractor + tokenizer).
        waveforms: ``[S_i]`` float32 arrays at the feature extractor's rate.
        method: a decoding method name; ``ctc_greedy`` / ``ctc_beam`` work at any length.
        chunk_length_s, stride_length_s: the chunking of CTC decoding (see :mod:`~adaptspeech.inference.long_form`).
        timestamps: ``"word"`` or ``"char"`` start / end times (``ctc_greedy``, or the LM decoder for ``"word"``).
        lm_decoder: an :class:`~adaptspeech.lm.decoder.LMDecoder` (n-gram LM beam search over the CTC output).
        lang_ids: ``[1]`` language index (models routing several languages per utterance).
        chunk_batch_size: chunks per encoder call.
        **options: the decoder's options (``beam_size``, ``ctc_weight`` ...).
    """
    if timestamps is not None and method != "ctc_greedy" and lm_decoder is None:
        raise ValueError(f"timestamps need the best CTC path (method ctc_greedy or an LM), not method {method!r}")
    if lm_decoder is not None and timestamps == "char":
        raise ValueError("the LM decoder gives word timestamps only; use timestamps='word'")
    tokenizer = processor.tokenizer
    seconds_per_frame = inputs_to_logits_ratio(model) / MODEL_SAMPLING_RATE
    results = []
    with evaluating(model):
        for waveform in waveforms:
            inputs = model_input(waveform, processor.feature_extractor)
            seconds = len(waveform) / MODEL_SAMPLING_RATE
            if method not in CTC_DECODERS and lm_decoder is None:
                results.append(Transcription(_decode_whole(model, inputs, tokenizer, method, chunk_length_s,
                                                           seconds, lang_ids, options), seconds=seconds))
                continue
            log_probs = chunked_ctc_log_probs(model, inputs, chunk_length_s, stride_length_s, chunk_batch_size,
                                              lang_ids)
            if lm_decoder is not None:
                text, words = lm_decoder.decode(log_probs, seconds_per_frame=seconds_per_frame, **options)
                results.append(Transcription(text, words if timestamps else None, seconds))
            elif method == "ctc_beam":
                ids = ctc_prefix_beam_search(log_probs[None], blank_id=model.config.pad_token_id, **options)[0]
                results.append(Transcription(_text(tokenizer, ids[0].tokens if ids else []), seconds=seconds))
            else:
                ids = ctc_greedy_decode(log_probs[None], blank_id=model.config.pad_token_id)[0]
                chunks = None
                if timestamps is not None:
                    chunks = ctc_timestamps(log_probs.argmax(-1).tolist(), tokenizer, seconds_per_frame, timestamps)
                results.append(Transcription(_text(tokenizer, ids), chunks, seconds))
    return results


def _text(tokenizer: Any, ids: list[int]) -> str:
    """Label ids (already CTC-collapsed) -> text, as ``transcribe_dataset`` writes it."""
    return tokenizer.decode(ids, group_tokens=False, skip_special_tokens=True)


def _decode_whole(model: Any, inputs: torch.Tensor, tokenizer: Any, method: str, chunk_length_s: float,
                  seconds: float, lang_ids: torch.Tensor | None, options: dict[str, Any]) -> str:
    """Attention / joint decoding of a whole recording (one encoder call)."""
    if seconds > chunk_length_s:
        raise ValueError(
            f"a {seconds:.1f} s recording is longer than the chunk length ({chunk_length_s:g} s): method {method!r} "
            f"decodes whole recordings only; use {' or '.join(CTC_DECODERS)} (chunked), or a longer chunk length if "
            "memory allows"
        )
    batch = {model.main_input_name: inputs[None].to(model.device)}
    if lang_ids is not None:
        batch["lang_ids"] = lang_ids.to(model.device)
    return _text(tokenizer, transcribe_batch(model, batch, method, **options)[0])
