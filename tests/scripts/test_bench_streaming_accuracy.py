"""scripts/bench_streaming_accuracy.py: the streamed figures' relative change is against the full context of the
clips that were streamed, not of the whole test set."""

from __future__ import annotations

import sys

import pytest
from helpers.paths import REPO

sys.path.insert(0, str(REPO / "scripts"))

import bench_streaming_accuracy


def test_streamed_change_is_against_the_streamed_clips_full_context() -> None:
    results = {
        "systems": {"base": [10.0, 11.0, 12.0]},  # all clips: full context, 640, 320 ms
        "streamed": {"base": [13.2, 14.4]},  # every second clip, streamed at 640 and 320 ms
        "streamed_clips": {"base": [12.0, 13.2, 14.4]},  # those clips: full context and chunk-masked
    }
    assert bench_streaming_accuracy.streamed_change(results, "base") == pytest.approx([10.0, 20.0])
