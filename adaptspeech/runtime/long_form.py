"""A long recording on a model's output-frame grid, in numpy: its speech regions cut at pauses, the chunks of one
encoder call each, and the CTC log-probabilities of its pieces stitched on one grid.

The PyTorch path (:mod:`adaptspeech.inference`: stages 1, 2 and 4) and the ONNX runtime
(:class:`~adaptspeech.runtime.recognizer.OnnxRecognizer`) both call these functions, so a recording is split the same
way with or without PyTorch. The rules are those of :mod:`adaptspeech.runtime.pauses` (which pause ends an
utterance), :mod:`adaptspeech.inference.long_form.regions` (a region on the input units),
:mod:`adaptspeech.inference.encoding` (chunks and the stitched grid) and
:meth:`adaptspeech.inference.long_form.local_norm.RecordingInput.utterance` (an fbank utterance re-read from its own
samples next to digital silence).

A model's geometry is a :class:`FrameGeometry`: input units (samples, or 25-ms fbank frames every 10 ms), input units
per output frame, and the front end's output length.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from .audio import digital_silence
from .pauses import MIN_SPEECH_S, energy_cost, speech_regions

DEFAULT_CHUNK_LENGTH_S = 30.0
"""Seconds of audio per encoder call when a recording is transcribed chunk by chunk."""
DEFAULT_STRIDE_LENGTH_S = 5.0
"""Seconds of context on each side of a chunk's kept frames."""
LONG_FORM_SPLITS = ("pauses", "chunks")
"""How a recording longer than the chunk length is split: at pauses (speech regions, each decoded as an utterance), or
in chunks (CTC: overlapping chunks stitched frame by frame; attention / joint: consecutive segments of at most the
chunk length)."""
DEFAULT_SMOOTHING_S = 0.2
"""Width of the moving average over the cut cost (:func:`plan_cuts`)."""

EPS_S = 1e-9
"""Seconds of slack when a length is compared with the chunk length (float rounding)."""
IMPOSSIBLE_LOG_PROB = -1e4
"""Log-probability of the labels a frame outside speech cannot emit (finite, so that beam searches stay finite)."""


