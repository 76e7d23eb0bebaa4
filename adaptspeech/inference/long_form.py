"""Long recordings in bounded memory: CTC log-probabilities of a whole recording, computed chunk by chunk.

A 10-minute recording is 15,000 encoder frames at 25 Hz; full self-attention over them needs T x T scores per head
and layer (7.3 GB measured for a 49k-parameter model). Here the recording's model input is computed once (features
of the whole recording, normalised over the whole recording as for a short one; for a recording longer than one
chunk, frames of digital silence are left out of the normalisation statistics), then the encoder runs on
overlapping chunks of ``chunk_length_s`` seconds, each with ``stride_length_s`` seconds of context on both sides
(transformers' pipeline stride approach), and the CTC log-probabilities of the chunks are stitched.

**Stitching rule.** Chunk boundaries lie on the model's output-frame grid: a chunk starts at a multiple of the input
span of one output frame (4 fbank frames = 640 samples for the fbank front end, 320 samples for wav2vec2), so output
frame ``i`` of a chunk starting at output frame ``s`` is frame ``s + i`` of the recording. Each chunk keeps its frames
from ``stride`` (0 for the first chunk) to ``n - stride`` (``n`` for the last) and consecutive chunks advance by
``chunk - 2 stride`` frames, so the kept frames tile the recording exactly once. A kept frame therefore equals the
unchunked model's frame whenever the encoder's receptive field around it fits inside its chunk; with full attention
it is an approximation (each frame sees at least ``stride_length_s`` of context on each side instead of the whole
recording).
"""

from __future__ import annotations

import copy
import inspect
import math
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from ..data.audio import frame_params, log_mel
from ..data.features import extract_features, feature_type_of, normalize_utterance
from ..decoding import evaluating
from . import DEFAULT_CHUNK_LENGTH_S, DEFAULT_STRIDE_LENGTH_S
from .model_mixin import MODEL_SAMPLING_RATE, inputs_to_logits_ratio

DIGITAL_SILENCE_MARGIN = 1.0
"""Nats above ``log_mel``'s floor below which every mel bin of a frame marks it as digital silence."""
_LOG_FLOOR = math.log(inspect.signature(log_mel).parameters["eps"].default)
_NORMALIZE_EPS = inspect.signature(normalize_utterance).parameters["eps"].default


@dataclass(frozen=True)
class Chunk:
    """One encoder call: model input units ``[start, end)`` (samples or fbank frames); its output frames
    ``[keep_from, keep_to)`` are kept and are frames ``first_frame + keep_from ..`` of the recording."""

    start: int
    end: int
    first_frame: int
    keep_from: int
    keep_to: int | None  # None: up to the chunk's last frame


def plan_chunks(num_units: int, units_per_frame: int, chunk_frames: int, stride_frames: int) -> list[Chunk]:
    """Chunks covering ``num_units`` input units (see the module docstring's stitching rule).

    Args:
        num_units: length of the model input (samples, or fbank frames).
        units_per_frame: input units per output frame (320 samples, or 4 fbank frames).
        chunk_frames: output frames per chunk.
        stride_frames: context frames on each side of a chunk's kept frames.
    """
    step = chunk_frames - 2 * stride_frames
    if stride_frames < 0 or step < 1:
        raise ValueError(
            f"chunk of {chunk_frames} output frames with strides of {stride_frames}: the chunk must be longer than "
            "twice the stride"
        )
    chunks: list[Chunk] = []
    first = 0
    while True:
        start = first * units_per_frame
        end = start + chunk_frames * units_per_frame
        last = end >= num_units
        chunks.append(Chunk(start, min(end, num_units), first, 0 if not chunks else stride_frames,
                            None if last else chunk_frames - stride_frames))
        if last:
            return chunks
        first += step


