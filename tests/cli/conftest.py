"""Session fixtures of the CLI tests: one tiny prepared corpus (built with the CLI itself) and one trained model."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from helpers.cli import CLIPS_PER_LANGUAGE, LANGUAGES, stage_spec, write_yaml

from adaptspeech.cli import main


@pytest.fixture(scope="session")
def prepared_corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``adaptspeech prepare synthetic`` (3 languages x 30 clips) then ``prepare common-voice --feature-type fbank``;
    returns the prepared folder (dataset/ + processor/)."""
    root = tmp_path_factory.mktemp("cli_corpus")
    corpus, prepared = root / "corpus", root / "prepared"
    languages = ",".join(LANGUAGES)
    argv = ["prepare", "synthetic", "--out", str(corpus), "--languages", languages,
            "--clips-per-language", str(CLIPS_PER_LANGUAGE), "--workers", "2", "--no-progress"]
    assert main(argv) == 0
    argv = ["prepare", "common-voice", "--root", str(corpus), "--languages", languages, "--out", str(prepared),
            "--feature-type", "fbank"]
    assert main(argv) == 0
    return prepared


@pytest.fixture(scope="session")
def prepared_w2v_bert_corpus(prepared_corpus: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The same synthetic corpus prepared with ``--feature-type stacked_fbank`` (w2v-BERT 2.0's input); returns the
    prepared folder."""
    prepared = tmp_path_factory.mktemp("cli_corpus_w2v_bert") / "prepared"
    argv = ["prepare", "common-voice", "--root", str(prepared_corpus.parent / "corpus"), "--languages",
            ",".join(LANGUAGES), "--out", str(prepared), "--feature-type", "stacked_fbank"]
    assert main(argv) == 0
    return prepared


@pytest.fixture(scope="session")
def trained_stage(prepared_corpus: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny model trained in-process with ``adaptspeech train`` (250 steps: past CTC's all-blank phase, so that it
    emits characters); returns its output_dir."""
    root = tmp_path_factory.mktemp("cli_trained")
    spec = stage_spec(prepared_corpus, root / "run", max_steps=250, logging_steps=50)
    config = write_yaml(root / "stage.yaml", spec)
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        assert main(["train", "--config", str(config), "--no-progress"]) == 0
    finally:
        torch.set_num_threads(before)
    return root / "run"
