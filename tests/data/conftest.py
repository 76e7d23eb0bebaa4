"""Shared, session-scoped fixtures of the data tests: one small synthetic corpus, loaded and prepared once."""

from __future__ import annotations

from pathlib import Path

import pytest

from adaptspeech.data import build_processor, build_synthetic_corpus, build_vocab, load_common_voice, normalize_text
from adaptspeech.data.common_voice import prepare_dataset

LANGUAGES = ("ro", "cs")
CLIPS_PER_LANGUAGE = 20  # 16 train, 2 dev, 2 test per language


@pytest.fixture(scope="session")
def synthetic_corpus(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict]:
    """``(folder, summary)`` of a 2-language x 20-clip corpus at espeak-ng's 22050 Hz (so that loading
    resamples), built with 2 workers."""
    out = tmp_path_factory.mktemp("synthetic") / "corpus"
    summary = build_synthetic_corpus(
        out, LANGUAGES, CLIPS_PER_LANGUAGE, seed=0, num_workers=2, progress=False, sample_rate=None
    )
    return out, summary


@pytest.fixture(scope="session")
def loaded_corpus(synthetic_corpus):
    return load_common_voice(synthetic_corpus[0], LANGUAGES)


@pytest.fixture(scope="session")
def processor(loaded_corpus, tmp_path_factory: pytest.TempPathFactory):
    train = loaded_corpus["train"]
    texts = [normalize_text(s, lang) for s, lang in zip(train["sentence"], train["language"])]
    return build_processor(build_vocab(texts), tmp_path_factory.mktemp("processor"))


@pytest.fixture(scope="session")
def prepared_corpus(loaded_corpus, processor):
    """``(prepared DatasetDict, SkipReport)`` of the synthetic corpus, waveform features."""
    return prepare_dataset(loaded_corpus, processor)
