"""The Python API behind ``adaptspeech transcribe``: recordings of any length -> text (+ timestamps), any decoder.

CTC decoders (``ctc_greedy``, ``ctc_beam``, and an n-gram LM through pyctcdecode) read the recording's CTC
log-probabilities on one frame grid, so memory stays bounded however long the recording; a recording no longer than
``chunk_length_s`` is one encoder call, exactly as unchunked. A longer one is split by ``split_by``:

- ``"pauses"`` (default): one speech region at a time, cut at pauses, each normalised as an utterance; pauses are
  blank frames and a word boundary (:func:`~adaptspeech.inference.long_form.paused_ctc_log_probs`); speech without a
  pause longer than ``chunk_length_s`` is chunked inside its region;
- ``"chunks"``: overlapping chunks stitched frame by frame (transformers' pipeline stride rule,
  :func:`~adaptspeech.inference.long_form.chunked_ctc_log_probs`), each chunk's input normalised over its own audio
  (:mod:`adaptspeech.inference.local_norm`: a sliding window of ``norm_window_s``, digital silence left out).

The long-form CER check of docs/inference.md compares both with decoding the utterances one by one. The attention
and joint decoders cut a recording longer than ``chunk_length_s`` into consecutive segments at pauses
(:mod:`adaptspeech.inference.segmenting`; with ``split_by="pauses"`` the speech regions first), decode each alone
and join the texts; the segments and their times are in
``Transcription.extra["segments"]`` (the CTC speech regions in ``extra["speech"]``). A recording with nothing to
decode (no samples, non-finite samples, digital silence or a peak below ``prepare``'s silence threshold, fewer samples
than one output frame needs: :func:`nothing_to_decode`, the rule of ``prepare``) gets the empty text and
``extra["skipped"]`` saying why, without a model call; the other recordings are transcribed as usual.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from ..data.audio import DEFAULT_SILENCE_THRESHOLD, num_frames
from ..decoding import ctc_greedy_decode, ctc_prefix_beam_search, evaluating
from ..heads import CTC_DECODERS
from . import DEFAULT_CHUNK_LENGTH_S, DEFAULT_SEARCH_LENGTH_S, DEFAULT_STRIDE_LENGTH_S, LONG_FORM_SPLITS
from .local_norm import DEFAULT_NORM_WINDOW_S, ModelInput, recording_input
from .long_form import chunked_ctc_log_probs, paused_ctc_log_probs
from .model_mixin import MODEL_SAMPLING_RATE, inputs_to_logits_ratio
from .pauses import DEFAULT_MIN_PAUSE_S, DEFAULT_SPEECH_PAD_S
from .segmenting import Segment, decode_segments, plan_segments
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
    cut_by: str = "energy",
    search_length_s: float = DEFAULT_SEARCH_LENGTH_S,
    norm_window_s: float = DEFAULT_NORM_WINDOW_S,
    split_by: str = "pauses",
    min_pause_s: float = DEFAULT_MIN_PAUSE_S,
    speech_pad_s: float = DEFAULT_SPEECH_PAD_S,
    **options: Any,
) -> list[Transcription]:
    """Transcribe 16 kHz mono waveforms one by one.

    Args:
        model: an adaptspeech model (eval mode is set for the call).
        processor: its ``Wav2Vec2Processor`` (feature extractor + tokenizer).
        waveforms: ``[S_i]`` float32 arrays at the feature extractor's rate.
        method: a decoding method name (any length: CTC chunked, attention / joint segmented).
        chunk_length_s, stride_length_s: the chunking of CTC decoding (see :mod:`~adaptspeech.inference.long_form`);
            ``chunk_length_s`` is also the longest segment of attention / joint decoding.
        timestamps: ``"word"`` or ``"char"`` start / end times (``ctc_greedy``, or the LM decoder for ``"word"``).
        lm_decoder: an :class:`~adaptspeech.lm.decoder.LMDecoder` (n-gram LM beam search over the CTC output).
        lang_ids: ``[1]`` language index (models routing several languages per utterance).
        chunk_batch_size: chunks per encoder call.
        cut_by, search_length_s: where attention / joint decoding cuts a long recording (``"energy"`` or
            ``"ctc_blank"``; see :mod:`~adaptspeech.inference.segmenting`).
        norm_window_s: seconds of the sliding normalisation window of a chunk (``split_by="chunks"``, and speech
            without a pause longer than ``chunk_length_s``).
        split_by: how a recording longer than ``chunk_length_s`` is split: ``"pauses"`` or ``"chunks"`` (see the
            module docstring, and :mod:`~adaptspeech.inference.segmenting` for attention / joint decoding).
        min_pause_s: shortest pause between two speech regions (``split_by="pauses"``).
        speech_pad_s: seconds of pause kept on each side of a speech region (``split_by="pauses"``).
        **options: the decoder's options (``beam_size``, ``ctc_weight`` ...).
    """
    if timestamps is not None and method != "ctc_greedy" and lm_decoder is None:
        raise ValueError(f"timestamps need the best CTC path (method ctc_greedy or an LM), not method {method!r}")
    if lm_decoder is not None and timestamps == "char":
        raise ValueError("the LM decoder gives word timestamps only; use timestamps='word'")
    if split_by not in LONG_FORM_SPLITS:
        raise ValueError(f"split_by {split_by!r}; allowed values: {', '.join(LONG_FORM_SPLITS)}")
    tokenizer = processor.tokenizer
    delimiter = getattr(tokenizer, "word_delimiter_token_id", None)
    seconds_per_frame = inputs_to_logits_ratio(model) / MODEL_SAMPLING_RATE
    results = []
    with evaluating(model):
        for waveform in waveforms:
            seconds = len(waveform) / MODEL_SAMPLING_RATE
            reason = nothing_to_decode(model, waveform)
            if reason is not None:
                results.append(Transcription("", [] if timestamps else None, seconds, {"skipped": reason}))
                continue
            inputs = recording_input(waveform, processor.feature_extractor, norm_window_s)
            if method not in CTC_DECODERS and lm_decoder is None:
                segments = plan_segments(model, inputs, waveform, chunk_length_s, cut_by, search_length_s,
                                         lang_ids=lang_ids, split_by=split_by, min_pause_s=min_pause_s,
                                         speech_pad_s=speech_pad_s)
                results.append(_decode_segmented(model, inputs, segments, waveform, tokenizer, method, lang_ids,
                                                 options))
                continue
            extra: dict[str, Any] = {}
            if split_by == "pauses":
                log_probs, regions = paused_ctc_log_probs(
                    model, inputs, waveform, chunk_length_s, stride_length_s, chunk_batch_size, lang_ids, delimiter,
                    min_pause_s, speech_pad_s)
                extra["speech"] = [{"start": round(a * seconds_per_frame, 6),
                                    "end": round(min(b * seconds_per_frame, seconds), 6)} for a, b in regions]
            else:
                log_probs = chunked_ctc_log_probs(model, inputs, chunk_length_s, stride_length_s, chunk_batch_size,
                                                  lang_ids)
            if lm_decoder is not None:
                text, words = lm_decoder.decode(log_probs, seconds_per_frame=seconds_per_frame, **options)
                results.append(Transcription(text, words if timestamps else None, seconds, extra))
            elif method == "ctc_beam":
                ids = ctc_prefix_beam_search(log_probs[None], blank_id=model.config.pad_token_id, **options)[0]
                results.append(Transcription(_text(tokenizer, ids[0].tokens if ids else []), seconds=seconds,
                                             extra=extra))
            else:
                ids = ctc_greedy_decode(log_probs[None], blank_id=model.config.pad_token_id)[0]
                chunks = None
                if timestamps is not None:
                    chunks = ctc_timestamps(log_probs.argmax(-1).tolist(), tokenizer, seconds_per_frame, timestamps)
                results.append(Transcription(_text(tokenizer, ids), chunks, seconds, extra))
    return results


def nothing_to_decode(model: Any, waveform: np.ndarray,
                      silence_threshold: float = DEFAULT_SILENCE_THRESHOLD) -> str | None:
    """Why a recording gives no text without running the model, or ``None`` when it has something to decode.

    The rule of ``adaptspeech prepare`` (which skips such clips as ``empty``, ``nan``, ``silent`` and ``too_short``):
    a recording with no samples, with a non-finite sample, of nothing but digital silence (exact zeros) or whose peak
    amplitude lies below the silence threshold, and one shorter than :func:`shortest_input` (one encoder frame
    needs one encoder stride of samples, and wav2vec2's feature encoder its receptive field) has no text; running
    the model on it would give a guess (the fbank front end pads a short clip to one frame) or a crash.

    Args:
        model: an adaptspeech model (its front end's stride and output length).
        waveform: ``[S]`` the recording at 16 kHz.
        silence_threshold: peak amplitude below which a recording is silent (``prepare``'s default, about -80 dBFS).
    """
    waveform = np.asarray(waveform)
    if waveform.size == 0:
        return "no samples"
    if not np.isfinite(waveform).all():
        return "non-finite samples (NaN or infinity)"
    peak = float(np.abs(waveform).max())
    if peak == 0.0:
        return "digital silence only"
    if peak < silence_threshold:
        return f"silent (peak amplitude {peak:.2e} < {silence_threshold:.0e})"
    shortest = shortest_input(model)
    if len(waveform) < shortest:
        return f"too short for one output frame ({len(waveform)} samples; the model needs at least {shortest})"
    return None


def shortest_input(model: Any) -> int:
    """The fewest 16-kHz samples a recording needs to be decoded: at least one encoder stride
    (:func:`~adaptspeech.inference.model_mixin.inputs_to_logits_ratio`: 640 for fbank models, 320 for wav2vec2, as
    ``prepare`` counts encoder frames) and one output frame from the front end (wav2vec2's 400-sample receptive
    field)."""
    fbank = model.main_input_name == "input_features"
    stride = inputs_to_logits_ratio(model)
    return next((n for n in range(stride, 100 * stride)
                 if int(model._get_feat_extract_output_lengths(num_frames(n) if fbank else n)) >= 1), stride)


def _text(tokenizer: Any, ids: list[int]) -> str:
    """Label ids (already CTC-collapsed) -> text, as ``transcribe_dataset`` writes it, runs of spaces made one (two
    word delimiters around a blank, as at a pause's forced word boundary, decode to two spaces)."""
    return " ".join(tokenizer.decode(ids, group_tokens=False, skip_special_tokens=True).split())


def _decode_segmented(model: Any, inputs: ModelInput, segments: list[Segment], waveform: np.ndarray, tokenizer: Any,
                      method: str, lang_ids: torch.Tensor | None, options: dict[str, Any]) -> Transcription:
    """Attention / joint decoding of one recording, segment by segment (:func:`plan_segments`: one segment, the whole
    input, when it is no longer than ``chunk_length_s``); the texts joined with a space, ``extra["segments"]`` the
    per-segment ``{"text", "start", "end"}`` (seconds)."""
    ids = decode_segments(model, inputs, segments, method, lang_ids, **options)
    seconds_per_frame = inputs_to_logits_ratio(model) / MODEL_SAMPLING_RATE
    seconds = len(waveform) / MODEL_SAMPLING_RATE
    spans = [
        {"text": _text(tokenizer, row).strip(), "start": round(s.first_frame * seconds_per_frame, 6),
         "end": round(min(s.last_frame * seconds_per_frame, seconds), 6)}
        for s, row in zip(segments, ids, strict=True)
    ]
    text = _text(tokenizer, ids[0]) if len(ids) == 1 else " ".join(span["text"] for span in spans if span["text"])
    return Transcription(text, seconds=seconds, extra={"segments": spans})