def model_input(waveform: np.ndarray, feature_extractor: Any, skip_digital_silence: bool = False) -> torch.Tensor:
    """The whole recording's model input, normalised over the recording: ``[S]`` samples or ``[T, n_mels]``.

    Args:
        waveform: ``[S]`` the recording at the feature extractor's rate.
        feature_extractor: the processor's feature extractor (``extract_features`` reads it).
        skip_digital_silence: fbank features with ``do_normalize``: the mean and variance are taken over the frames
            that carry signal, leaving out digital silence (frames whose every mel bin lies within
            ``DIGITAL_SILENCE_MARGIN`` of ``log_mel``'s floor); all frames are then normalised with them. Training
            normalises over single utterances, which hold no digital silence; in a long recording (muted or
            zero-padded stretches, clips joined by zeros) those frames would drag the mean towards the floor and
            inflate the variance. Without such frames the result is exactly the default.
    """
    if not (skip_digital_silence and feature_type_of(feature_extractor) == "fbank"
            and getattr(feature_extractor, "do_normalize", True)):
        _, features = extract_features(waveform, feature_extractor)
        return torch.from_numpy(features)
    raw_extractor = copy.copy(feature_extractor)
    raw_extractor.do_normalize = False
    _, raw = extract_features(waveform, raw_extractor)
    signal = raw.max(axis=1) > _LOG_FLOOR + DIGITAL_SILENCE_MARGIN
    if not signal.any() or signal.all():
        return torch.from_numpy(normalize_utterance(raw, axis=0))
    kept = raw[signal]
    mean, var = kept.mean(axis=0, keepdims=True), kept.var(axis=0, keepdims=True)
    return torch.from_numpy(((raw - mean) / np.sqrt(var + _NORMALIZE_EPS)).astype(np.float32))


def input_units_per_frame(model: Any) -> int:
    """Input units per encoder output frame: samples for waveform models, fbank frames for fbank models."""
    ratio = inputs_to_logits_ratio(model)
    if model.main_input_name == "input_features":
        return ratio // frame_params(MODEL_SAMPLING_RATE)[1]
    return ratio


def _batches(chunks: list[Chunk], batch_size: int) -> Iterator[list[Chunk]]:
    """Runs of equal-length chunks, at most ``batch_size`` each (the last, shorter chunk alone: no padding)."""
    batch: list[Chunk] = []
    for chunk in chunks:
        if batch and (len(batch) == batch_size or chunk.end - chunk.start != batch[0].end - batch[0].start):
            yield batch
            batch = []
        batch.append(chunk)
    if batch:
        yield batch


@torch.no_grad()
def chunked_ctc_log_probs(
    model: Any,
    inputs: torch.Tensor,
    chunk_length_s: float = DEFAULT_CHUNK_LENGTH_S,
    stride_length_s: float = DEFAULT_STRIDE_LENGTH_S,
    batch_size: int = 4,
    lang_ids: torch.Tensor | None = None,
) -> torch.Tensor:
    """CTC log-probabilities ``[T, V]`` (float32, on the CPU) of one recording's model input, chunk by chunk.

    Args:
        model: an adaptspeech model with a CTC head.
        inputs: the recording's model input, ``[S]`` samples or ``[T_fbank, n_mels]`` (see :func:`model_input`).
        chunk_length_s: seconds of audio per encoder call (rounded to whole output frames); a recording no longer
            than this runs in one call, exactly as unchunked.
        stride_length_s: seconds of context on each side of a chunk's kept frames.
        batch_size: chunks per encoder call.
        lang_ids: ``[1]`` the recording's language index (models routing several languages; it also picks the
            language's own CTC head where it has one, as the forward does).

    Returns:
        ``[T, V]`` with T the unchunked model's number of output frames.
    """
    if getattr(model, "ctc_head", None) is None:
        raise ValueError("chunked_ctc_log_probs needs a model with a CTC head")
    ratio = inputs_to_logits_ratio(model)
    per_frame = input_units_per_frame(model)
    chunk_frames = max(1, round(chunk_length_s * MODEL_SAMPLING_RATE / ratio))
    stride_frames = round(stride_length_s * MODEL_SAMPLING_RATE / ratio)
    chunks = plan_chunks(int(inputs.shape[0]), per_frame, chunk_frames, stride_frames)
    pieces: list[torch.Tensor] = []
    device = model.device
    with evaluating(model):
        for batch in _batches(chunks, batch_size):
            x = torch.stack([inputs[c.start : c.end] for c in batch]).to(device)
            ids = None if lang_ids is None else lang_ids.to(device).expand(len(batch))
            hidden, _, _, _ = model.encode(x, None, ids)
            rows = model._row_languages(ids) if hasattr(model, "_row_languages") else None
            log_probs = model.ctc_head(hidden, row_languages=rows).float().log_softmax(-1).cpu()
            pieces.extend(row[c.keep_from : c.keep_to] for c, row in zip(batch, log_probs, strict=True))
    return torch.cat(pieces)

