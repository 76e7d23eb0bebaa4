"""The process's resident memory, for the dry run's per-stage report and the training-step benchmark: the resident set
size now (``VmRSS``) and its peak (``VmHWM``), which Linux lets a process reset.

Linux's ``/proc/self/status`` is read; elsewhere the peak is ``getrusage``'s ``ru_maxrss`` (which cannot be reset) and
the current size psutil's. ``tracemalloc`` would miss torch's allocations, which do not go through Python's
allocator.
"""

from __future__ import annotations

import multiprocessing as mp
import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

MIB = 2**20
"""Bytes in a MiB."""

__all__ = ["MIB", "current_rss_bytes", "in_fresh_process", "peak_rss_bytes", "reset_peak_rss"]


def _status_kib(key: str) -> int | None:
    """The ``key:`` line of ``/proc/self/status`` in KiB (None: not Linux, or no such line)."""
    try:
        text = Path("/proc/self/status").read_text()
    except OSError:
        return None
    match = re.search(rf"^{key}:\s+(\d+) kB", text, re.MULTILINE)
    return int(match.group(1)) if match else None


def peak_rss_bytes() -> int:
    """The process's peak resident set size since start or the last :func:`reset_peak_rss` (``VmHWM``)."""
    kib = _status_kib("VmHWM")
    if kib is not None:
        return kib * 1024
    import resource

    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak if sys.platform == "darwin" else peak * 1024


def current_rss_bytes() -> int:
    """The process's resident set size now (``VmRSS``)."""
    kib = _status_kib("VmRSS")
    if kib is not None:
        return kib * 1024
    import psutil

    return int(psutil.Process().memory_info().rss)


def reset_peak_rss() -> bool:
    """Reset ``VmHWM`` to the current RSS (Linux: ``5`` into ``/proc/self/clear_refs``); False when not possible."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
    except OSError:
        return False
    return True


def in_fresh_process(target: Callable[..., None], *args: Any) -> Any:
    """Run ``target(*args, queue)`` in a newly spawned Python process and return what it puts on ``queue``: each
    measurement's peak memory starts from an interpreter of its own (the benchmarks' way to keep peaks apart).

    Raises:
        RuntimeError: the process ended without putting a result (its traceback is on stderr), naming ``target``
            and the exit code.
    """
    import queue as queues

    context = mp.get_context("spawn")
    results = context.Queue()
    process = context.Process(target=target, args=(*args, results))
    process.start()
    while True:
        try:
            result = results.get(timeout=1.0)
            break
        except queues.Empty:
            if not process.is_alive() and results.empty():
                process.join()
                raise RuntimeError(f"{getattr(target, '__name__', target)} ended with exit code {process.exitcode} "
                                   "before putting a result") from None
    process.join()
    return result
