"""Stage 4 of inference, the encoder: segments' model inputs -> CTC log-probabilities on the recording's frame grid
(CTC decoders), or the encoder output of one segment (attention and joint decoders).

A 10-minute recording is 15,000 encoder frames at 25 Hz; full self-attention over them needs T x T scores per head
and layer (7.3 GB measured for a 49k-parameter model). So the encoder runs on overlapping chunks of
``chunk_length_s`` seconds, each with ``stride_length_s`` seconds of context on both sides (transformers' pipeline
stride approach), and the CTC log-probabilities of the chunks are stitched (:func:`chunked_ctc_log_probs`); each
chunk's input (strides included) is normalised over its own audio (stage 3): a segment that is one chunk is
normalised exactly as ``prepare`` normalises an utterance. The segments' log-probabilities then fill the recording's
one frame grid (:func:`stitch_ctc`), which the CTC decoders, the n-gram LM and timestamps read.

**Stitching rule.** Chunk boundaries lie on the model's output-frame grid: a chunk starts at a multiple of the input
span of one output frame (4 fbank frames = 640 samples for the fbank front end, 320 samples for wav2vec2), so output
frame ``i`` of a chunk starting at output frame ``s`` is frame ``s + i`` of the recording. Each chunk keeps its frames
from ``stride`` (0 for the first chunk) to ``n - stride`` (``n`` for the last) and consecutive chunks advance by
``chunk - 2 stride`` frames, so the kept frames tile the recording exactly once. A kept frame therefore equals the
unchunked model's frame whenever the encoder's receptive field around it fits inside its chunk; with full attention
it is an approximation (each frame sees at least ``stride_length_s`` of context on each side instead of the whole
recording).

**The recording's grid.** A segment that is the whole recording gives the grid itself. Otherwise segment ``[start,
end)`` fills frames ``floor(start / u) ..`` of the grid (``u`` input units per output frame; the unchunked model's
number of frames); frames outside every segment are blank (log-probability 0; every other label
:data:`IMPOSSIBLE_LOG_PROB`), and the middle frame of each pause between two speech regions emits the word delimiter
(a pause ends a word, as the utterances' texts would be joined with a space).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import torch

from ..decoding import DecodingInputs, evaluating, model_decoding_inputs
from ..runtime.long_form import IMPOSSIBLE_LOG_PROB, Chunk, blank_grid, plan_chunks, stitch_log_probs
from . import DEFAULT_CHUNK_LENGTH_S, DEFAULT_STRIDE_LENGTH_S
from .long_form.local_norm import ModelInput, input_span
from .long_form.recording import FrameGrid
from .long_form.segmenting import Segment, SegmentInput
from .model_mixin import MODEL_SAMPLING_RATE

__all__ = ["IMPOSSIBLE_LOG_PROB", "Chunk", "blank_log_probs", "chunked_ctc_log_probs", "encode_segment", "plan_chunks",
           "stitch_ctc"]


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
    """CTC log-probabilities ``[T, V]`` (float32, on the CPU) of one recording's (or segment's) model input, chunk
    by chunk.

    Args:
        model: an adaptspeech model with a CTC head.
        inputs: the model input: a :class:`~adaptspeech.inference.long_form.local_norm.RecordingInput` (each chunk,
            strides included, normalised over its own audio), or a tensor ``[S]`` samples or ``[T_fbank, n_mels]``
            already normalised (sliced as it is, e.g. :func:`~adaptspeech.inference.long_form.local_norm.model_input`).
        chunk_length_s: seconds of audio per encoder call (rounded to whole output frames); an input no longer
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
    grid = FrameGrid.of(model)
    chunk_frames = max(1, round(chunk_length_s * MODEL_SAMPLING_RATE / grid.samples_per_frame))
    stride_frames = round(stride_length_s * MODEL_SAMPLING_RATE / grid.samples_per_frame)
    chunks = plan_chunks(len(inputs), grid.units_per_frame, chunk_frames, stride_frames)
    pieces: list[torch.Tensor] = []
    device = model.device
    with evaluating(model):
        for batch in _batches(chunks, batch_size):
            x = torch.stack([input_span(inputs, c.start, c.end) for c in batch]).to(device)
            ids = None if lang_ids is None else lang_ids.to(device).expand(len(batch))
            log_probs = model_decoding_inputs(model, x, None, ids).ctc_log_probs.cpu()
            pieces.extend(row[c.keep_from : c.keep_to] for c, row in zip(batch, log_probs, strict=True))
    return torch.cat(pieces)


def blank_log_probs(model: Any, num_frames: int, lang_ids: torch.Tensor | None = None) -> torch.Tensor:
    """``[num_frames, V]`` log-probabilities of frames outside speech: blank 0, every other label impossible; ``V`` is
    the output size of the CTC head ``lang_ids`` selects (a language head may have a vocabulary of its own)."""
    head = model.ctc_head
    width = head.output_layer(head.select(model.row_languages(lang_ids))).out_features
    return torch.from_numpy(blank_grid(num_frames, width, model.config.pad_token_id))


def stitch_ctc(
    model: Any,
    num_units: int,
    segments: list[Segment],
    pieces: list[torch.Tensor],
    boundaries: list[int] = (),  # type: ignore[assignment]
    word_delimiter_id: int | None = None,
    lang_ids: torch.Tensor | None = None,
) -> tuple[torch.Tensor, list[tuple[int, int]]]:
    """The recording's CTC log-probabilities ``[T, V]`` from its segments' (see the module docstring).

    Args:
        model: the adaptspeech model (its front end's output length, its blank id, its CTC head's width).
        num_units: length of the recording's model input.
        segments: the segments (stage 2), in order.
        pieces: ``[T_i, V]`` log-probabilities of each segment (:func:`chunked_ctc_log_probs`).
        boundaries: output frames of word boundaries (the middle of each pause between two regions).
        word_delimiter_id: the tokenizer's word delimiter (``|``), or ``None``: pauses stay blank.
        lang_ids: ``[1]`` the recording's language index (picks the CTC head whose width a blank grid has).

    Returns:
        ``([T, V] log-probabilities, [(first_frame, end_frame), ...])``: the frames each segment filled.
    """
    if len(segments) == 1 and segments[0].read_as is SegmentInput.RECORDING and (
            segments[0].start, segments[0].end) == (0, num_units):
        return pieces[0], [(0, len(pieces[0]))]
    num_frames = FrameGrid.of(model).output_frames(num_units)  # the unchunked model's frames
    if not segments:  # no speech region (digital silence, clicks shorter than MIN_SPEECH_S): nothing to decode
        return blank_log_probs(model, num_frames, lang_ids), []
    out, filled = stitch_log_probs(num_frames, model.config.pad_token_id, [s.first_frame for s in segments],
                                   [part.numpy() for part in pieces], boundaries, word_delimiter_id)
    return torch.from_numpy(out), filled


@torch.no_grad()
def encode_segment(model: Any, inputs: torch.Tensor, lang_ids: torch.Tensor | None = None) -> DecodingInputs:
    """The encoder output of one segment's model input ``[S]`` or ``[T, n_mels]``, as every decoder reads it.

    Args:
        model: an adaptspeech model (in eval mode).
        inputs: the segment's normalised model input (stage 3).
        lang_ids: ``[1]`` language index (models routing several languages).
    """
    device = model.device
    return model_decoding_inputs(model, inputs[None].to(device), None,
                                 None if lang_ids is None else lang_ids.to(device))
