"""Fixtures of the training tests: a real processor for the rows of ``helpers.training.make_dataset``."""

from __future__ import annotations

import pytest
from helpers.training import VOCAB

from adaptspeech.data.processor import build_processor


@pytest.fixture(scope="session")
def processor(tmp_path_factory):
    """Special tokens, then a..g (12 tokens), with a 16-bin fbank feature extractor."""
    return build_processor(VOCAB, tmp_path_factory.mktemp("processor"), feature_type="fbank", n_mels=16)
