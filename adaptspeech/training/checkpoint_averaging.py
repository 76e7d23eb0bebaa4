"""A better teacher from one run: the weights of its top-N checkpoints by dev CER, averaged (TopIPL, NeMo 2025;
checkpoint averaging in general: Vaswani et al. 2017, Izmailov et al. 2018).

A stage that evaluates and saves at the same steps (``training.eval_steps == training.save_steps``, keeping its
checkpoints: ``save_total_limit: null``) leaves in its checkpoint folder ``checkpoint-<step>/`` folders whose
``trainer_state.json`` logs the dev CER of that step (``eval_cer``). :func:`ranked_checkpoints` orders them by it,
:func:`average_state_dicts` averages tensors, and :func:`average_top_checkpoints` writes the average of the best N as a
model folder (the run's config and processor).
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file
from transformers import AutoProcessor

from ..saved_model import load_saved_model
from .stage import save_final_model

CHECKPOINT = re.compile(r"^checkpoint-(\d+)$")
METRIC = "eval_cer"


def ranked_checkpoints(checkpoints: str | Path, metric: str = METRIC) -> list[tuple[Path, float]]:
    """``[(checkpoint folder, its metric)]`` of the ``checkpoint-<step>`` folders in ``checkpoints`` whose
    ``trainer_state.json`` logs ``metric`` at that step, lowest first (a tie: the later step first)."""
    ranked = []
    for folder in Path(checkpoints).iterdir() if Path(checkpoints).is_dir() else []:
        match = CHECKPOINT.match(folder.name)
        state = folder / "trainer_state.json"
        if not match or not state.is_file():
            continue
        step = int(match.group(1))
        logged = [e[metric] for e in json.loads(state.read_text())["log_history"]
                  if e.get("step") == step and metric in e]
        if logged:
            ranked.append((folder, float(logged[-1]), step))
    return [(folder, value) for folder, value, _ in sorted(ranked, key=lambda r: (r[1], -r[2]))]


def average_state_dicts(state_dicts: Sequence[dict[str, torch.Tensor]]) -> dict[str, torch.Tensor]:
    """The element-wise mean of floating-point tensors over ``state_dicts`` (accumulated in float64, returned in each
    tensor's dtype); other tensors (step counters, integer buffers) are the first's.

    Raises:
        ValueError: no state dict, or state dicts of other keys or shapes.
    """
    if not state_dicts:
        raise ValueError("no state dict to average")
    first = state_dicts[0]
    for index, other in enumerate(state_dicts[1:], start=1):
        if other.keys() != first.keys():
            raise ValueError(f"state dict {index} has other keys than the first: "
                             f"{sorted(set(other) ^ set(first))[:5]}")
        for key, value in other.items():
            if value.shape != first[key].shape:
                raise ValueError(f"state dict {index}: {key} is {tuple(value.shape)}, the first's "
                                 f"{tuple(first[key].shape)}")
    out = {}
    for key, value in first.items():
        if value.is_floating_point():
            total = sum(sd[key].double() for sd in state_dicts)
            out[key] = (total / len(state_dicts)).to(value.dtype)
        else:
            out[key] = value.clone()
    return out


def _weights(folder: Path) -> dict[str, torch.Tensor]:
    files = sorted(folder.glob("*.safetensors"))
    if not files:
        raise ValueError(f"{folder}: no model weights (*.safetensors)")
    state: dict[str, torch.Tensor] = {}
    for file in files:
        state.update(load_file(str(file)))
    return state


def average_top_checkpoints(checkpoints: str | Path, top_n: int, model_dir: str | Path, out_dir: str | Path,
                            metric: str = METRIC) -> dict[str, Any]:
    """Average the weights of the ``top_n`` checkpoints of ``checkpoints`` with the lowest ``metric`` and write them
    as a model folder ``out_dir`` (the architecture and processor of the run's final ``model_dir``; ``out_dir`` may
    be ``model_dir``, replaced whole once written).

    Returns:
        ``{"averaged": [checkpoint names], "metrics": [their metric], "metric": metric}``.

    Raises:
        ValueError: fewer than ``top_n`` checkpoints log the metric (naming the folder and how many do).
    """
    ranked = ranked_checkpoints(checkpoints, metric)
    if len(ranked) < top_n:
        raise ValueError(f"{checkpoints}: {len(ranked)} checkpoints log {metric}, {top_n} are to be averaged (evaluate "
                         "and save at the same steps, keeping the checkpoints: save_total_limit null)")
    chosen = ranked[:top_n]
    averaged = average_state_dicts([_weights(folder) for folder, _ in chosen])
    model = load_saved_model(model_dir, progress_bar=False)
    processor = AutoProcessor.from_pretrained(str(model_dir))
    _, unexpected = model.load_state_dict(averaged, strict=False)
    if unexpected:
        raise ValueError(f"{chosen[0][0]}: its weights do not fit {model_dir} (unexpected: {unexpected[:5]})")
    save_final_model(model, processor, Path(out_dir), Path(checkpoints))
    return {"averaged": [folder.name for folder, _ in chosen], "metrics": [value for _, value in chosen],
            "metric": metric}

