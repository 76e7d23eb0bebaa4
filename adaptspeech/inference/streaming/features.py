"""A stream's model input: samples in, normalised units (fbank frames or samples) out, reading no future audio.

Units are computed from the samples as soon as their window is complete (fbank: 25-ms frames every 10 ms on the same
grid as the whole recording's, Kaldi's ``snip_edges``), so the raw units equal those of the whole recording. Training
normalises every utterance over itself, which needs its end; a stream normalises each step of units (one encoder chunk)
with the mean and variance of the last ``window`` units up to the step's end (Kaldi's ``apply-cmvn-sliding`` without
centring; digital silence left out of the statistics as in :mod:`~adaptspeech.inference.long_form.local_norm`). A stream
shorter than the window is thus normalised over itself, as an utterance is, once it ends
(:meth:`StreamFeatures.normalize` of the last step). Under ``normalization: global`` there is no window: every unit is
normalised with the training set's statistics, as ``prepare`` normalised the training rows, so a stream's units equal
the whole recording's offline features.
"""

from __future__ import annotations

import inspect

import numpy as np

from ...data.feature_types import FeatureType, normalize_utterance

_NORMALIZE_EPS = inspect.signature(normalize_utterance).parameters["eps"].default


class StreamFeatures:
    """Incremental units of one stream and their causal normalisation.

    Args:
        features: the model's feature type, with the feature extractor's settings.
        window: units of the normalisation window (``W``).
    """

    def __init__(self, features: FeatureType, window: int) -> None:
        if window < 1:
            raise ValueError(f"normalisation window of {window} units: must be at least 1")
        self.features, self.window = features, window
        self.samples = np.zeros(0, np.float32)  # samples not yet consumed by a complete unit window
        self.history = features.empty()  # the last `window` raw units (statistics)
        self.history_silent = np.zeros(0, bool)
        self.units = 0  # raw units produced
        self.total_samples = 0

    def push(self, samples: np.ndarray) -> np.ndarray:
        """New samples ``[n]`` (float, the feature extractor's rate) -> the raw units now complete ``[m(, F)]``."""
        samples = np.asarray(samples, dtype=np.float32).reshape(-1)
        self.total_samples += len(samples)
        self.samples = np.concatenate([self.samples, samples])
        win, hop = self.features.unit_window, self.features.unit_hop
        if len(self.samples) < win:
            return self.features.empty()
        count = (len(self.samples) - win) // hop + 1
        raw = self.features.raw(self.samples[: (count - 1) * hop + win])
        self.samples = self.samples[count * hop :]
        self.units += len(raw)
        return raw

    def flush(self) -> np.ndarray:
        """The end of the stream: a stream shorter than one unit window gets one zero-padded unit (as a clip shorter
        than one window does); otherwise the leftover samples make no unit (``snip_edges``)."""
        if self.units == 0 and self.total_samples:
            raw = self.features.raw(self.samples)
            self.units += len(raw)
            self.samples = self.samples[:0]
            return raw
        return self.features.empty()

    def normalize(self, raw: np.ndarray) -> np.ndarray:
        """A step of raw units ``[m(, F)]`` -> normalised with the statistics of the last ``window`` units up to its end
        (the raw units themselves without ``do_normalize``; the training set's statistics under ``normalization:
        global``)."""
        if not self.features.do_normalize or len(raw) == 0:
            return np.asarray(raw, dtype=np.float32)
        if self.features.global_normalization:
            return self.features.normalize(raw)
        silent = np.asarray(self.features.digital_silence(raw), dtype=bool)
        self.history = np.concatenate([self.history, raw])[-self.window :]
        self.history_silent = np.concatenate([self.history_silent, silent])[-self.window :]
        values = self.history.astype(np.float64).reshape(len(self.history), -1)
        kept = values[~self.history_silent] if (~self.history_silent).any() else values
        mean, var = kept.mean(axis=0), kept.var(axis=0)
        shaped = np.asarray(raw, dtype=np.float64).reshape(len(raw), -1)
        return ((shaped - mean) / np.sqrt(var + _NORMALIZE_EPS)).astype(np.float32).reshape(raw.shape)
