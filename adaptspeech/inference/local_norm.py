"""Local normalisation of long recordings: each encoder call's input is normalised over nearby audio only.

``prepare`` (and so training) normalises every utterance over itself: fbank features to zero mean and unit variance
per mel bin, waveforms (``do_normalize``) to zero mean and unit variance. A long recording holds many utterances,
often several voices at different levels; one mean and variance over the whole recording fits none of them (four
mixed voices: +3.1 to +3.7 CER points over decoding the utterances one by one, see ``docs/inference.md``). Long-form
and streaming recognisers normalise locally instead (Kaldi's ``apply-cmvn-sliding --center``); so does this module.

**Rule.** An encoder call reads input units ``[a, b)`` of the recording (fbank frames or samples: a CTC chunk with its
strides, or an attention segment). If ``[a, b)`` is the whole recording, it is normalised exactly as ``prepare``
normalises an utterance. Otherwise unit ``t`` is normalised with the mean and variance over the window
``[s, s + W)``, ``s = min(max(t - W // 2, a), b - W)``: a centred window of ``W`` units (``window_s`` seconds) shifted
at the span's edges to stay inside the span (Kaldi's rule), so nothing outside the encoder call is read, and a span of
at most ``W`` units is normalised over itself: exactly the per-utterance normalisation of that span's audio. Digital
silence (:func:`digital_silence`: muted stretches, zero padding, clips joined by zeros, which per-utterance statistics
never hold) is left out of the statistics; a window holding nothing else uses all its units. Statistics are per mel
bin for fbank features, over samples for waveforms. Without ``do_normalize`` the raw input is used everywhere.
"""

from __future__ import annotations

import copy
import inspect
import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from ..data.audio import frame_params, log_mel
from ..data.features import extract_features, feature_type_of, normalize_utterance
from .model_mixin import MODEL_SAMPLING_RATE

DEFAULT_NORM_WINDOW_S = 4.0
"""Width of the sliding normalisation window, in seconds (chosen on the long-form CER check, docs/inference.md)."""
DIGITAL_SILENCE_MARGIN = 1.0
"""Nats above ``log_mel``'s floor below which every mel bin of a frame marks it as digital silence."""
_LOG_FLOOR = math.log(inspect.signature(log_mel).parameters["eps"].default)
_NORMALIZE_EPS = inspect.signature(normalize_utterance).parameters["eps"].default
_ZERO_RUN = frame_params(MODEL_SAMPLING_RATE)[0]
"""Shortest run of exact zeros (one fbank window, 25 ms) that marks waveform samples as digital silence."""


def digital_silence(raw: np.ndarray) -> np.ndarray:
    """``[N]`` bool: units of digital silence in an unnormalised model input.

    Args:
        raw: ``[T, n_mels]`` log-mel features (a frame whose every bin lies within ``DIGITAL_SILENCE_MARGIN`` of
            ``log_mel``'s floor), or ``[S]`` samples (a sample inside a run of at least 400 exact zeros, 25 ms).
    """
    if raw.ndim == 2:
        return raw.max(axis=1) <= _LOG_FLOOR + DIGITAL_SILENCE_MARGIN
    zero = np.concatenate([[False], raw == 0, [False]])
    edges = np.flatnonzero(np.diff(zero.astype(np.int8)))
    starts, ends = edges[::2], edges[1::2]  # runs of zeros [start, end)
    long = ends - starts >= _ZERO_RUN
    marks = np.zeros(len(raw) + 1, dtype=np.int64)
    np.add.at(marks, starts[long], 1)
    np.add.at(marks, ends[long], -1)
    return np.cumsum(marks[:-1]) > 0


