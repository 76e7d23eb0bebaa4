"""Utterance-sized segments of an untranscribed recording: where a long recording is cut before a model reads it.

A recording no longer than ``max_segment_s`` is one segment. A longer one is cut at pauses with the library's
speech-region rule (:func:`~adaptspeech.runtime.long_form.speech_spans`, the pause rule of
:mod:`~adaptspeech.runtime.pauses`, as ``transcribe``'s energy finder applies it) on a grid of its own: fbank units
every 10 ms, 40-ms output frames (the fbank Conformer's), so that the segments do not depend on the model that will
label them. Each speech region is a piece; a region longer than ``max_segment_s`` is cut inside at its quietest
frames (:func:`~adaptspeech.runtime.long_form.plan_cuts` over the frame energies, as attention decoding cuts a long
recording). Neighbouring pieces are merged while the pause between them is at most ``merge_gap_s`` and the merged
segment at most ``max_segment_s`` (a sentence with short pauses stays one utterance); a segment shorter than
``min_segment_s`` is dropped.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np

from ..runtime.long_form import DEFAULT_SMOOTHING_S, FrameGeometry, plan_cuts, speech_spans
from ..runtime.pauses import DEFAULT_MIN_PAUSE_S, DEFAULT_PAUSE_DB, DEFAULT_SPEECH_PAD_S, energy_cost
from .feature_types.fbank import FbankFeatures

SEGMENT_SAMPLES_PER_FRAME = 640
"""Samples per output frame of the segmenting grid (40 ms at 16 kHz: the fbank Conformer's frames)."""
_SEARCH_S = 5.0
"""Seconds before a piece's longest end searched for a cut inside a long speech region."""


@dataclass(frozen=True)
class SegmentSettings:
    """How an untranscribed recording is cut (module docstring); checked at construction.

    Args:
        max_segment_s: the longest segment (a recording up to this long is one segment).
        min_segment_s: a segment shorter than this is dropped (a recording shorter than it is ``too_short``).
        min_pause_s: the shortest pause between two speech regions.
        merge_gap_s: neighbouring regions separated by at most this much pause are one segment (within
            ``max_segment_s``).
    """

    max_segment_s: float = 12.0
    min_segment_s: float = 0.5
    min_pause_s: float = DEFAULT_MIN_PAUSE_S
    merge_gap_s: float = 1.0

    def __post_init__(self) -> None:
        if not 0 < self.min_segment_s < self.max_segment_s:
            raise ValueError(f"segments: need 0 < min_segment_s < max_segment_s, got {self.min_segment_s} and "
                             f"{self.max_segment_s}")
        if self.min_pause_s <= 0 or self.merge_gap_s < 0:
            raise ValueError(f"segments: min_pause_s must be positive and merge_gap_s not negative, got "
                             f"{self.min_pause_s} and {self.merge_gap_s}")


def utterance_segments(waveform: np.ndarray, settings: SegmentSettings = SegmentSettings(),
                       sampling_rate: int = 16000) -> list[tuple[int, int]]:
    """The segments ``[(first_sample, end_sample), ...]`` of a recording (module docstring), in order.

    Args:
        waveform: ``[S]`` the recording.
        settings: the segment lengths and pauses.
        sampling_rate: its rate (the grid's frames are 40 ms at any rate).

    Returns:
        ``[]`` when no segment is ``min_segment_s`` long (a short recording, or only clicks between pauses).
    """
    total = len(waveform)
    longest, shortest = settings.max_segment_s * sampling_rate, settings.min_segment_s * sampling_rate
    if total <= longest:
        return [(0, total)] if total >= shortest else []
    features = FbankFeatures(sampling_rate=sampling_rate)
    samples_per_frame = round(SEGMENT_SAMPLES_PER_FRAME * sampling_rate / 16000)
    samples_per_frame -= samples_per_frame % features.unit_hop
    units_per_frame = samples_per_frame // features.unit_hop
    grid = FrameGeometry(samples_per_frame, features.unit_hop, features.unit_window,
                         lambda units: units // units_per_frame)  # no model: the whole frames the units fill
    num_units = features.num_units(total)
    regions = speech_spans(grid, num_units, waveform, settings.min_pause_s, DEFAULT_SPEECH_PAD_S, DEFAULT_PAUSE_DB)
    energy = energy_cost(waveform, samples_per_frame, grid.frames_of(num_units))
    max_frames = int(settings.max_segment_s * sampling_rate // samples_per_frame)
    search = max(1, min(max_frames, round(_SEARCH_S * sampling_rate / samples_per_frame)))
    smoothing = max(1, round(DEFAULT_SMOOTHING_S * sampling_rate / samples_per_frame))
    pieces: list[tuple[int, int]] = []
    for start_unit, end_unit in regions.spans:
        first, last = features.unit_samples(start_unit, end_unit)
        last = min(last, total)
        if last - first <= longest:
            pieces.append((first, last))
            continue
        frame0, frame1 = first // samples_per_frame, -(-last // samples_per_frame)
        cuts = [(frame0 + c) * samples_per_frame for c in plan_cuts(energy[frame0:frame1], max_frames, search,
                                                                    smoothing)]
        bounds = [first, *cuts, last]
        pieces += [(a, b) for a, b in itertools.pairwise(bounds) if b > a]
    segments: list[tuple[int, int]] = []
    gap = settings.merge_gap_s * sampling_rate
    for first, last in pieces:
        if segments and first - segments[-1][1] <= gap and last - segments[-1][0] <= longest:
            segments[-1] = (segments[-1][0], last)
        else:
            segments.append((first, last))
    return [(a, b) for a, b in segments if b - a >= shortest]
