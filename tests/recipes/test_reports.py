"""Results tables and plots."""

import json
import struct

import numpy as np

from adaptspeech.reports import plot_fusion_heatmap, plot_training_curves, results_markdown, write_results


def png_size(path):
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    return struct.unpack(">II", data[16:24])


def test_markdown_formats_rates_shares_and_counts(tmp_path):
    rows = [{"system": "a", "cer": 0.0612, "wer": 0.5, "trainable_params": 12345, "trainable_share": 0.1143,
             "train_seconds": 70.4}, {"system": "b", "cer": 0.2, "wer": None}]
    md = results_markdown(rows, title="T")
    assert "| a | 6.12 | 50.00 | 12,345 | 11.43% | 70 |" in md
    assert "| b | 20.00 | - | - | - | - |" in md and md.startswith("### T")
    md_path, json_path = write_results(rows, tmp_path, extra={"target": "sk"})
    assert json.loads(json_path.read_text()) == {"rows": rows, "target": "sk"}
    assert md_path.read_text() == results_markdown(rows)


def test_heatmap_adds_a_source_only_panel_when_the_target_is_named(tmp_path):
    weights = np.array([[0.1, 0.2, 0.7], [0.3, 0.1, 0.6]])
    one = png_size(plot_fusion_heatmap(weights, ["cs", "pl", "sk"], tmp_path / "one.png"))
    two = png_size(plot_fusion_heatmap(weights, ["cs", "pl", "sk"], tmp_path / "two.png", target="sk"))
    assert two[0] > 1.8 * one[0] and two[1] == one[1]


def test_training_curves_plot_every_run(tmp_path):
    histories = {"base": [{"step": i, "loss": 5 / i} for i in range(1, 20)] + [{"step": 19, "eval_cer": 0.3}],
                 "fusion": [{"step": 1, "loss": 1.0}, {"step": 2, "loss": 0.9}]}
    width, height = png_size(plot_training_curves(histories, tmp_path / "c.png"))
    assert width > height > 100
