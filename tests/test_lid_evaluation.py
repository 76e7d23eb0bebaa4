"""``prefix_row``: a row cut to its first seconds is normalised as the model reads such a prefix."""

from __future__ import annotations

import numpy as np

from adaptspeech.data.feature_types import FbankFeatures, normalize_utterance
from adaptspeech.lid_evaluation import prefix_row
from adaptspeech.runtime.features import GlobalCmvn


def test_a_prefix_is_renormalised_per_utterance_but_kept_under_global_cmvn() -> None:
    row = {"input_features": np.random.default_rng(0).standard_normal((300, 4)).astype(np.float32) * 2 + 1}
    per_utterance = FbankFeatures(n_mels=4)
    units = per_utterance.num_units(16000)  # one second
    cut = prefix_row(row, per_utterance, 1.0)["input_features"]
    np.testing.assert_array_equal(cut, normalize_utterance(row["input_features"][:units], axis=0))
    stats = GlobalCmvn(np.zeros(4), np.ones(4), 10)
    global_cmvn = FbankFeatures(n_mels=4, normalization="global", global_cmvn=stats)
    kept = prefix_row(row, global_cmvn, 1.0)["input_features"]  # the rows hold the model input already
    np.testing.assert_array_equal(kept, row["input_features"][:units])
