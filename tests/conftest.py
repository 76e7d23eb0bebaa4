"""What every test shares: the test helpers on the import path (``from helpers.cli import run_main``: the package
``tests/helpers``), and one torch thread per test."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
import torch

TESTS = str(Path(__file__).resolve().parent)
if TESTS not in sys.path:
    sys.path.insert(0, TESTS)


#: torch threads of each test: 1 unless ADAPTSPEECH_TEST_THREADS says otherwise (a run with 2 checks that no test
#: depends on the thread count; OMP_NUM_THREADS alone does not change it, the fixture below sets it per test)
TEST_THREADS = int(os.environ.get("ADAPTSPEECH_TEST_THREADS", "1"))


@pytest.fixture(autouse=True)
def one_thread():
    """Run every test on one torch thread (``TEST_THREADS``), then restore the thread count: the models under test are
    tiny, the two cores are shared (two threads on two busy cores made a tiny training step 100x slower), and the CLI
    subprocesses run on one thread too."""
    before = torch.get_num_threads()
    torch.set_num_threads(TEST_THREADS)
    yield
    torch.set_num_threads(before)
