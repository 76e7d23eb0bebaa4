"""Trainer callbacks: the guide-loss schedule, adapter-only checkpoints and the stage spec of each checkpoint."""

from __future__ import annotations

import json
import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from safetensors.torch import save_file
from transformers import TrainerCallback, TrainerControl, TrainerState, TrainingArguments

from ..errors import TrainingError
from .resume import STAGE_SPEC_FILE, save_stage_spec

ADAPTER_ONLY_WEIGHTS = "trainable.safetensors"
ADAPTER_ONLY_INDEX = "trainable.json"


def unwrap(model: Any) -> Any:
    """The adaptspeech model behind DDP / accelerate / peft wrappers."""
    while hasattr(model, "module"):
        model = model.module
    return model


class FusionGuideScheduleCallback(TrainerCallback):
    """Guide-loss weight at step ``s``: ``guide_weight * guide_decay ** s``.

    Computed from the global step (not multiplied in place), so a resumed run continues the schedule exactly.
    """

    def on_step_begin(self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: Any):
        model = unwrap(kwargs["model"])
        fusion = model.config.fusion_settings() if hasattr(model.config, "fusion_settings") else None
        if fusion is not None:
            model.fusion_guide_weight = fusion.guide_weight * fusion.guide_decay**state.global_step
        return control


class AdapterCheckpointCallback(TrainerCallback):
    """Beside each full checkpoint, write the trainable tensors alone (``trainable.safetensors``) and every trained
    language adapter / fusion in the MMS-style files of :meth:`save_adapter` / :meth:`save_fusion`.

    The adapter-only files are what a user ships or pushes; the full checkpoint is what ``resume_from_checkpoint``
    needs (optimizer, scheduler, RNG and sampler state).
    """

    def on_save(self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: Any):
        if not state.is_world_process_zero:
            return control
        model = unwrap(kwargs["model"])
        folder = Path(args.output_dir) / f"checkpoint-{state.global_step}"
        try:
            write_adapter_only_checkpoint(model, folder)
        except OSError as err:
            for name in (ADAPTER_ONLY_INDEX, ADAPTER_ONLY_WEIGHTS):
                (folder / name).unlink(missing_ok=True)
            shutil.rmtree(folder / "adapters", ignore_errors=True)
            raise TrainingError(
                f"step {state.global_step}: writing the adapter-only copy into {folder} failed "
                f"({err.strerror or err}); its partial files were removed, the full checkpoint {folder} is complete "
                "(resume with --resume)"
            ) from err
        return control


class StageSpecCheckpointCallback(TrainerCallback):
    """Write the stage spec of the run into each checkpoint (``checkpoint-N/stage_spec.json``): ``--resume`` compares
    it with the resuming run's spec, so a checkpoint of another run (another folder's, or one left in this folder by
    an earlier run) is not continued with other settings.

    Args:
        spec: the stage spec as plain data (:meth:`StageSpec.to_dict`).
    """

    def __init__(self, spec: Mapping[str, Any]) -> None:
        self.spec = dict(spec)

    def on_save(self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: Any):
        if not state.is_world_process_zero:
            return control
        folder = Path(args.output_dir) / f"checkpoint-{state.global_step}"
        try:
            save_stage_spec(folder, self.spec)
        except OSError as err:
            (folder / STAGE_SPEC_FILE).with_suffix(".json.tmp").unlink(missing_ok=True)
            raise TrainingError(
                f"step {state.global_step}: writing {folder / STAGE_SPEC_FILE} failed ({err.strerror or err}); the "
                f"full checkpoint {folder} is complete (resume with --resume)"
            ) from err
        return control


def write_adapter_only_checkpoint(model: Any, folder: Path) -> Path:
    """Write the trainable tensors of ``model`` and its trained adapters / fusion into ``folder``."""
    folder.mkdir(parents=True, exist_ok=True)
    trainable = {name: p.detach().cpu().contiguous() for name, p in model.named_parameters() if p.requires_grad}
    save_file(trainable, str(folder / ADAPTER_ONLY_WEIGHTS), metadata={"format": "pt"})
    trained_languages: list[str] = []
    if hasattr(model, "trainable_parameters"):
        groups = model.trainable_parameters()["groups"]
        trained_languages = [
            g.split(":", 1)[1] for g, v in groups.items() if g.startswith("adapter:") and v["trainable"]
        ]
        for language in trained_languages:
            model.save_adapter(language, folder / "adapters")
        if groups.get("fusion", {}).get("trainable"):
            model.save_fusion(folder / "adapters")
    (folder / ADAPTER_ONLY_INDEX).write_text(
        json.dumps(
            {
                "tensors": sorted(trainable),
                "num_parameters": sum(t.numel() for t in trainable.values()),
                "languages": trained_languages,
            },
            indent=2,
        )
        + "\n"
    )
    return folder / ADAPTER_ONLY_WEIGHTS
