"""What a long run shows while it works: its log lines and the progress bars of the libraries under it.

The recipes, the stage runner and the command line share these, so that a run prints ``[tag] message`` lines one way
and ``--no-progress`` (or a recipe's ``progress: false``) hides the same bars everywhere.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator


def log(message: str, tag: str = "adaptspeech") -> None:
    """Print ``[tag] message`` at once (a long run's log line; ``flush`` so that it shows under a pipe too)."""
    print(f"[{tag}] {message}", flush=True)


@contextlib.contextmanager
def library_progress_bars(enabled: bool) -> Iterator[None]:
    """``--no-progress`` (or a recipe's ``progress: false``) also hides the bars ``datasets`` (filter, map) and
    ``transformers`` (weight loading) draw; their previous state is restored afterwards."""
    import datasets
    from transformers.utils import logging as hf_logging

    if enabled:
        yield
        return
    had_datasets, had_hf = datasets.is_progress_bar_enabled(), hf_logging.is_progress_bar_enabled()
    datasets.disable_progress_bars()
    hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        if had_datasets:
            datasets.enable_progress_bars()
        if had_hf:
            hf_logging.enable_progress_bar()