def sliding_normalize(x: np.ndarray, window: int, silent: np.ndarray | None = None) -> np.ndarray:
    """Each unit of ``x`` normalised over its window (the module docstring's rule, with ``[a, b)`` = all of ``x``).

    Args:
        x: ``[N]`` samples or ``[N, D]`` features (statistics per column).
        window: ``W``, units per window (at least 1).
        silent: ``[N]`` units left out of the statistics (all units where a window holds only such units).

    Returns:
        float32, the shape of ``x``; ``N <= W`` gives ``normalize_utterance`` over the kept units.
    """
    if window < 1:
        raise ValueError(f"normalisation window of {window} units: must be at least 1")
    n = len(x)
    values = np.asarray(x, dtype=np.float64).reshape(n, -1)
    keep = np.ones(n, dtype=bool) if silent is None else ~np.asarray(silent, dtype=bool)
    if n <= window:  # one window: two-pass statistics, as normalize_utterance computes them
        kept = values[keep] if keep.any() else values
        mean, var = kept.mean(axis=0), kept.var(axis=0)
    else:
        start = np.clip(np.arange(n) - window // 2, 0, n - window)
        end = start + window

        def windowed(v: np.ndarray) -> np.ndarray:
            sums = np.concatenate([np.zeros((1, v.shape[1])), np.cumsum(v, axis=0)])
            return sums[end] - sums[start]

        weight = keep.astype(np.float64)[:, None]
        count = windowed(weight)
        empty = count[:, 0] == 0
        count[empty] = window
        total, squares = windowed(values * weight), windowed(values * values * weight)
        if empty.any():  # windows of digital silence only: every unit counts
            total[empty], squares[empty] = windowed(values)[empty], windowed(values * values)[empty]
        mean = total / count
        var = np.maximum(squares / count - mean * mean, 0.0)
    return ((values - mean) / np.sqrt(var + _NORMALIZE_EPS)).astype(np.float32).reshape(x.shape)


@dataclass(frozen=True)
class RecordingInput:
    """A recording's model input before normalisation, normalised per encoder call (see the module docstring).

    Attributes:
        raw: ``[S]`` samples or ``[T, n_mels]`` log-mel features, unnormalised.
        silent: ``[S]`` or ``[T]`` digital silence (:func:`digital_silence`).
        normalize: the feature extractor's ``do_normalize``.
        window: ``W``, units per normalisation window.
    """

    raw: np.ndarray
    silent: np.ndarray
    normalize: bool
    window: int
    waveform: np.ndarray | None = None
    """``[S]`` the recording's samples (fbank only): :meth:`utterance` re-reads an utterance that digital silence
    delimits from its own samples."""
    extractor: Any = None
    """The feature extractor with ``do_normalize`` off (with ``waveform``)."""
    waveform_silent: np.ndarray | None = None
    """``[S]`` digital silence of ``waveform`` (:func:`digital_silence`)."""

    def __len__(self) -> int:
        return len(self.raw)

    def span(self, start: int, end: int) -> torch.Tensor:
        """Model input of one encoder call over units ``[start, end)``: the whole recording as ``prepare``
        normalises it, any other span by :meth:`local`."""
        start, end = max(start, 0), min(end, len(self.raw))
        if not self.normalize:
            return torch.from_numpy(np.ascontiguousarray(self.raw[start:end]))
        if start == 0 and end == len(self.raw):
            return torch.from_numpy(normalize_utterance(self.raw, axis=0))
        return self.local(start, end)

    def utterance(self, start: int, end: int) -> torch.Tensor:
        """Units ``[start, end)`` normalised as one utterance: statistics over all of them (digital silence left
        out), as ``prepare`` normalises an utterance without digital silence.

        An fbank span with digital silence next to it (within one window and hop of either end: clips joined by
        zeros, muted stretches) is computed again from its own samples, from the end of that silence to the start of
        the next (:meth:`utterance_samples`): the recording's 10-ms grid would drop up to 35 ms of the utterance at
        each end and read it at another phase than ``prepare`` did (cs: 0.8 of the 1.5 CER points long-form decoding
        lost on 30 joined test utterances, docs/inference.md). The result may then differ from ``end - start`` by a
        unit or two."""
        start, end = max(start, 0), min(end, len(self.raw))
        samples = self.utterance_samples(start, end)
        if samples is not None:
            assert self.waveform is not None
            _, raw = extract_features(self.waveform[samples[0] : samples[1]], self.extractor)
            if len(raw) > 0:
                return torch.from_numpy(normalize_utterance(raw, axis=0) if self.normalize else raw)
        if not self.normalize:
            return torch.from_numpy(np.ascontiguousarray(self.raw[start:end]))
        return torch.from_numpy(sliding_normalize(self.raw[start:end], max(1, end - start), self.silent[start:end]))

    def utterance_samples(self, start: int, end: int) -> tuple[int, int] | None:
        """``(first, end)`` samples of fbank units ``[start, end)`` with each edge moved to the digital silence
        within one window and hop of it (the silence's end on the left, its start on the right), or ``None`` when
        neither edge has such silence (or no ``waveform``): an edge without it keeps the grid's sample."""
        if self.waveform is None or self.waveform_silent is None or self.raw.ndim != 2:
            return None
        win, hop, _ = frame_params(MODEL_SAMPLING_RATE)
        total, reach = len(self.waveform), win + hop
        first, last = start * hop, min(total, (end - 1) * hop + win)
        low = max(0, first - reach)
        left = np.flatnonzero(self.waveform_silent[low : min(total, first + reach)])
        high = max(0, last - reach)
        right = np.flatnonzero(self.waveform_silent[high : min(total, last + reach)])
        if len(left) == 0 and len(right) == 0:
            return None
        if len(left):
            first = low + int(left[-1]) + 1
        if len(right):
            last = high + int(right[0])
        return (first, last) if last - first >= win else None

    def local(self, start: int, end: int) -> torch.Tensor:
        """Units ``[start, end)`` normalised by the sliding-window rule inside the span, whatever its length."""
        return torch.from_numpy(sliding_normalize(self.raw[start:end], self.window, self.silent[start:end]))


ModelInput = torch.Tensor | RecordingInput
"""What the long-form functions read: a tensor (used as it is: already normalised) or a :class:`RecordingInput`."""


def recording_input(waveform: np.ndarray, feature_extractor: Any,
                    window_s: float = DEFAULT_NORM_WINDOW_S) -> RecordingInput:
    """The :class:`RecordingInput` of a ``[S]`` recording at 16 kHz (features computed once, unnormalised).

    Args:
        waveform: ``[S]`` float samples.
        feature_extractor: the processor's feature extractor (``extract_features`` reads it).
        window_s: width of the normalisation window in seconds.
    """
    if window_s <= 0:
        raise ValueError(f"norm_window_s must be positive, got {window_s}")
    fbank = feature_type_of(feature_extractor) == "fbank"
    raw_extractor = copy.copy(feature_extractor)
    raw_extractor.do_normalize = False
    _, raw = extract_features(waveform, raw_extractor)
    per_second = MODEL_SAMPLING_RATE / frame_params(MODEL_SAMPLING_RATE)[1] if fbank else MODEL_SAMPLING_RATE
    samples = np.asarray(waveform, dtype=np.float32) if fbank else None
    return RecordingInput(raw, digital_silence(raw), bool(getattr(feature_extractor, "do_normalize", True)),
                          max(1, round(window_s * per_second)), samples, raw_extractor if fbank else None,
                          digital_silence(samples) if samples is not None else None)


def touches_digital_silence(waveform: np.ndarray, fbank: bool, num_units: int) -> np.ndarray:
    """``[num_units]`` bool: model input units that read digital silence (a run of at least 400 exact zeros,
    :func:`digital_silence`): the samples themselves, or the fbank frames whose 25-ms window reads any such sample.

    Args:
        waveform: ``[S]`` the recording at 16 kHz.
        fbank: the model reads fbank frames (else samples).
        num_units: length of the model input.
    """
    silent = digital_silence(np.asarray(waveform))
    if not fbank:
        return np.pad(silent, (0, max(0, num_units - len(silent))))[:num_units]
    window, hop, _ = frame_params(MODEL_SAMPLING_RATE)
    counts = np.concatenate([[0], np.cumsum(silent, dtype=np.int64)])
    starts = np.minimum(np.arange(num_units) * hop, len(waveform))
    return counts[np.minimum(starts + window, len(waveform))] - counts[starts] > 0


def span_audio(waveform: np.ndarray, start: int, end: int, fbank: bool) -> np.ndarray:
    """The samples that model input units ``[start, end)`` read: ``waveform[start:end]``, or for fbank frames from the
    first frame's start to the last frame's window end (``prepare`` of these samples gives exactly those frames)."""
    if not fbank:
        return waveform[start:end]
    window, hop, _ = frame_params(MODEL_SAMPLING_RATE)
    return waveform[start * hop : (end - 1) * hop + window]


def input_span(inputs: ModelInput, start: int, end: int) -> torch.Tensor:
    """Model input of one encoder call over units ``[start, end)``: a slice of a tensor, or
    :meth:`RecordingInput.span`."""
    if isinstance(inputs, RecordingInput):
        return inputs.span(start, end)
    return inputs[start:end]
