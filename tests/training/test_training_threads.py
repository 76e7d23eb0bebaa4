"""``threads: auto``: the cores the other processes leave free (``choose_threads``, a pure function of cores and
load), set in torch with one line when the machine is busy (``apply_threads``), and the setting's checks."""

from __future__ import annotations

import pytest
import torch

from adaptspeech.training import threads as threads_module
from adaptspeech.training.threads import AUTO, THREADS, MachineLoad, apply_threads, choose_threads, measure_load


@pytest.fixture
def torch_threads():
    """Restore torch's thread count after the test."""
    before = torch.get_num_threads()
    yield
    torch.set_num_threads(before)


@pytest.mark.parametrize(
    ("cores", "busy", "threads"),
    [
        (2, 0.0, 2),  # idle: every core
        (2, 0.5, 2),  # a half rounds up
        (2, 0.51, 1),  # more than half a core taken: one thread
        (2, 1.0, 1),  # one CPU-bound process beside
        (2, 2.0, 1),  # every core taken: still one
        (1, 0.0, 1),
        (8, 2.6, 5),
        (8, 0.4, 8),
        (16, 40.0, 1),  # more load than cores
    ],
)
def test_auto_trains_with_the_cores_the_other_processes_leave_free(cores, busy, threads):
    assert choose_threads(cores, busy) == threads


@pytest.mark.parametrize(("cores", "busy"), [(0, 0.0), (2, -0.1), (2, float("nan")), (2, float("inf"))])
def test_the_decision_refuses_impossible_inputs(cores, busy):
    with pytest.raises(ValueError, match=r"(cores|busy) must be"):
        choose_threads(cores, busy)


def test_auto_on_a_busy_machine_sets_fewer_threads_and_says_so(torch_threads):
    lines: list[str] = []
    assert apply_threads(AUTO, measure=lambda: MachineLoad(2, 1.26, "/proc/stat"), say=lines.append) == 1
    assert torch.get_num_threads() == 1
    assert lines == ["machine busy (load 1.3 on 2 cores): training with 1 thread(s)"]


def test_auto_on_an_idle_machine_uses_every_core_without_a_word(torch_threads):
    lines: list[str] = []
    assert apply_threads(AUTO, measure=lambda: MachineLoad(2, 0.2, "/proc/stat"), say=lines.append) == 2
    assert torch.get_num_threads() == 2
    assert lines == []


def test_a_count_is_set_as_given_and_null_keeps_torchs_setting(torch_threads):
    torch.set_num_threads(2)
    assert apply_threads(None) is None and torch.get_num_threads() == 2
    assert apply_threads(1, measure=lambda: pytest.fail("a count measures nothing")) == 1
    assert torch.get_num_threads() == 1


@pytest.mark.parametrize("value", [0, -1, 1.5, "two", "Auto", True])
def test_a_bad_setting_is_refused_in_one_line(value, torch_threads):
    assert not THREADS.accepts(value)
    with pytest.raises(ValueError, match=r"^threads: expected a positive integer or 'auto', got ") as error:
        apply_threads(value)
    assert "\n" not in str(error.value)


def test_the_load_is_measured_from_proc_stat_less_this_process(tmp_path, monkeypatch):
    load = measure_load(0.05)
    assert load.source == "/proc/stat" and 0.0 <= load.busy <= load.cores == threads_module.usable_cores()
    monkeypatch.setattr(threads_module, "_PROC_STAT", tmp_path / "missing")  # no /proc (macOS): the load average
    load = measure_load(0.05)
    assert load.source == "load average" and 0.0 <= load.busy <= load.cores
