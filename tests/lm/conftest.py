"""Fixtures of the n-gram LM tests."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest
from helpers.lm import CORPUS, DEV_TEXTS, prepared_dev
from helpers.model_folders import audio, model_folder

from adaptspeech.lm.build import build_arpa


@pytest.fixture
def lm_setup(tmp_path: Path) -> SimpleNamespace:
    """A tiny CTC model folder, a prepared ``dev`` split of three utterances and an LM built by ``lm build``."""
    folder = model_folder(tmp_path / "model")
    waves = [audio(1.0 + 0.25 * i, seed=40 + i) for i in range(len(DEV_TEXTS))]
    prepared = prepared_dev(tmp_path / "prepared", folder, waves, DEV_TEXTS)
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n".join(CORPUS) + "\n", encoding="utf-8")
    build_arpa(corpus, tmp_path / "lm", order=2, progress=False)
    return SimpleNamespace(root=tmp_path, model=folder, prepared=prepared, lm=tmp_path / "lm", corpus=corpus,
                           waves=waves)
