"""adaptspeech.memory: the process's resident memory and the fresh process a benchmark measures in."""

from __future__ import annotations

import os
from typing import Any

import pytest

from adaptspeech.memory import MIB, current_rss_bytes, in_fresh_process, peak_rss_bytes


def _report(offset: int, queue: Any) -> None:
    """What the spawned process sees: its id, its argument, its own resident memory in MiB."""
    queue.put((os.getpid(), offset + 1, current_rss_bytes() / MIB))


def test_a_measurement_runs_in_a_process_of_its_own_and_returns_what_it_put():
    pid, value, rss_mib = in_fresh_process(_report, 41)
    assert pid != os.getpid()
    assert value == 42
    assert 0 < rss_mib < current_rss_bytes() / MIB  # a bare interpreter, not this test process with torch loaded


def test_the_peak_is_at_least_the_current_size():
    assert peak_rss_bytes() >= current_rss_bytes() > 0


def _fail(queue: Any) -> None:
    raise RuntimeError("the measurement failed")


def test_a_measurement_that_fails_raises_instead_of_waiting_for_its_result():
    with pytest.raises(RuntimeError, match=r"_fail ended with exit code 1 before putting a result"):
        in_fresh_process(_fail)
