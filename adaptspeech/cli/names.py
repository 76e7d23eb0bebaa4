"""Names the parsers offer from registries whose modules import PyTorch, spelled out here so that building and
showing a parser imports no torch, transformers or peft (``adaptspeech --help``, ``adaptspeech prepare common-voice
--help``). A test holds each table equal to its registry (tests/cli/test_cli_startup.py)."""

from __future__ import annotations

FEATURE_TYPE_NAMES: tuple[str, ...] = ("fbank", "stacked_fbank", "waveform")
"""``--feature-type``: the names of :data:`adaptspeech.data.feature_types.FEATURE_TYPES`, in its order."""