@dataclass(frozen=True)
class FrameGeometry:
    """A model's input units and output frames, without the model.

    Attributes:
        samples_per_frame: input samples per output frame (640 for the fbank front end, 320 for wav2vec2).
        unit_hop: samples from one input unit to the next (1 for waveforms, 160 for fbank frames).
        unit_window: samples one input unit reads (1, or 400).
        output_frames: the front end's number of output frames for a number of input units.
        sampling_rate: samples per second.
    """

    samples_per_frame: int
    unit_hop: int
    unit_window: int
    output_frames: Callable[[int], int]
    sampling_rate: int = 16000

    @property
    def units_per_frame(self) -> int:
        return self.samples_per_frame // self.unit_hop

    @property
    def seconds_per_frame(self) -> float:
        return self.samples_per_frame / self.sampling_rate

    @property
    def seconds_per_unit(self) -> float:
        return self.unit_hop / self.sampling_rate

    def frames_of(self, num_units: int) -> int:
        """Output frames on the grid that ``num_units`` input units touch: ``ceil(num_units / units_per_frame)``."""
        return -(-num_units // self.units_per_frame)


@dataclass(frozen=True)
class SpeechRegions:
    """Where a recording holds speech.

    Attributes:
        spans: ``[(start_unit, end_unit), ...]`` model input units of each region, in order.
        boundaries: ``[output frame, ...]``: the middle frame of every pause between two regions (a word boundary).
    """

    spans: list[tuple[int, int]]
    boundaries: list[int]


UNITS_PIECE = 6000
"""Input units :func:`units_touching` counts at once (a minute of 10-ms units; an hour's int64 running count of the
marked samples at once took 460 MB)."""


def units_touching(marked: np.ndarray, num_units: int, unit_hop: int, unit_window: int,
                   piece_units: int = UNITS_PIECE) -> np.ndarray:
    """``[num_units]`` bool: input units (``unit_window`` samples every ``unit_hop``) whose samples hold any sample
    ``marked`` ``[S]`` (units past the end read none); ``piece_units`` units at a time (the same answer)."""
    touching = np.zeros(num_units, dtype=bool)
    piece_units = max(1, piece_units)
    for first in range(0, num_units, piece_units):
        low = min(first * unit_hop, len(marked))
        if low == len(marked):
            break  # the units from here on read no sample
        units = min(piece_units, num_units - first)
        high = min((first + units - 1) * unit_hop + unit_window, len(marked))
        counts = np.concatenate([[0], np.cumsum(marked[low:high], dtype=np.int64)])
        starts = np.minimum(np.arange(first, first + units) * unit_hop, len(marked)) - low
        touching[first : first + units] = counts[np.minimum(starts + unit_window, high - low)] - counts[starts] > 0
    return touching


def check_pause_settings(min_pause_s: float, speech_pad_s: float) -> None:
    """Refuse a pause that is not positive or a pad that is negative (``ValueError`` naming both)."""
    if min_pause_s <= 0 or speech_pad_s < 0:
        raise ValueError(f"min_pause_s must be positive and speech_pad_s not negative, got {min_pause_s} and "
                         f"{speech_pad_s}")


def check_chunk_settings(chunk_length_s: float, stride_length_s: float) -> None:
    """Refuse CTC chunks not longer than their two strides, or a negative stride (``ValueError`` naming both): the
    rule of the ONNX runtime and the PyTorch path."""
    if not chunk_length_s > 2 * stride_length_s >= 0:
        raise ValueError(f"chunk_length_s {chunk_length_s:g} must be longer than twice stride_length_s "
                         f"{stride_length_s:g}")


def speech_spans(geometry: FrameGeometry, num_units: int, waveform: np.ndarray, min_pause_s: float,
                 speech_pad_s: float, pause_db: float) -> SpeechRegions:
    """The speech regions of a recording on its input units (the rule of
    :mod:`adaptspeech.inference.long_form.regions`).

    Args:
        geometry: the model's frame geometry.
        num_units: length of the recording's model input.
        waveform: ``[S]`` the recording.
        min_pause_s, speech_pad_s, pause_db: the pause rule's settings (:mod:`adaptspeech.runtime.pauses`).

    Returns:
        The regions in order, and the middle frame of every pause between two regions.
    """
    seconds_per_frame = geometry.seconds_per_frame
    num_frames = geometry.frames_of(num_units)
    regions, boundaries = speech_regions(energy_cost(waveform, geometry.samples_per_frame, num_frames),
                                         max(1, round(min_pause_s / seconds_per_frame)),
                                         round(speech_pad_s / seconds_per_frame), pause_db)
    return region_spans(geometry, num_units, waveform, regions, boundaries)


def region_spans(geometry: FrameGeometry, num_units: int, waveform: np.ndarray, regions: Sequence[tuple[int, int]],
                 boundaries: list[int]) -> SpeechRegions:
    """Speech regions ``[(start frame, end frame), ...]`` on the output-frame grid (of any speech finder) as spans of
    input units: each trimmed to the units that read more than digital silence, and dropped when shorter than
    :data:`~adaptspeech.runtime.pauses.MIN_SPEECH_S` or than one output frame. ``boundaries``: kept as given."""
    per_frame, num_frames = geometry.units_per_frame, geometry.frames_of(num_units)
    touching = units_touching(digital_silence(np.asarray(waveform)), num_units, geometry.unit_hop,
                              geometry.unit_window)
    spans = []
    for a, b in regions:
        low, high = a * per_frame, num_units if b == num_frames else min(b * per_frame, num_units)
        sound = np.flatnonzero(~touching[low:high])
        if len(sound) == 0:
            continue
        start, end = low + int(sound[0]), low + int(sound[-1]) + 1
        long_enough = (end - start) * geometry.seconds_per_unit >= MIN_SPEECH_S
        if long_enough and geometry.output_frames(end - start) > 0:
            spans.append((start, end))
    return SpeechRegions(spans, boundaries)


def utterance_samples(start: int, end: int, waveform_silent: np.ndarray, unit_hop: int,
                      unit_window: int) -> tuple[int, int] | None:
    """``(first, end)`` samples of framed units ``[start, end)`` with each edge moved to the digital silence
    ``waveform_silent`` ``[S]`` within one window and hop of it (the silence's end on the left, its start on the
    right), or ``None`` when neither edge has such silence: an edge without it keeps the grid's sample."""
    win, hop = unit_window, unit_hop
    total, reach = len(waveform_silent), win + hop
    first, last = start * hop, min(total, (end - 1) * hop + win)
    low = max(0, first - reach)
    left = np.flatnonzero(waveform_silent[low : min(total, first + reach)])
    high = max(0, last - reach)
    right = np.flatnonzero(waveform_silent[high : min(total, last + reach)])
    if len(left) == 0 and len(right) == 0:
        return None
    if len(left):
        first = low + int(left[-1]) + 1
    if len(right):
        last = high + int(right[0])
    return (first, last) if last - first >= win else None


class SegmentInput(enum.Enum):
    """How a segment's model input is read from the recording's features (stage 3)."""

    RECORDING = "recording"
    """As a recording of its own: each encoder call over it (a CTC chunk) normalised over its own audio."""
    WINDOW = "window"
    """One encoder call, normalised by the sliding-window rule inside it (over all of it when it is the whole
    recording)."""
    UTTERANCE = "utterance"
    """One utterance, normalised over all of it (re-read from its own samples next to digital silence)."""


@dataclass(frozen=True)
class Segment:
    """One piece of a recording decoded on its own: model input units ``[start, end)``, output frames
    ``[first_frame, last_frame)``, read as ``read_as``."""

    start: int
    end: int
    first_frame: int
    last_frame: int
    read_as: SegmentInput = SegmentInput.WINDOW


def whole_recording(grid: FrameGeometry, num_units: int, read_as: SegmentInput) -> Segment:
    """The segment of a whole recording of ``num_units`` input units."""
    return Segment(0, num_units, 0, grid.frames_of(num_units), read_as)


# ---- CTC decoders ------------------------------------------------------------------------------------------------


def fits_ctc_call(grid: FrameGeometry, num_units: int, chunk_length_s: float) -> bool:
    """A recording of ``num_units`` whose unchunked output frames span at most ``chunk_length_s``: one encoder call."""
    return grid.output_frames(num_units) * grid.seconds_per_frame <= chunk_length_s + EPS_S


def plan_ctc_segments(grid: FrameGeometry, num_units: int, chunk_length_s: float,
                      regions: SpeechRegions | None = None) -> list[Segment]:
    """The segments of a recording for a CTC decoder (the rule of :mod:`adaptspeech.inference.long_form.segmenting`).

    Args:
        grid: the model's frame geometry.
        num_units: length of the recording's model input.
        chunk_length_s: seconds of audio per encoder call.
        regions: the recording's speech regions, or ``None`` (split in chunks): one segment, the whole recording.

    Returns:
        The segments in order: ``[]`` when the recording is longer than one call and no region holds speech
        (digital silence, clicks).
    """
    whole = regions is None or regions.spans == [(0, num_units)]
    if whole or fits_ctc_call(grid, num_units, chunk_length_s):
        return [whole_recording(grid, num_units, SegmentInput.RECORDING)]
    per_frame = grid.units_per_frame
    segments = []
    for start, end in regions.spans:
        short = (end - start) / per_frame * grid.seconds_per_frame <= chunk_length_s + EPS_S
        segments.append(Segment(start, end, start // per_frame, -(-end // per_frame),
                                SegmentInput.UTTERANCE if short else SegmentInput.RECORDING))
    return segments


# ---- cuts inside a long region (attention / joint decoders, untranscribed pools) ----------------------------------


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
    """Chunks covering ``num_units`` input units (the stitching rule of :mod:`adaptspeech.inference.encoding`).

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


def blank_grid(num_frames: int, width: int, blank_id: int) -> np.ndarray:
    """``[num_frames, width]`` float32 log-probabilities of frames outside speech: blank 0, every other label
    :data:`IMPOSSIBLE_LOG_PROB`."""
    out = np.full((num_frames, width), IMPOSSIBLE_LOG_PROB, dtype=np.float32)
    out[:, blank_id] = 0.0
    return out


def stitch_log_probs(num_frames: int, blank_id: int, first_frames: Sequence[int], pieces: Sequence[np.ndarray],
                     boundaries: Sequence[int] = (), word_delimiter_id: int | None = None
                     ) -> tuple[np.ndarray, list[tuple[int, int]]]:
    """A recording's CTC log-probabilities ``[num_frames, V]`` from its pieces' (the rule of
    :mod:`adaptspeech.inference.encoding`): piece ``i`` ``[T_i, V]`` fills the frames from ``first_frames[i]``
    (cut at the grid's end), frames outside every piece are blank, and each frame of ``boundaries`` emits the word
    delimiter (``word_delimiter_id``; None: it stays blank).

    Returns:
        ``([num_frames, V] float32, [(first_frame, end_frame), ...])``: the frames each piece filled.
    """
    out = blank_grid(num_frames, pieces[0].shape[-1], blank_id)
    filled: list[tuple[int, int]] = []
    for first, part in zip(first_frames, pieces, strict=True):
        part = part[: max(0, num_frames - first)]
        out[first : first + len(part)] = part
        filled.append((first, first + len(part)))
    if word_delimiter_id is not None:
        for frame in boundaries:
            out[frame] = IMPOSSIBLE_LOG_PROB
            out[frame, word_delimiter_id] = 0.0
    return out, filled
