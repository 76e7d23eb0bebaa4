"""scripts/bench_streaming_norm.py's stream normalisation with a global prior: without a prior it is today's
StreamFeatures; with one, a window shorter than the prior is topped up with the prior's moments."""

from __future__ import annotations

import sys

import numpy as np
import pytest
from helpers.paths import REPO

from adaptspeech.data.feature_types import FeatureType
from adaptspeech.feature_extraction import AdaptSpeechFeatureExtractor
from adaptspeech.inference.streaming.features import StreamFeatures
from adaptspeech.runtime.features import GlobalCmvn

sys.path.insert(0, str(REPO / "scripts"))

import bench_streaming_norm


def features() -> FeatureType:
    return FeatureType.of(AdaptSpeechFeatureExtractor(n_mels=2))


def steps() -> list[np.ndarray]:
    rng = np.random.default_rng(0)
    return [rng.normal(3.0, 2.0, (4, 2)).astype(np.float32) for _ in range(3)]


def test_without_a_prior_it_is_the_sliding_window_of_stream_features() -> None:
    prior = GlobalCmvn(np.array([100.0, 100.0]), np.array([1.0, 1.0]), 10)
    plain, topped = StreamFeatures(features(), 6), bench_streaming_norm.PriorStreamFeatures(features(), 6, prior, 0)
    for raw in steps():
        np.testing.assert_array_equal(topped.normalize(raw), plain.normalize(raw))


def test_a_short_window_is_topped_up_with_the_prior_s_moments() -> None:
    prior = GlobalCmvn(np.array([1.0, -1.0]), np.array([4.0, 9.0]), 10)
    stream = bench_streaming_norm.PriorStreamFeatures(features(), 6, prior, 4)
    raw = np.array([[3.0, 1.0], [5.0, 1.0]], np.float32)  # 2 units: 2 units of the prior fill the window to 4
    out = stream.normalize(raw)
    # bin 0: mean (3 + 5 + 2 * 1) / 4 = 2.5, second moment (9 + 25 + 2 * (4 + 1)) / 4 = 11, variance 4.75
    # bin 1: mean (1 + 1 - 2) / 4 = 0, second moment (1 + 1 + 2 * (9 + 1)) / 4 = 5.5, variance 5.5
    assert out[:, 0] == pytest.approx([0.5 / np.sqrt(4.75), 2.5 / np.sqrt(4.75)], rel=1e-5)
    assert out[:, 1] == pytest.approx([1 / np.sqrt(5.5), 1 / np.sqrt(5.5)], rel=1e-5)
    # once the window holds 4 units or more, the prior no longer counts: the window's own statistics
    stream.normalize(np.full((6, 2), 2.0, np.float32))
    last = np.array([[0.0, 0.0], [4.0, 4.0]], np.float32)
    window = np.concatenate([np.full((4, 2), 2.0), last])  # the last 6 units
    expected = (last - window.mean(0)) / np.sqrt(window.var(0) + 1e-7)
    np.testing.assert_allclose(stream.normalize(last), expected, rtol=1e-5)
