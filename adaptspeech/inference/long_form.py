"""Long recordings in bounded memory: CTC log-probabilities of a whole recording, computed chunk by chunk.

A 10-minute recording is 15,000 encoder frames at 25 Hz; full self-attention over them needs T x T scores per head
and layer (7.3 GB measured for a 49k-parameter model). Here the recording's features are computed once, then the
encoder runs on overlapping chunks of ``chunk_length_s`` seconds, each with ``stride_length_s`` seconds of context on
both sides (transformers' pipeline stride approach), and the CTC log-probabilities of the chunks are stitched. Each
chunk's input (strides included) is normalised locally, over its own audio only
(:mod:`~adaptspeech.inference.local_norm`): a recording that is one chunk is normalised exactly as ``prepare``
normalises an utterance.

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

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from ..data.audio import frame_params
from ..data.features import extract_features
from ..decoding import evaluating
from . import DEFAULT_CHUNK_LENGTH_S, DEFAULT_STRIDE_LENGTH_S
from .local_norm import ModelInput, input_span
from .model_mixin import MODEL_SAMPLING_RATE, inputs_to_logits_ratio


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


def model_input(waveform: np.ndarray, feature_extractor: Any) -> torch.Tensor:
    """``prepare``'s model input of one utterance, normalised over all of it: ``[S]`` samples or ``[T, n_mels]``.

    Args:
        waveform: ``[S]`` the recording at the feature extractor's rate.
        feature_extractor: the processor's feature extractor (``extract_features`` reads it).
    """
    _, features = extract_features(waveform, feature_extractor)
    return torch.from_numpy(features)


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
    inputs: ModelInput,
    chunk_length_s: float = DEFAULT_CHUNK_LENGTH_S,
    stride_length_s: float = DEFAULT_STRIDE_LENGTH_S,
    batch_size: int = 4,
    lang_ids: torch.Tensor | None = None,
) -> torch.Tensor:
    """CTC log-probabilities ``[T, V]`` (float32, on the CPU) of one recording's model input, chunk by chunk.

    Args:
        model: an adaptspeech model with a CTC head.
        inputs: the recording's model input: a :class:`~adaptspeech.inference.local_norm.RecordingInput` (each
            chunk, strides included, normalised over its own audio), or a tensor ``[S]`` samples or
            ``[T_fbank, n_mels]`` already normalised (sliced as it is, e.g. :func:`model_input`).
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
    chunks = plan_chunks(len(inputs), per_frame, chunk_frames, stride_frames)
    pieces: list[torch.Tensor] = []
    device = model.device
    with evaluating(model):
        for batch in _batches(chunks, batch_size):
            x = torch.stack([input_span(inputs, c.start, c.end) for c in batch]).to(device)
            ids = None if lang_ids is None else lang_ids.to(device).expand(len(batch))
            hidden, _, _, _ = model.encode(x, None, ids)
            rows = model._row_languages(ids) if hasattr(model, "_row_languages") else None
            log_probs = model.ctc_head(hidden, row_languages=rows).float().log_softmax(-1).cpu()
            pieces.extend(row[c.keep_from : c.keep_to] for c, row in zip(batch, log_probs, strict=True))
    return torch.cat(pieces)

