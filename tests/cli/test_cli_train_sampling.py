"""``data.language_sampling_temperature`` in a stage: the Trainer draws languages with ``p_l ∝ n_l^(1/T)``
(see tests/training/test_training_sampler.py for the draw itself) and the stage summary records the probabilities."""

from __future__ import annotations

import json

import pytest
from helpers.cli import stage_spec, write_yaml

from adaptspeech.cli import main
from adaptspeech.data.subsets import language_sampling_probabilities

pytestmark = pytest.mark.slow


def test_a_stage_samples_languages_by_temperature(prepared_corpus, tmp_path):
    spec = stage_spec(prepared_corpus, tmp_path / "run", max_steps=3)
    spec["data"].update(train_languages=["ro", "cs"], train_subset="10utt", language_sampling_temperature=2.0)
    config = write_yaml(tmp_path / "stage.yaml", spec)
    assert main(["train", "--config", str(config), "--no-progress", "data.train_languages=[ro, cs, pl]"]) == 0
    summary = json.loads((tmp_path / "run" / "stage_summary.json").read_text())
    sampling = summary["language_sampling"]
    assert sampling["temperature"] == 2.0 and sampling["rows"] == {"ro": 10, "cs": 10, "pl": 10}
    assert sampling["probabilities"] == pytest.approx(language_sampling_probabilities(sampling["rows"], 2.0))


def test_temperature_sampling_with_group_by_length_is_one_line(prepared_corpus, tmp_path, capsys):
    spec = stage_spec(prepared_corpus, tmp_path / "run", max_steps=3, train_sampling_strategy="group_by_length")
    spec["data"]["language_sampling_temperature"] = 2.0
    config = write_yaml(tmp_path / "stage.yaml", spec)
    assert main(["train", "--config", str(config), "--no-progress"]) == 1
    assert capsys.readouterr().err.strip() == (
        "adaptspeech: error: data.language_sampling_temperature replaces the training sampler: it cannot be combined "
        "with training.train_sampling_strategy='group_by_length' (remove one of the two)"
    )
