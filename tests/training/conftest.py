"""Fixtures of the training tests: a real processor for the rows of ``training_helpers.make_dataset``."""

from __future__ import annotations

import pytest
import torch
from training_helpers import VOCAB

from adaptspeech.data.text import build_processor


@pytest.fixture(autouse=True)
def one_thread():
    """One torch thread per test (two busy cores are shared), restored afterwards."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="session")
def processor(tmp_path_factory):
    """Special tokens, then a..g (12 tokens), with a 16-bin fbank feature extractor."""
    return build_processor(VOCAB, tmp_path_factory.mktemp("processor"), feature_type="fbank", n_mels=16)
