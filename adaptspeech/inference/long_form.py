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

import dataclasses
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from ..data.audio import frame_params
from ..data.features import extract_features
from ..decoding import evaluating
from . import DEFAULT_CHUNK_LENGTH_S, DEFAULT_STRIDE_LENGTH_S
from .local_norm import ModelInput, RecordingInput, input_span, touches_digital_silence
from .model_mixin import MODEL_SAMPLING_RATE, inputs_to_logits_ratio
from .pauses import (
    DEFAULT_MIN_PAUSE_S,
    DEFAULT_PAUSE_DB,
    DEFAULT_SPEECH_PAD_S,
    MIN_SPEECH_S,
    energy_cost,
    speech_regions,
)


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



def slice_input(inputs: ModelInput, start: int, end: int) -> ModelInput:
    """Units ``[start, end)`` of a recording's model input as a recording of their own (a :class:`RecordingInput`
    sliced, unnormalised, or a tensor sliced)."""
    if isinstance(inputs, RecordingInput):
        return dataclasses.replace(inputs, raw=inputs.raw[start:end], silent=inputs.silent[start:end], waveform=None,
                                   extractor=None, waveform_silent=None)  # its samples would not match the units
    return inputs[start:end]


def utterance_input(inputs: ModelInput, start: int, end: int) -> torch.Tensor:
    """Units ``[start, end)`` normalised as one utterance (:meth:`RecordingInput.utterance`), or a tensor sliced."""
    return inputs.utterance(start, end) if isinstance(inputs, RecordingInput) else inputs[start:end]


