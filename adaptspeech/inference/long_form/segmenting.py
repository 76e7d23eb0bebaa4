"""Stage 2 of inference: a recording's speech regions -> segments, each decoded on its own.

Everything lies on the model's output-frame grid (:class:`~adaptspeech.inference.long_form.recording.FrameGrid`: ``u``
input units per output frame), and the features of the whole recording are computed once and read per segment, so
segment ``[a, b)`` of output frames is input units ``[a u, b u)`` (the last segment runs to the end of the input). A
:class:`Segment` says how its input is read (:class:`SegmentInput`, stage 3): as a recording of its own (its encoder
calls normalised over their own audio), as one encoder call normalised by the sliding-window rule, or as one
utterance (:mod:`~adaptspeech.inference.long_form.local_norm`).

**CTC decoders** read the log-probabilities of a whole recording on one frame grid (stage 4 stitches them), so their
segments are the speech regions themselves (:func:`~adaptspeech.runtime.long_form.plan_ctc_segments`, numpy, shared
with the ONNX runtime): a recording that fits one encoder call (its
unchunked output frames span at most ``chunk_length_s``), or is split in chunks, or has no pause, is one segment read
as a recording (chunked with strides when longer than ``chunk_length_s``); otherwise each speech region is one
segment, read as one utterance when it spans at most ``chunk_length_s``, else as a recording of its own.

**Attention and joint decoders** emit a label sequence per encoder call: chunks cannot overlap and be stitched frame
by frame, so a long recording is cut into consecutive segments (:func:`plan_segments`), each decoded alone, and the
texts are joined.

- A recording of at most ``M = floor(chunk_length_s / frame seconds)`` output frames is one segment: the whole input,
  decoded exactly as without segmentation.
- Otherwise, from the current start ``a``, the next cut ``c`` is chosen in the search zone ``[max(a + 1, a + M - Z),
  a + M]`` (``Z``: ``search_length_s`` in frames), so every segment holds at most ``M`` frames (the encoder never sees
  more than the chunk length) and at least ``M - Z``. The cut is the frame of lowest *cut cost* in the zone after a
  moving average over ``smoothing_s`` (so that a pause wins over one quiet frame inside a word); among equal lowest
  values (digital silence) the middle of their first run is taken. The next segment starts at ``c``.
- Cut costs: ``"energy"`` (default, any model): the log power, in dB, of the waveform samples of each output frame
  (:func:`~adaptspeech.runtime.pauses.energy_cost`); ``"ctc_blank"`` (models with a CTC head): ``-log P(blank)``
  per frame from a chunked CTC pass over the recording (:func:`blank_cost`), so cuts fall where CTC emits nothing.
- Segments do not overlap; their texts are joined with one space. Where the zone holds no pause, the cut falls at
  the quietest frame and can split a word.
- **At pauses** (``split_by="pauses"``): the recording's speech regions (stage 1) come first; a region of at most
  ``M`` frames is one segment, read as one utterance, and a longer one is cut inside by the rule above. Pauses
  between regions are not decoded.
"""

from __future__ import annotations

import itertools
from typing import TYPE_CHECKING

import numpy as np

from ...runtime.long_form import (
    DEFAULT_SMOOTHING_S,
    EPS_S,
    Segment,
    SegmentInput,
    SpeechRegions,
    fits_ctc_call,
    plan_ctc_segments,
    plan_cuts,
    whole_recording,
)
from .. import DEFAULT_SEARCH_LENGTH_S
from .recording import FrameGrid

if TYPE_CHECKING:
    import torch

__all__ = ["DEFAULT_SMOOTHING_S", "Segment", "SegmentInput", "blank_cost", "fits_ctc_call", "fits_segment",
           "max_segment_frames", "plan_ctc_segments", "plan_cuts", "plan_segments", "whole_recording"]

# ---- attention and joint decoders ----------------------------------------------------------------------------------


