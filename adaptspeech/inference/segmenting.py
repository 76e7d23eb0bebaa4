"""Attention and joint decoding of long recordings: cut into segments no longer than the chunk length, at pauses.

An attention (LAS) decoder reads the whole encoder output and emits a label sequence, so chunks cannot overlap and be
stitched frame by frame as CTC log-probabilities are (:mod:`adaptspeech.inference.long_form`): two label sequences
decoded from overlapping audio have no frame alignment to cut them at. Long recordings are instead cut into
consecutive segments, each decoded on its own with the model's attention or joint beam search, and the texts joined.

**Segmentation rule.** Everything lies on the model's output-frame grid (``inputs_to_logits_ratio`` samples per
frame: 640 for the fbank front end, 320 for wav2vec2), and the features of the whole recording are computed once
and sliced, so segment ``[a, b)`` of output frames is input units ``[a u, b u)`` (``u`` input units per frame; the
last segment runs to the end of the input). Each segment's input is normalised over the segment's own audio, as a
CTC chunk's is (:mod:`~adaptspeech.inference.local_norm`).

- A recording of at most ``M = floor(chunk_length_s / frame seconds)`` output frames is one segment: the whole input,
  decoded exactly as without segmentation.
- Otherwise, from the current start ``a``, the next cut ``c`` is chosen in the search zone ``[max(a + 1, a + M - Z),
  a + M]`` (``Z``: ``search_length_s`` in frames), so every segment holds at most ``M`` frames (the encoder never sees
  more than the chunk length) and at least ``M - Z``. The cut is the frame of lowest *cut cost* in the zone after a
  moving average over ``smoothing_s`` (so that a pause wins over one quiet frame inside a word); among equal lowest
  values (digital silence) the middle of their first run is taken. The next segment starts at ``c``.
- Cut costs: ``"energy"`` (default, any model): the log power, in dB, of the waveform samples of each output frame;
  ``"ctc_blank"`` (models with a CTC head): ``-log P(blank)`` per frame from the chunked CTC pass (one extra encoder
  pass over the recording, in bounded memory), so cuts fall where CTC emits nothing.
- Segments do not overlap; their texts are joined with one space. Where the zone holds no pause, the cut falls at
  the quietest frame and can split a word.

**At pauses** (``split_by="pauses"``, the default of ``transcribe``): the recording's speech regions come first, as
CTC decoding finds them (:func:`~adaptspeech.inference.long_form.speech_spans`: cut at every pause of at least
``min_pause_s``, digital silence at their ends left out); a region of at most ``M`` frames is one segment, normalised
as one utterance, and a longer one is cut inside by the rule above. Pauses between regions are not decoded.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from ..decoding import transcribe_batch
from . import CUT_COSTS, DEFAULT_SEARCH_LENGTH_S, DEFAULT_STRIDE_LENGTH_S, LONG_FORM_SPLITS
from .local_norm import ModelInput, input_span
from .long_form import chunked_ctc_log_probs, input_units_per_frame, speech_spans, utterance_input
from .model_mixin import MODEL_SAMPLING_RATE, inputs_to_logits_ratio
from .pauses import DEFAULT_MIN_PAUSE_S, DEFAULT_SPEECH_PAD_S, energy_cost

DEFAULT_SMOOTHING_S = 0.2
"""Width of the moving average over the cut cost."""


@dataclass(frozen=True)
class Segment:
    """One decoder call: model input units ``[start, end)``, output frames ``[first_frame, last_frame)``;
    ``utterance``: a whole speech region, normalised as one utterance (else by the sliding-window rule)."""

    start: int
    end: int
    first_frame: int
    last_frame: int
    utterance: bool = False


def plan_cuts(cost: np.ndarray, max_frames: int, search_frames: int, smoothing_frames: int = 1) -> list[int]:
    """Frames where segments start after the first (see the module docstring's rule), ``[]`` for one segment.

    Args:
        cost: ``[T]`` cut cost per output frame (lower: better place to cut).
        max_frames: most output frames per segment (``M``).
        search_frames: width of the search zone before a segment's longest end (``Z``).
        smoothing_frames: width of the moving average applied to ``cost``.
    """
    if max_frames < 1 or search_frames < 1 or smoothing_frames < 1:
        raise ValueError(f"segment of {max_frames} frames, search zone of {search_frames} frames and smoothing of "
                         f"{smoothing_frames} frames: each must be at least one frame")
    total = len(cost)
    smoothed = _moving_average(np.asarray(cost, dtype=np.float64), smoothing_frames)
    cuts: list[int] = []
    start = 0
    while total - start > max_frames:
        high = start + max_frames
        low = max(start + 1, high - search_frames)
        zone = smoothed[low : high + 1]
        best = int(np.argmin(zone))
        run = best
        while run + 1 < len(zone) and zone[run + 1] == zone[best]:
            run += 1
        start = low + (best + run) // 2
        cuts.append(start)
    return cuts


def _moving_average(values: np.ndarray, width: int) -> np.ndarray:
    """``[T]`` centred moving average of ``width`` frames, edges padded with the end values."""
    if width == 1 or len(values) == 0:
        return values
    padded = np.pad(values, (width // 2, width - 1 - width // 2), mode="edge")
    return np.convolve(padded, np.ones(width) / width, mode="valid")


def blank_cost(log_probs: torch.Tensor, blank_id: int, num_frames: int) -> np.ndarray:
    """``[num_frames]`` ``-log P(blank)`` from CTC log-probabilities ``[T, V]`` (the last frame repeated, or frames
    dropped, where the model's frame count differs from the input grid's)."""
    cost = -log_probs[:, blank_id].double().numpy()
    if len(cost) >= num_frames:
        return cost[:num_frames]
    return np.pad(cost, (0, num_frames - len(cost)), mode="edge")


def plan_segments(
    model: Any,
    inputs: ModelInput,
    waveform: np.ndarray,
    chunk_length_s: float,
    cut_by: str = "energy",
    search_length_s: float = DEFAULT_SEARCH_LENGTH_S,
    smoothing_s: float = DEFAULT_SMOOTHING_S,
    lang_ids: torch.Tensor | None = None,
    split_by: str = "chunks",
    min_pause_s: float = DEFAULT_MIN_PAUSE_S,
    speech_pad_s: float = DEFAULT_SPEECH_PAD_S,
) -> list[Segment]:
    """The segments of one recording (see the module docstring).

    Args:
        model: an adaptspeech model (with a CTC head for ``cut_by="ctc_blank"``).
        inputs: the recording's model input, a :class:`~adaptspeech.inference.local_norm.RecordingInput` or a
            normalised tensor ``[S]`` samples or ``[T_fbank, n_mels]`` (read for its length, and by the CTC pass).
        waveform: ``[S]`` the recording at 16 kHz (read for ``cut_by="energy"``).
        chunk_length_s: the longest segment, in seconds (rounded down to whole output frames).
        cut_by: ``"energy"`` or ``"ctc_blank"``.
        search_length_s: seconds before a segment's longest end searched for the cut.
        smoothing_s: width of the moving average over the cut cost.
        lang_ids: ``[1]`` language index, for the CTC pass of ``"ctc_blank"`` (models routing several languages).
        split_by: ``"chunks"`` (segments tile the recording) or ``"pauses"`` (speech regions first, see the module
            docstring; a recording longer than ``chunk_length_s`` with no speech region gets no segment).
        min_pause_s, speech_pad_s: the pause rule's settings (``split_by="pauses"``).
    """
    if split_by not in LONG_FORM_SPLITS:
        raise ValueError(f"split_by {split_by!r}; allowed values: {', '.join(LONG_FORM_SPLITS)}")
    if cut_by not in CUT_COSTS:
        raise ValueError(f"cut_by {cut_by!r}; allowed values: {', '.join(CUT_COSTS)}")
    if search_length_s <= 0:
        raise ValueError(f"search_length_s must be positive, got {search_length_s}")
    ratio = inputs_to_logits_ratio(model)
    per_frame = input_units_per_frame(model)
    seconds_per_frame = ratio / MODEL_SAMPLING_RATE
    max_frames = int(chunk_length_s / seconds_per_frame + 1e-9)
    if max_frames < 1:
        raise ValueError(f"chunk_length_s {chunk_length_s:g} is shorter than one output frame ({seconds_per_frame} s)")
    num_units = len(inputs)
    num_frames = -(-num_units // per_frame)
    if num_frames <= max_frames:
        return [Segment(0, num_units, 0, num_frames)]
    if cut_by == "ctc_blank":
        if getattr(model, "ctc_head", None) is None:
            raise ValueError(f"cut_by='ctc_blank' needs a CTC head; head {model.config.head!r} has none: use 'energy'")
        stride_s = min(DEFAULT_STRIDE_LENGTH_S, chunk_length_s / 4)
        log_probs = chunked_ctc_log_probs(model, inputs, chunk_length_s, stride_s, lang_ids=lang_ids)
        cost = blank_cost(log_probs, model.config.pad_token_id, num_frames)
    else:
        cost = energy_cost(waveform, ratio, num_frames)
    search_frames = min(max_frames, max(1, round(search_length_s / seconds_per_frame)))
    smoothing_frames = max(1, round(smoothing_s / seconds_per_frame))
    if split_by == "chunks":
        bounds = [0, *plan_cuts(cost, max_frames, search_frames, smoothing_frames), num_frames]
        return [Segment(a * per_frame, min(b * per_frame, num_units), a, b) for a, b in itertools.pairwise(bounds)]
    spans, _ = speech_spans(model, num_units, waveform, min_pause_s, speech_pad_s)
    segments = []
    for start, end in spans:
        first, last = start // per_frame, -(-end // per_frame)
        if last - first <= max_frames:
            segments.append(Segment(start, end, first, last, utterance=True))
            continue
        cuts = [first + c for c in plan_cuts(cost[first:last], max_frames, search_frames, smoothing_frames)]
        units = [start, *[c * per_frame for c in cuts], end]
        frames = [first, *cuts, last]
        segments += [Segment(units[i], units[i + 1], frames[i], frames[i + 1]) for i in range(len(cuts) + 1)]
    return segments  # none when no region holds speech (digital silence, clicks): nothing to decode


@torch.no_grad()
def decode_segments(
    model: Any,
    inputs: ModelInput,
    segments: list[Segment],
    method: str,
    lang_ids: torch.Tensor | None = None,
    **options: Any,
) -> list[list[int]]:
    """Label ids of every segment, each decoded alone with ``method`` (one encoder call per segment).

    Args:
        model: an adaptspeech model (in eval mode).
        inputs: the recording's model input (a :class:`~adaptspeech.inference.local_norm.RecordingInput`: each
            segment normalised over its own audio; or a normalised tensor ``[S]`` or ``[T_fbank, n_mels]``, sliced).
        segments: from :func:`plan_segments`.
        method: a decoding method (``attention_beam``, ``joint`` ...).
        lang_ids: ``[1]`` language index (models routing several languages).
        **options: the decoder's options (``beam_size``, ``ctc_weight`` ...).
    """
    ids = []
    for segment in segments:
        span = (utterance_input if segment.utterance else input_span)(inputs, segment.start, segment.end)
        batch = {model.main_input_name: span[None].to(model.device)}
        if lang_ids is not None:
            batch["lang_ids"] = lang_ids.to(model.device)
        ids.append(transcribe_batch(model, batch, method, **options)[0])
    return ids
