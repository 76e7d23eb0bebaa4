"""ROC AUC, ECE and the reliability diagram of adaptspeech/metrics/confidence.py against hand-computed cases (and
scikit-learn's ROC AUC when it is installed)."""

from __future__ import annotations

import numpy as np
import pytest

from adaptspeech.metrics.confidence import calibration_report, reliability_diagram, roc_auc

SCORES = [0.95, 0.85, 0.82, 0.55, 0.45, 0.15, 0.12, 0.92]
CORRECT = [True, True, False, True, False, False, True, True]


def test_auc_and_ece_of_a_hand_computed_case():
    report = calibration_report(SCORES, CORRECT, num_bins=2)
    # positives 0.95 0.85 0.55 0.12 0.92, negatives 0.82 0.45 0.15: pairs won 3+3+2+0+3 = 11 of 15
    assert report["roc_auc"] == pytest.approx(11 / 15)
    # bin [0, 0.5): 0.45 0.15 0.12 -> mean 0.24, 1 of 3 correct; bin [0.5, 1]: 0.95 0.85 0.82 0.55 0.92 -> mean
    # 0.818, 4 of 5 correct: ECE = 3/8 |1/3 - 0.24| + 5/8 |0.8 - 0.818|
    assert report["ece"] == pytest.approx(3 / 8 * abs(1 / 3 - 0.24) + 5 / 8 * abs(0.8 - 0.818))
    assert [b["count"] for b in report["bins"]] == [3, 5] and report["words"] == 8
    assert report["correct_share"] == pytest.approx(5 / 8)
    with pytest.raises(ValueError, match="3 confidences for 2 correctness flags"):
        calibration_report([0.1, 0.2, 0.3], [True, False])


def test_ece_is_zero_when_every_bin_is_calibrated_and_auc_matches_sklearn():
    correct = [False] * 4 + [True, True, True, False]  # each bin's share right equals its mean confidence
    assert calibration_report([0.0] * 4 + [0.75] * 4, correct, 4)["ece"] == pytest.approx(0.0)
    rng = np.random.default_rng(0)
    scores = rng.random(200)
    correct = rng.random(200) < scores
    metrics = pytest.importorskip("sklearn.metrics")
    assert roc_auc(scores, correct) == pytest.approx(metrics.roc_auc_score(correct, scores))


def test_the_reliability_diagram_is_a_png(tmp_path):
    path = reliability_diagram({"m": calibration_report(SCORES, CORRECT)}, tmp_path / "r.png", "t")
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
