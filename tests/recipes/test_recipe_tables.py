"""The results table of a recipe run: markdown and JSON."""

import json

from adaptspeech.recipes.tables import results_markdown, write_results


def test_markdown_formats_rates_shares_and_counts(tmp_path):
    rows = [{"system": "a", "cer": 0.0612, "wer": 0.5, "trainable_params": 12345, "trainable_share": 0.1143,
             "train_seconds": 70.4}, {"system": "b", "cer": 0.2, "wer": None}]
    md = results_markdown(rows, title="T")
    assert "| a | 6.12 | 50.00 | 12,345 | 11.43% | 70 |" in md
    assert "| b | 20.00 | - | - | - | - |" in md and md.startswith("### T")
    md_path, json_path = write_results(rows, tmp_path, extra={"target": "sk"})
    assert json.loads(json_path.read_text()) == {"rows": rows, "target": "sk"}
    assert md_path.read_text() == results_markdown(rows)
