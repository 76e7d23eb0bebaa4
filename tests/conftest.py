"""Fixtures every test shares."""

from __future__ import annotations

import pytest
import torch


@pytest.fixture(autouse=True)
def one_thread():
    """Run every test on one torch thread, then restore the thread count: the models under test are tiny, the two
    cores are shared (two threads on two busy cores made a tiny training step 100x slower), and the CLI subprocesses
    run on one thread too."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