def speech_spans(model: Any, num_units: int, waveform: np.ndarray, min_pause_s: float = DEFAULT_MIN_PAUSE_S,
                 speech_pad_s: float = DEFAULT_SPEECH_PAD_S,
                 pause_db: float = DEFAULT_PAUSE_DB) -> tuple[list[tuple[int, int]], list[int]]:
    """The speech regions of a recording as model input units, and the word boundaries between them.

    Region ``[a, b)`` of output frames (:func:`~adaptspeech.inference.pauses.speech_regions`) is input units
    ``[a u, b u)`` (the last region up to ``num_units``) less the units at either end that touch digital silence
    (:func:`~adaptspeech.inference.local_norm.touches_digital_silence`: ``prepare``'s utterances hold none); a region
    then shorter than ``MIN_SPEECH_S``, or too short for the front end to give one frame, is dropped.

    Args:
        model: an adaptspeech model (its frame rate and front end).
        num_units: length of the recording's model input.
        waveform: ``[S]`` the recording at 16 kHz.
        min_pause_s, speech_pad_s, pause_db: the pause rule's settings (:mod:`~adaptspeech.inference.pauses`).

    Returns:
        ``(spans [(start_unit, end_unit), ...] in order, boundaries [output frame, ...])``.
    """
    if min_pause_s <= 0 or speech_pad_s < 0:
        raise ValueError(f"min_pause_s must be positive and speech_pad_s not negative, got {min_pause_s} and "
                         f"{speech_pad_s}")
    ratio = inputs_to_logits_ratio(model)
    per_frame = input_units_per_frame(model)
    seconds_per_frame = ratio / MODEL_SAMPLING_RATE
    num_frames = -(-num_units // per_frame)
    regions, boundaries = speech_regions(energy_cost(waveform, ratio, num_frames),
                                         max(1, round(min_pause_s / seconds_per_frame)),
                                         round(speech_pad_s / seconds_per_frame), pause_db)
    fbank = model.main_input_name == "input_features"
    touching = touches_digital_silence(waveform, fbank, num_units)
    seconds_per_unit = (frame_params(MODEL_SAMPLING_RATE)[1] if fbank else 1) / MODEL_SAMPLING_RATE
    spans = []
    for a, b in regions:
        low, high = a * per_frame, num_units if b == num_frames else min(b * per_frame, num_units)
        sound = np.flatnonzero(~touching[low:high])
        if len(sound) == 0:
            continue
        start, end = low + int(sound[0]), low + int(sound[-1]) + 1
        long_enough = (end - start) * seconds_per_unit >= MIN_SPEECH_S
        if long_enough and int(model._get_feat_extract_output_lengths(end - start)) > 0:
            spans.append((start, end))
    return spans, boundaries


IMPOSSIBLE_LOG_PROB = -1e4
"""Log-probability of the labels a frame outside speech cannot emit (finite, so that beam searches stay finite)."""


def _blank(num_frames: int, model: Any, lang_ids: torch.Tensor | None) -> torch.Tensor:
    """``[num_frames, V]`` log-probabilities of frames outside speech: blank 0, every other label impossible; ``V`` is
    the output size of the CTC head ``lang_ids`` selects (a language head may have a vocabulary of its own)."""
    head = model.ctc_head
    width = head.output_layer(head.select(model._row_languages(lang_ids))).out_features
    out = torch.full((num_frames, width), IMPOSSIBLE_LOG_PROB)
    out[:, model.config.pad_token_id] = 0.0
    return out


@torch.no_grad()
def paused_ctc_log_probs(
    model: Any,
    inputs: ModelInput,
    waveform: np.ndarray,
    chunk_length_s: float = DEFAULT_CHUNK_LENGTH_S,
    stride_length_s: float = DEFAULT_STRIDE_LENGTH_S,
    batch_size: int = 4,
    lang_ids: torch.Tensor | None = None,
    word_delimiter_id: int | None = None,
    min_pause_s: float = DEFAULT_MIN_PAUSE_S,
    speech_pad_s: float = DEFAULT_SPEECH_PAD_S,
    pause_db: float = DEFAULT_PAUSE_DB,
) -> tuple[torch.Tensor, list[tuple[int, int]]]:
    """CTC log-probabilities ``[T, V]`` of one recording, decoded one speech region at a time
    (:mod:`~adaptspeech.inference.pauses`).

    A recording no longer than ``chunk_length_s`` is one encoder call, exactly as :func:`chunked_ctc_log_probs`
    (and unchunked) decoding; so is one without a pause. In a longer one each speech region is a recording of its own:

    - its input units are the region's frames ``[a u, b u)`` less the units at either end that touch digital silence
      (a frame whose window reads a run of exact zeros: ``prepare``'s utterances hold none, and the model reads them
      as nothing it was trained on);
    - normalised over the region's own audio (:meth:`RecordingInput.utterance`, as ``prepare`` normalises an
      utterance), one encoder call when it is no longer than ``chunk_length_s``, else chunked with ``stride_length_s``
      inside it;
    - its log-probabilities fill frames ``floor(start / u) ..`` of the recording's grid (a region starting inside
      an output frame is read from that frame on).

    Frames outside every region are blank (log-probability 0; every other label ``IMPOSSIBLE_LOG_PROB``), and the
    middle frame of each pause between two regions emits ``word_delimiter_id`` (where the tokenizer has one): a pause
    ends a word, as the utterances' texts would be joined with a space. Times, LM decoding and timestamps read the
    recording's one frame grid. A recording where no region is left (digital silence, a click shorter than
    ``MIN_SPEECH_S``) is blank throughout, with no region.

    Args:
        model: an adaptspeech model with a CTC head.
        inputs: the recording's model input (see :func:`chunked_ctc_log_probs`).
        waveform: ``[S]`` the recording at 16 kHz (its frame energies find the pauses).
        chunk_length_s, stride_length_s, batch_size, lang_ids: as :func:`chunked_ctc_log_probs`.
        word_delimiter_id: the tokenizer's word delimiter (``|``), or ``None``: pauses stay blank.
        min_pause_s: shortest pause that separates two regions, in seconds.
        speech_pad_s: seconds of pause kept on each side of a region.
        pause_db: decibels below the speech level under which a frame is a pause frame.

    Returns:
        ``([T, V] log-probabilities, regions [(first_frame, end_frame), ...])``: the frames each encoder call filled.
    """
    if getattr(model, "ctc_head", None) is None:
        raise ValueError("paused_ctc_log_probs needs a model with a CTC head")
    per_frame = input_units_per_frame(model)
    seconds_per_frame = inputs_to_logits_ratio(model) / MODEL_SAMPLING_RATE
    num_frames = int(model._get_feat_extract_output_lengths(len(inputs)))  # the unchunked model's frames
    if num_frames * seconds_per_frame <= chunk_length_s + 1e-9:
        log_probs = chunked_ctc_log_probs(model, inputs, chunk_length_s, stride_length_s, batch_size, lang_ids)
        return log_probs, [(0, len(log_probs))]
    spans, boundaries = speech_spans(model, len(inputs), waveform, min_pause_s, speech_pad_s, pause_db)
    if not spans:  # every region was digital silence or shorter than MIN_SPEECH_S: nothing to decode
        return _blank(num_frames, model, lang_ids), []
    if spans == [(0, len(inputs))]:  # no pause: the stride rule over the whole recording
        log_probs = chunked_ctc_log_probs(model, inputs, chunk_length_s, stride_length_s, batch_size, lang_ids)
        return log_probs, [(0, len(log_probs))]
    out: torch.Tensor | None = None
    filled: list[tuple[int, int]] = []
    for start, end in spans:
        if (end - start) / per_frame * seconds_per_frame <= chunk_length_s + 1e-9:
            piece = utterance_input(inputs, start, end)
        else:
            piece = slice_input(inputs, start, end)
        part = chunked_ctc_log_probs(model, piece, chunk_length_s, stride_length_s, batch_size, lang_ids)
        if out is None:
            out = torch.full((num_frames, part.shape[-1]), IMPOSSIBLE_LOG_PROB)
            out[:, model.config.pad_token_id] = 0.0
        first = start // per_frame
        part = part[: num_frames - first]
        out[first : first + len(part)] = part
        filled.append((first, first + len(part)))
    assert out is not None
    if word_delimiter_id is not None:
        for frame in boundaries:
            out[frame] = IMPOSSIBLE_LOG_PROB
            out[frame, word_delimiter_id] = 0.0
    return out, filled
