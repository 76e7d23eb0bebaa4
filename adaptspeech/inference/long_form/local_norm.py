"""Stage 3 of inference, features: a recording's model input, computed once, each encoder call's normalised over
nearby audio only.

``prepare`` (and so training) normalises every utterance over itself: fbank features to zero mean and unit variance
per mel bin, waveforms (``do_normalize``) to zero mean and unit variance. A long recording holds many utterances,
often several voices at different levels; one mean and variance over the whole recording fits none of them (four
mixed voices: +3.1 to +3.7 CER points over decoding the utterances one by one, see ``docs/inference.md``). Long-form
and streaming recognisers normalise locally instead (Kaldi's ``apply-cmvn-sliding --center``); so does this module.

**Rule.** An encoder call reads input units ``[a, b)`` of the recording (fbank frames or samples: a CTC chunk with its
strides, or an attention segment). If ``[a, b)`` is the whole recording, it is normalised exactly as ``prepare``
normalises an utterance (w2v-BERT's stacked filterbank, whose mel bins are normalised before they are stacked, is
computed again from the samples for it). Otherwise unit ``t`` is normalised with the mean and variance over the window
``[s, s + W)``, ``s = min(max(t - W // 2, a), b - W)``: a centred window of ``W`` units (``window_s`` seconds) shifted
at the span's edges to stay inside the span (Kaldi's rule), so nothing outside the encoder call is read, and a span of
at most ``W`` units is normalised over itself: exactly the per-utterance normalisation of that span's audio. Digital
silence (the feature type's ``digital_silence``: muted stretches, zero padding, clips joined by zeros, which
per-utterance statistics never hold) is left out of the statistics; a window holding nothing else uses all its units.
Statistics are per mel bin for fbank features, over samples for waveforms. Without ``do_normalize`` the raw input is
used everywhere. Under ``normalization: global`` (the training set's statistics, :attr:`RecordingInput.cmvn`) every
unit is normalised with them wherever it is read: no window, the same values as ``prepare``'s.

A segment (stage 2) says how its input is read (:func:`segment_input`): as a recording of its own (each encoder call
by the rule above), as one encoder call, or as one utterance (:meth:`RecordingInput.utterance`).
"""

from __future__ import annotations

import dataclasses
import inspect
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from ...data.audio import digital_silence
from ...data.feature_types import FeatureType, normalize_utterance
from ...runtime.features import GlobalCmvn
from ...runtime.long_form import utterance_samples
from .. import DEFAULT_NORM_WINDOW_S
from ..model_mixin import MODEL_SAMPLING_RATE
from .segmenting import Segment, SegmentInput

_NORMALIZE_EPS = inspect.signature(normalize_utterance).parameters["eps"].default


def sliding_normalize(x: np.ndarray, window: int, silent: np.ndarray | None = None) -> np.ndarray:
    """Each unit of ``x`` normalised over its window (the module docstring's rule, with ``[a, b)`` = all of ``x``).

    Args:
        x: ``[N]`` samples or ``[N, D]`` features (statistics per column).
        window: ``W``, units per window (at least 1).
        silent: ``[N]`` units left out of the statistics (all units where a window holds only such units).

    Returns:
        float32, the shape of ``x``; ``N <= W`` gives :func:`normalize_utterance` over the kept units.
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
        silent: ``[S]`` or ``[T]`` digital silence (the feature type's ``digital_silence``).
        normalize: the feature extractor's ``do_normalize``.
        window: ``W``, units per normalisation window.
    """

    raw: np.ndarray
    silent: np.ndarray
    normalize: bool
    window: int
    waveform: np.ndarray | None = None
    """``[S]`` the recording's samples (framed features only): :meth:`utterance` re-reads an utterance that digital
    silence delimits from its own samples."""
    features: FeatureType | None = None
    """The feature type that computed ``raw`` (with ``waveform``)."""
    waveform_silent: np.ndarray | None = None
    """``[S]`` digital silence of ``waveform`` (:func:`~adaptspeech.data.audio.digital_silence`)."""
    cmvn: GlobalCmvn | None = None
    """The training set's statistics under ``normalization: global`` (with ``normalize``): every span normalised
    with them."""

    def __len__(self) -> int:
        return len(self.raw)

    def span(self, start: int, end: int) -> torch.Tensor:
        """Model input of one encoder call over units ``[start, end)``: the whole recording as ``prepare``
        normalises it, any other span by :meth:`local`."""
        start, end = max(start, 0), min(end, len(self.raw))
        if not self.normalize:
            return torch.from_numpy(np.ascontiguousarray(self.raw[start:end]))
        if self.cmvn is not None:
            return torch.from_numpy(self.cmvn.apply(self.raw[start:end]))
        if start == 0 and end == len(self.raw):
            if self.features is not None and not self.features.normalizes_raw_units:
                assert self.waveform is not None
                return torch.from_numpy(self.features.extract(self.waveform))  # normalised before its units form
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
            assert self.waveform is not None and self.features is not None
            units = self.features.extract(self.waveform[samples[0] : samples[1]])
            if len(units) > 0:
                return torch.from_numpy(units)
        if not self.normalize or self.cmvn is not None:
            return self.span(start, end)
        return torch.from_numpy(sliding_normalize(self.raw[start:end], max(1, end - start), self.silent[start:end]))

    def utterance_samples(self, start: int, end: int) -> tuple[int, int] | None:
        """``(first, end)`` samples of framed units ``[start, end)`` with each edge moved to the digital silence
        within one window and hop of it (the silence's end on the left, its start on the right), or ``None`` when
        neither edge has such silence (or no ``waveform``): an edge without it keeps the grid's sample."""
        if self.waveform is None or self.waveform_silent is None or self.features is None:
            return None
        return utterance_samples(start, end, self.waveform_silent, self.features.unit_hop, self.features.unit_window)

    def local(self, start: int, end: int) -> torch.Tensor:
        """Units ``[start, end)`` normalised by the sliding-window rule inside the span, whatever its length (with
        the global statistics under ``normalization: global``)."""
        if self.cmvn is not None:
            return self.span(start, end)
        return torch.from_numpy(sliding_normalize(self.raw[start:end], self.window, self.silent[start:end]))


