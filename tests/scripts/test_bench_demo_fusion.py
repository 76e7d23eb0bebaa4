"""scripts/bench_demo_fusion.py's comparison of the two paths: medians over the rounds, the ratios against the
reference path, and the largest differences of the logged losses and the dev CER taken round by round."""

from __future__ import annotations

import sys

import pytest
from helpers.paths import REPO

sys.path.insert(0, str(REPO / "scripts"))

import bench_demo_fusion


def run(path: str, round_index: int, seconds: float, cpu: float, cer: float, losses: dict) -> dict:
    return {"path": path, "round": round_index, "steps": 100, "train_seconds": 100 * seconds,
            "seconds_per_step": seconds, "cpu_seconds_per_step": cpu, "process_cpu_seconds": 100 * cpu + 5,
            "losses": losses, "train_loss": sum(losses.values()) / len(losses), "dev_cer": cer, "dev_wer": 0.5}


def test_the_report_compares_each_round_s_runs_and_the_medians():
    runs = [
        run("reference", 1, 4.0, 0.40, 0.150, {25: 0.5, 50: 0.4}),
        run("stacked", 1, 2.0, 0.38, 0.151, {25: 0.5, 50: 0.4 + 3e-6}),
        run("reference", 2, 6.0, 0.42, 0.150, {25: 0.5, 50: 0.4}),
        run("stacked", 2, 3.0, 0.40, 0.150, {25: 0.5 - 1e-6, 50: 0.4}),
    ]
    text, comparison = bench_demo_fusion.report(runs)
    assert comparison["speedup"] == pytest.approx(5.0 / 2.5)  # medians 5.0 and 2.5 s/step
    assert comparison["cpu_speedup"] == pytest.approx(0.41 / 0.39)
    assert comparison["largest_logged_loss_difference"] == pytest.approx(3e-6)
    assert comparison["largest_dev_cer_difference_points"] == pytest.approx(0.1)
    assert "| reference | 2 | 100 | 500.0 | 5.000 | 1.00x | 0.410 | 1.00x |" in text
    assert "| stacked | 2 | 100 | 250.0 | 2.500 | 0.50x | 0.390 | 0.95x |" in text