def max_segment_frames(grid: FrameGrid, chunk_length_s: float) -> int:
    """``M``: the most output frames of an attention segment, ``floor(chunk_length_s / frame seconds)``.

    Raises:
        ValueError: ``chunk_length_s`` is shorter than one output frame.
    """
    max_frames = int(chunk_length_s / grid.seconds_per_frame + EPS_S)
    if max_frames < 1:
        raise ValueError(f"chunk_length_s {chunk_length_s:g} is shorter than one output frame "
                         f"({grid.seconds_per_frame} s)")
    return max_frames


def fits_segment(grid: FrameGrid, num_units: int, chunk_length_s: float) -> bool:
    """A recording of at most ``M`` output frames: one attention segment."""
    return grid.frames_of(num_units) <= max_segment_frames(grid, chunk_length_s)


def blank_cost(log_probs: torch.Tensor, blank_id: int, num_frames: int) -> np.ndarray:
    """``[num_frames]`` ``-log P(blank)`` from CTC log-probabilities ``[T, V]`` (the last frame repeated, or frames
    dropped, where the model's frame count differs from the input grid's)."""
    cost = -log_probs[:, blank_id].double().numpy()
    if len(cost) >= num_frames:
        return cost[:num_frames]
    return np.pad(cost, (0, num_frames - len(cost)), mode="edge")


def plan_segments(
    grid: FrameGrid,
    num_units: int,
    chunk_length_s: float,
    cost: np.ndarray | None = None,
    regions: SpeechRegions | None = None,
    search_length_s: float = DEFAULT_SEARCH_LENGTH_S,
    smoothing_s: float = DEFAULT_SMOOTHING_S,
) -> list[Segment]:
    """The segments of a recording for an attention or joint decoder (see the module docstring).

    Args:
        grid: the model's frame grid.
        num_units: length of the recording's model input.
        chunk_length_s: the longest segment, in seconds (rounded down to whole output frames).
        cost: ``[T]`` cut cost per output frame of the recording (``T = ceil(num_units / u)``); not needed when the
            recording is one segment (:func:`fits_segment`).
        regions: the speech regions (``split_by="pauses"``), or ``None``: the segments tile the recording.
        search_length_s: seconds before a segment's longest end searched for the cut.
        smoothing_s: width of the moving average over the cut cost.

    Returns:
        The segments in order: ``[]`` when ``regions`` holds none (digital silence, clicks): nothing to decode.
    """
    if search_length_s <= 0:
        raise ValueError(f"search_length_s must be positive, got {search_length_s}")
    max_frames = max_segment_frames(grid, chunk_length_s)
    per_frame, num_frames = grid.units_per_frame, grid.frames_of(num_units)
    if num_frames <= max_frames:
        return [whole_recording(grid.geometry, num_units, SegmentInput.WINDOW)]
    if cost is None:
        raise ValueError(f"a recording of {num_frames} output frames is longer than one segment: it needs a cut cost")
    search_frames = min(max_frames, max(1, round(search_length_s / grid.seconds_per_frame)))
    smoothing_frames = max(1, round(smoothing_s / grid.seconds_per_frame))
    if regions is None:
        bounds = [0, *plan_cuts(cost, max_frames, search_frames, smoothing_frames), num_frames]
        return [Segment(a * per_frame, min(b * per_frame, num_units), a, b) for a, b in itertools.pairwise(bounds)]
    segments = []
    for start, end in regions.spans:
        first, last = start // per_frame, -(-end // per_frame)
        if last - first <= max_frames:
            segments.append(Segment(start, end, first, last, SegmentInput.UTTERANCE))
            continue
        cuts = [first + c for c in plan_cuts(cost[first:last], max_frames, search_frames, smoothing_frames)]
        units = [start, *[c * per_frame for c in cuts], end]
        frames = [first, *cuts, last]
        segments += [Segment(units[i], units[i + 1], frames[i], frames[i + 1]) for i in range(len(cuts) + 1)]
    return segments
