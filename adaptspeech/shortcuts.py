"""Data-dependent shortcuts that a graph being exported must not take.

Eager code skips work when a tensor tells it that the work changes nothing (no padding in the batch: no mask to
apply; no empty row: nothing to zero). ``torch.export`` cannot branch on a tensor's value, and a trace would freeze
the branch taken for its example input, so while a graph is exported (:func:`torch.compiler.is_exporting`) these
helpers answer so that the general path, correct for every input, is taken."""

from __future__ import annotations

import torch


def known_true(condition: torch.Tensor) -> bool:
    """``bool(condition)`` in eager mode; False while exporting (so that a shortcut for "all true" is not taken)."""
    return not torch.compiler.is_exporting() and bool(condition)


def maybe_true(condition: torch.Tensor) -> bool:
    """``bool(condition)`` in eager mode; True while exporting (so that the fix-up for "some true" always runs)."""
    return torch.compiler.is_exporting() or bool(condition)
