"""Which torch device a model runs on: the best this machine has (CUDA, then MPS, then the CPU), or a named one checked
against the machine. The command line (``--device``) and the recipes (``evaluation.device``) choose here."""

from __future__ import annotations

import torch

__all__ = ["DeviceError", "available_device_types", "best_device", "choose_device"]


class DeviceError(ValueError):
    """A device name torch does not know, or a device this machine lacks; one line naming the setting."""


def _mps_available() -> bool:
    mps = getattr(torch.backends, "mps", None)
    return mps is not None and mps.is_available()


def available_device_types() -> list[str]:
    """The device types this machine has: ``cpu``, then ``cuda`` and ``mps`` when available."""
    return ["cpu", *(["cuda"] if torch.cuda.is_available() else []), *(["mps"] if _mps_available() else [])]


def best_device() -> torch.device:
    """CUDA if available, else MPS, else the CPU (what the Trainer picks)."""
    return torch.device("cuda" if torch.cuda.is_available() else "mps" if _mps_available() else "cpu")


def choose_device(name: str | None, setting: str = "--device") -> torch.device:
    """The ``torch.device`` named ``name`` (``None``: :func:`best_device`).

    Args:
        name: ``cpu``, ``cuda``, ``cuda:N`` or ``mps``.
        setting: the option or setting that named it, the start of every message (``--device``,
            ``evaluation.device``).

    Raises:
        DeviceError: a name torch does not know, a device type other than cpu / cuda / mps, or a device this machine
            does not have (``cuda:2`` on a machine with two GPUs); one line naming it.
    """
    if name is None:
        return best_device()
    hint = f"available here: {', '.join(available_device_types())}"
    try:
        device = torch.device(name.strip())
    except (RuntimeError, ValueError) as err:
        raise DeviceError(f"{setting} {name!r}: not a device ({' '.join(str(err).split())}); {hint}") from None
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise DeviceError(f"{setting} {name!r}: CUDA is not available on this machine; {hint}")
        count = torch.cuda.device_count()
        if device.index is not None and device.index >= count:
            raise DeviceError(f"{setting} {name!r}: this machine has {count} CUDA device(s) (cuda:0..cuda:{count - 1})")
    elif device.type == "mps" and not _mps_available():
        raise DeviceError(f"{setting} {name!r}: MPS is not available on this machine; {hint}")
    elif device.type not in ("cpu", "cuda", "mps"):
        raise DeviceError(f"{setting} {name!r}: unsupported device type {device.type!r}; {hint}")
    return device
