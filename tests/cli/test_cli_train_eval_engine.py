"""The CER logged during training is the CER of the model: for every head, the ``eval_cer`` / ``eval_wer``
logged at the last step equal, exactly, what ``adaptspeech evaluate`` reports for the saved model on the same split
with the same decoder.

Before, ``compute_metrics`` decoded without skipping special tokens (``[UNK]``, ``</s>`` counted as several
characters: eval_cer 1.614 in the log, 1.0 from the evaluation) and, with ``head: las``, scored ``frame_lengths``.
"""

from __future__ import annotations

import json

import pytest
from helpers.cli import LANGUAGES, stage_spec, write_yaml

from adaptspeech.cli import main

pytestmark = pytest.mark.slow


@pytest.mark.parametrize(("head", "method"), [("ctc", "ctc_greedy"), ("las", "attention_greedy"), ("ctc_las", "joint")])
def test_logged_eval_rates_are_those_of_adaptspeech_evaluate(prepared_corpus, tmp_path, head, method):
    spec = stage_spec(prepared_corpus, tmp_path / "run", max_steps=6, eval_strategy="steps", eval_steps=3,
                      logging_steps=3)
    spec["model"]["config"]["head"] = head
    if head != "ctc":
        spec["model"]["config"]["las"] = {"decoder_hidden": 32, "embedding_dim": 16, "attention_dim": 16,
                                          "max_target_length": 200}
    spec["evaluation"] = {"method": method, "batch_size": 4, "options": {"beam_size": 2} if method == "joint" else {}}
    config = write_yaml(tmp_path / "stage.yaml", spec)
    assert main(["train", "--config", str(config), "--no-progress"]) == 0

    history = json.loads((tmp_path / "run" / "log_history.json").read_text())
    logged = [entry for entry in history if "eval_cer" in entry]
    assert [entry["step"] for entry in logged] == [3, 6]
    last = logged[-1]
    assert last["eval_loss"] > 0

    output = tmp_path / "evaluate.json"
    argv = ["evaluate", "--model", str(tmp_path / "run" / "model"), "--data", str(prepared_corpus), "--split", "dev",
            "--method", method, "--batch-size", "4", "--output", str(output), "--no-progress"]
    if method == "joint":
        argv += ["--beam-size", "2"]
    assert main(argv) == 0
    result = json.loads(output.read_text())
    assert last["eval_cer"] == result["overall"]["cer"]
    assert last["eval_wer"] == result["overall"]["wer"]
    for lang in LANGUAGES:
        assert last[f"eval_cer_{lang}"] == result["per_language"][lang]["cer"]
        assert last[f"eval_wer_{lang}"] == result["per_language"][lang]["wer"]
    # the stage's own final evaluation is the same figure
    summary = json.loads((tmp_path / "run" / "stage_summary.json").read_text())
    assert summary["dev"]["overall"]["cer"] == result["overall"]["cer"]
