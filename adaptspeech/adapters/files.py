"""MMS-style adapter files: ``adapter.<lang>.safetensors`` + ``adapter.<lang>.json``, and ``fusion.*`` likewise.

Tensor keys are ``layers.<i>.<param>`` (e.g. ``layers.3.down.weight``), plus ``head.<param>`` when the CTC head
is saved with the adapter (a language with its own vocabulary). The JSON records the adapter settings, the layers,
the hidden size and the backbone it was trained on, so a mismatch is reported before any tensor is touched.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import torch
from huggingface_hub import hf_hub_download
from safetensors.torch import load_file, save_file

ADAPTER_WEIGHTS = "adapter.{}.safetensors"
ADAPTER_CONFIG = "adapter.{}.json"
FUSION_WEIGHTS = "fusion.safetensors"
FUSION_CONFIG = "fusion.json"


class AdapterLoadError(ValueError):
    """An adapter file that does not fit the model; the message names the file, the key and both shapes."""


def write_weights(folder: str | os.PathLike, weights_name: str, tensors: dict[str, torch.Tensor]) -> Path:
    """``folder/weights_name`` (safetensors, ``format: pt`` as transformers writes) from ``tensors``."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    save_file(
        {k: v.detach().cpu().contiguous() for k, v in tensors.items()},
        str(folder / weights_name),
        metadata={"format": "pt"},
    )
    return folder / weights_name


def write_tensors(
    folder: str | os.PathLike,
    weights_name: str,
    config_name: str,
    tensors: dict[str, torch.Tensor],
    meta: dict[str, Any],
) -> Path:
    """``folder/weights_name`` plus its JSON settings ``folder/config_name``."""
    path = write_weights(folder, weights_name, tensors)
    (Path(folder) / config_name).write_text(json.dumps(meta, indent=2, sort_keys=True) + "\n")
    return path


def resolve_file(
    path_or_repo: str | os.PathLike,
    filename: str,
    revision: str | None = None,
    token: str | bool | None = None,
    cache_dir: str | None = None,
) -> Path:
    """A local folder's file, or the file downloaded from a Hub repo; raises FileNotFoundError naming both."""
    local = Path(path_or_repo)
    if local.is_dir():
        candidate = local / filename
        if not candidate.is_file():
            available = sorted(p.name for p in local.iterdir() if p.name.startswith(("adapter.", "fusion.")))
            raise FileNotFoundError(
                f"{candidate} not found; adapter files in {local}: {', '.join(available) or 'none'}"
            )
        return candidate
    if local.exists():
        raise FileNotFoundError(f"{local} is a file, expected a folder holding {filename}")
    try:
        return Path(hf_hub_download(str(path_or_repo), filename, revision=revision, token=token, cache_dir=cache_dir))
    except Exception as err:  # network errors, missing repo or file: one clear message
        raise FileNotFoundError(
            f"could not get {filename} from {path_or_repo!r} (not a local folder; Hub download failed: "
            f"{type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''})"
        ) from err


def read_tensors(path: Path) -> dict[str, torch.Tensor]:
    try:
        return load_file(str(path))
    except Exception as err:
        raise AdapterLoadError(f"{path} is not a readable safetensors file: {err}") from err


def read_meta(path: Path) -> dict[str, Any]:
    try:
        return json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as err:
        raise AdapterLoadError(f"{path} is not a readable adapter config: {err}") from err


def check_shapes(expected: dict[str, tuple[int, ...]], source: dict[str, torch.Tensor], origin: Path) -> None:
    """Raise :class:`AdapterLoadError` unless ``source`` has exactly the keys of ``expected``, each of its shape."""
    missing = sorted(set(expected) - set(source))
    unexpected = sorted(set(source) - set(expected))
    if missing or unexpected:
        raise AdapterLoadError(
            f"{origin} does not fit this model: missing keys {missing[:5]}{'...' if len(missing) > 5 else ''}, "
            f"unexpected keys {unexpected[:5]}{'...' if len(unexpected) > 5 else ''}"
        )
    for key, tensor in sorted(source.items()):
        if tuple(tensor.shape) != tuple(expected[key]):
            raise AdapterLoadError(
                f"{origin}: tensor {key!r} has shape {tuple(tensor.shape)} but the model expects "
                f"{tuple(expected[key])}"
            )


def copy_tensors(target: dict[str, torch.Tensor], source: dict[str, torch.Tensor]) -> None:
    """Copy ``source`` into the live tensors ``target`` (same keys and shapes; checked by :func:`check_shapes`),
    converting to each target's dtype and device."""
    with torch.no_grad():
        for key, tensor in source.items():
            target[key].copy_(tensor.to(dtype=target[key].dtype, device=target[key].device))