ModelInput = torch.Tensor | RecordingInput
"""What the encoder stage reads: a tensor (used as it is: already normalised) or a :class:`RecordingInput`."""


def recording_input(waveform: np.ndarray, feature_extractor: Any,
                    window_s: float = DEFAULT_NORM_WINDOW_S) -> RecordingInput:
    """The :class:`RecordingInput` of a ``[S]`` recording at 16 kHz (features computed once, unnormalised).

    Args:
        waveform: ``[S]`` float samples.
        feature_extractor: the processor's feature extractor (its feature type and settings).
        window_s: width of the normalisation window in seconds.
    """
    check_norm_window(window_s)
    features = FeatureType.of(feature_extractor)
    raw = features.raw(waveform)
    per_second = MODEL_SAMPLING_RATE / features.unit_hop
    samples = np.asarray(waveform, dtype=np.float32) if features.framed else None
    return RecordingInput(raw, features.digital_silence(raw), features.do_normalize,
                          max(1, round(window_s * per_second)), samples, features if samples is not None else None,
                          digital_silence(samples, MODEL_SAMPLING_RATE) if samples is not None else None,
                          features.stats() if features.global_normalization else None)


def check_norm_window(window_s: float) -> None:
    """Refuse a normalisation window that is not positive (``ValueError``)."""
    if window_s <= 0:
        raise ValueError(f"norm_window_s must be positive, got {window_s}")


def model_input(waveform: np.ndarray, feature_extractor: Any) -> torch.Tensor:
    """``prepare``'s model input of one utterance, normalised over all of it: ``[S]`` samples or ``[T, n_mels]``.

    Args:
        waveform: ``[S]`` the recording at the feature extractor's rate.
        feature_extractor: the processor's feature extractor (its feature type and settings).
    """
    return torch.from_numpy(FeatureType.of(feature_extractor).extract(waveform))


def input_span(inputs: ModelInput, start: int, end: int) -> torch.Tensor:
    """Model input of one encoder call over units ``[start, end)``: a slice of a tensor, or
    :meth:`RecordingInput.span`."""
    if isinstance(inputs, RecordingInput):
        return inputs.span(start, end)
    return inputs[start:end]


def slice_input(inputs: ModelInput, start: int, end: int) -> ModelInput:
    """Units ``[start, end)`` of a recording's model input as a recording of their own (a :class:`RecordingInput`
    sliced, unnormalised, or a tensor sliced)."""
    if isinstance(inputs, RecordingInput):
        return dataclasses.replace(inputs, raw=inputs.raw[start:end], silent=inputs.silent[start:end], waveform=None,
                                   features=None, waveform_silent=None)  # its samples would not match the units
    return inputs[start:end]


def utterance_input(inputs: ModelInput, start: int, end: int) -> torch.Tensor:
    """Units ``[start, end)`` normalised as one utterance (:meth:`RecordingInput.utterance`), or a tensor sliced."""
    return inputs.utterance(start, end) if isinstance(inputs, RecordingInput) else inputs[start:end]


def segment_input(inputs: ModelInput, segment: Segment) -> ModelInput:
    """A segment's model input, read as the segment says
    (:class:`~adaptspeech.inference.long_form.segmenting.SegmentInput`): a recording of its own (the whole recording's
    input, or a slice), one encoder call (:func:`input_span`), or one utterance (:func:`utterance_input`)."""
    if segment.read_as is SegmentInput.UTTERANCE:
        return utterance_input(inputs, segment.start, segment.end)
    if segment.read_as is SegmentInput.WINDOW:
        return input_span(inputs, segment.start, segment.end)
    if (segment.start, segment.end) == (0, len(inputs)):
        return inputs
    return slice_input(inputs, segment.start, segment.end)
