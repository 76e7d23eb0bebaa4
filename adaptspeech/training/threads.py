"""Torch threads of a training process: a number, or ``auto``: fewer threads than cores when other processes keep
cores busy.

OpenMP threads meet at a barrier after every parallel operation. On a machine where another process runs, one of
them is descheduled now and then and the others wait for it at each barrier, spinning by default: on a busy 2-core
machine the demo base's step on 2 threads took 15-37 times as long as on 1 (``scripts/bench_threads_busy.py``,
docs/benchmarks.md; ``OMP_WAIT_POLICY=PASSIVE``, set before torch loads, removes most of it).
``auto`` measures, when the run starts, how many cores' worth of CPU the other processes use
(``/proc/stat`` over :data:`SAMPLE_SECONDS`, less this process's own CPU time; the 1-minute load average where
``/proc/stat`` is missing) and trains with the cores they leave free (:func:`choose_threads`), at least one.

The decision is taken once, at the start: a load that starts later is not seen.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch

from ..settings import SettingType, is_int

__all__ = [
    "AUTO",
    "SAMPLE_SECONDS",
    "THREADS",
    "MachineLoad",
    "apply_threads",
    "choose_threads",
    "measure_load",
    "usable_cores",
]

AUTO = "auto"
"""The ``threads`` value that picks the count from the machine's load."""

SAMPLE_SECONDS = 1.0
"""How long :func:`measure_load` watches ``/proc/stat``."""

THREADS = SettingType(f"a positive integer or {AUTO!r}", lambda v: v == AUTO or (is_int(v) and v > 0))
"""The ``threads`` setting's type: a count, or :data:`AUTO`."""

_PROC_STAT = Path("/proc/stat")


@dataclass(frozen=True)
class MachineLoad:
    """What the other processes use of the machine.

    Args:
        cores: the CPUs this process may run on.
        busy: cores' worth of CPU the other processes used while measured (0 to ``cores``).
        source: where ``busy`` comes from (``"/proc/stat"`` or ``"load average"``).
    """

    cores: int
    busy: float
    source: str


def usable_cores() -> int:
    """The CPUs this process may run on (its affinity; ``os.cpu_count()`` where affinity is unknown)."""
    if hasattr(os, "sched_getaffinity"):
        return max(1, len(os.sched_getaffinity(0)))
    return max(1, os.cpu_count() or 1)


def choose_threads(cores: int, busy: float) -> int:
    """The threads for a process on ``cores`` CPUs of which other processes keep ``busy`` cores' worth busy: the
    cores they leave free, rounded to the nearest (a half rounds up), at least 1 and at most ``cores``.

    On 2 cores: ``busy`` up to 0.5 -> 2 threads, above -> 1."""
    if cores < 1:
        raise ValueError(f"cores must be >= 1, got {cores}")
    if not math.isfinite(busy) or busy < 0:
        raise ValueError(f"busy must be a finite number >= 0, got {busy}")
    return max(1, min(cores, math.floor(cores - busy + 0.5)))


def _cpu_jiffies() -> tuple[int, int]:
    """(busy, total) clock ticks of ``/proc/stat``'s ``cpu`` line (all CPUs): busy = total - idle - iowait."""
    fields = [int(x) for x in _PROC_STAT.read_text().splitlines()[0].split()[1:]]
    total = sum(fields[:8])  # user nice system idle iowait irq softirq steal (guest is inside user)
    return total - fields[3] - fields[4], total


def measure_load(seconds: float = SAMPLE_SECONDS) -> MachineLoad:
    """The other processes' CPU use now: the busy share of the machine's CPU time in ``/proc/stat`` over ``seconds``,
    less this process's own CPU time, times this process's :func:`usable_cores`; where ``/proc/stat`` cannot be
    read, the 1-minute load average."""
    cores = usable_cores()
    try:
        busy_0, total_0 = _cpu_jiffies()
        own_0 = os.times()
        time.sleep(seconds)
        busy_1, total_1 = _cpu_jiffies()
        own_1 = os.times()
    except (OSError, ValueError, IndexError):
        return MachineLoad(cores, min(float(cores), max(0.0, os.getloadavg()[0])), "load average")
    ticks = os.sysconf("SC_CLK_TCK")
    own = (own_1.user + own_1.system - own_0.user - own_0.system) * ticks
    elapsed = total_1 - total_0
    if elapsed <= 0:
        return MachineLoad(cores, 0.0, "/proc/stat")
    fraction = max(0.0, (busy_1 - busy_0 - own) / elapsed)
    return MachineLoad(cores, min(float(cores), fraction * cores), "/proc/stat")


def apply_threads(
    setting: int | str | None, measure: Callable[[], MachineLoad] = measure_load, say: Callable[[str], None] = print
) -> int | None:
    """Set torch's threads from a ``threads`` setting: a count, :data:`AUTO` (:func:`choose_threads` on
    :func:`measure_load`; ``say`` gets one line when the machine is busy, ``machine busy (load X on N cores):
    training with T thread(s)``) or None (torch's own setting is kept). Returns the count set (None: none).

    Raises:
        ValueError: a setting that is not :data:`THREADS`.
    """
    if setting is None:
        return None
    if not THREADS.accepts(setting):
        raise ValueError(f"threads: expected {THREADS.description}, got {setting!r}")
    if setting == AUTO:
        load = measure()
        threads = choose_threads(load.cores, load.busy)
        if threads < load.cores:
            say(f"machine busy (load {load.busy:.1f} on {load.cores} cores): training with {threads} thread(s)")
    else:
        threads = int(setting)
    torch.set_num_threads(threads)
    return threads
