"""The parameter count of a model before it is built, and the refusal of one that cannot fit into memory.

``backbone_config.hidden_size: 1000000000000`` used to end in the allocator's traceback ("you tried to allocate
960000000000000 bytes"). :func:`check_model_size` first builds the model on PyTorch's ``meta`` device (shapes only,
no memory, no random numbers drawn: a seeded run is the same with or without the check) and counts its parameters;
a model whose float32 weights alone exceed the memory of this machine is refused with the figure. A tensor too large
for PyTorch even to describe (more than 2**63 elements) gives a lower bound: its own element count.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch

from ..errors import StageConfigError

BYTES_PER_PARAMETER = 4
"""float32 weights; training needs about four times that (gradients and two Adam moments)."""

SIZE_SETTINGS = ("hidden_size", "intermediate_size", "num_hidden_layers", "output_hidden_size", "conv_dim")
"""The backbone settings that set the parameter count, named in the refusal when the stage sets them."""

_OVERFLOW_SIZES = re.compile(r"sizes=\[([\d,\s]+)\]")


def machine_memory_bytes() -> int | None:
    """The memory of this machine (physical memory, or the cgroup limit when lower); None when unknown."""
    try:
        memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return None
    try:
        limit = Path("/sys/fs/cgroup/memory.max").read_text().strip()
    except OSError:
        limit = "max"
    if limit.isdigit():
        memory = min(memory, int(limit))
    return memory if memory > 0 else None


def count_parameters(model_class: type, config: Any) -> tuple[int, bool] | None:
    """``(parameters, exact)`` of ``model_class(config)``, built on the meta device.

    ``exact`` is False when a tensor is too large for PyTorch to describe: the count is then that tensor's element
    count, a lower bound. None when the model cannot be built on the meta device (the real construction then reports
    its own error).
    """
    try:
        with torch.device("meta"):
            model = model_class(config)
    except RuntimeError as err:
        sizes = _OVERFLOW_SIZES.search(str(err))
        if "overflow" not in str(err) or sizes is None:
            return None
        count = 1
        for size in sizes.group(1).split(","):
            count *= int(size)
        return count, False
    except Exception:  # the estimate is best effort: the real construction reports its own error
        return None
    return sum(p.numel() for p in model.parameters()), True


def human_bytes(count: float) -> str:
    """``194 kB``, ``15.6 GB``, ``1.2e+10 PB`` (decimal units)."""
    for unit in ("bytes", "kB", "MB", "GB", "TB"):
        if count < 1000:
            return f"{count:.3g} {unit}"
        count /= 1000
    return f"{count:.3g} PB"


def _human_count(count: int) -> str:
    return f"{count:,}" if count < 10**9 else f"{count:.3g}"


def check_model_size(
    model_class: type, config: Any, backbone_config: Mapping[str, Any] | None, memory: int | None = None
) -> None:
    """Refuse a model whose float32 weights would not fit into the memory of this machine.

    Args:
        model_class: the adaptspeech model class of the head.
        config: its ``AdaptSpeechConfig``.
        backbone_config: the stage's ``model.config.backbone_config`` (the size settings it sets are named).
        memory: bytes available (default: :func:`machine_memory_bytes`).

    Raises:
        StageConfigError: ``model.config.backbone_config (hidden_size: ...): the model would have N parameters ...``.
    """
    memory = machine_memory_bytes() if memory is None else memory
    counted = count_parameters(model_class, config) if memory is not None else None
    if counted is None:
        return
    parameters, exact = counted
    if parameters * BYTES_PER_PARAMETER <= memory:
        return
    given = {key: value for key, value in (backbone_config or {}).items() if key in SIZE_SETTINGS}
    where = "model.config.backbone_config" if backbone_config else "model.config"
    if given:
        where += f" ({', '.join(f'{key}: {value}' for key, value in sorted(given.items()))})"
    bound = "" if exact else "at least "
    raise StageConfigError(
        f"{where}: the model would have {bound}{_human_count(parameters)} parameters "
        f"({bound}{human_bytes(parameters * BYTES_PER_PARAMETER)} in float32), more than the memory of this machine "
        f"({human_bytes(memory)}); make the model smaller"
    )
