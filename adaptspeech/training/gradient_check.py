"""Stop a run in which a parameter reported as trainable receives no gradient.

A trainable adapter that is not active, a trainable fusion that is switched off, or a layer whose inputs do not
require grad under re-entrant checkpointing: each trains "successfully", reports the parameters as trainable, and
leaves them at their initial values. :class:`GradientCheckCallback` looks at the gradients just before each of the
first ``steps`` optimizer steps (after gradient accumulation and, under DDP, after the all-reduce, so every rank sees
the same gradients) and stops with one line naming the parameters' group (``adapter:ro``, ``fusion``, ``head`` ...).

A parameter is only *expected* to have a gradient in a step when the step used it:

* LayerDrop (``layerdrop > 0``) skips whole encoder layers at random: parameters inside a layer that no forward pass
  of the step called (the layer's pre-forward hook did not fire) are excused for that step;
* per-utterance routing over several languages: the adapter of a language that no utterance of the step (on this
  process) belongs to is excused for that step; the step's ``lang_ids`` are passed in by the trainer
  (:meth:`GradientCheckCallback.observe_batch`).

Everything else must have a gradient (``.grad is not None``) in every checked step. ``steps=0`` disables the check
(stage setting ``model.gradient_check_steps``; default 10). DeepSpeed and FSDP keep gradients outside the parameters:
the check is skipped there.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable
from typing import Any

import torch
from transformers import TrainerCallback, TrainerControl, TrainerState, TrainingArguments

from ..errors import TrainingError
from .callbacks import unwrap

DEFAULT_GRADIENT_CHECK_STEPS = 10


class GradientCheckCallback(TrainerCallback):
    """Check, before each of the first ``steps`` optimizer steps, that every trainable parameter the step used
    received a gradient.

    Args:
        steps: how many optimizer steps to check (0: none).
        any_process: ``flag -> flag or-ed over all processes`` (the trainer's), so that every process stops together
            under DDP; default: this process alone.
    """

    def __init__(
        self, steps: int = DEFAULT_GRADIENT_CHECK_STEPS, any_process: Callable[[bool], bool] | None = None
    ) -> None:
        self.steps = int(steps)
        self.any_process = any_process or (lambda flag: flag)
        self.checked = 0
        self.model: Any = None
        self.layer_of: dict[str, int] = {}
        self.called_layers: set[int] = set()
        self.languages_seen: set[int] = set()
        self.hooks: list[Any] = []

    # --- set-up --------------------------------------------------------------------------------------------------
    def on_train_begin(self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: Any):
        self.checked = 0  # every call of train() (a resumed run too) checks its first steps
        if self.steps <= 0 or args.deepspeed or args.fsdp:
            self.steps = 0
            return control
        self.model = unwrap(kwargs["model"])
        self._remove_hooks()
        self.layer_of.clear()
        self._hook_layers()
        return control

    def _hook_layers(self) -> None:
        layers = self.model._encoder_layers() if hasattr(self.model, "_encoder_layers") else None
        if layers is None:
            return
        prefix = next((name for name, module in self.model.named_modules() if module is layers), None)
        if prefix is None:
            return
        for index, layer in enumerate(layers):
            for name, _ in layer.named_parameters():
                self.layer_of[f"{prefix}.{index}.{name}"] = index
            self.hooks.append(layer.register_forward_pre_hook(functools.partial(self._layer_called, index)))

    def _layer_called(self, index: int, module: torch.nn.Module, args: Any) -> None:
        if module.training:  # evaluation between two training steps does not count
            self.called_layers.add(index)

    def _remove_hooks(self) -> None:
        for hook in self.hooks:
            hook.remove()
        self.hooks.clear()

    def observe_batch(self, inputs: dict[str, Any]) -> None:
        """Record the languages of a micro-batch (its ``lang_ids``) for the step it belongs to."""
        lang_ids = inputs.get("lang_ids")
        if self.checked < self.steps and isinstance(lang_ids, torch.Tensor):
            self.languages_seen.update(int(i) for i in lang_ids.reshape(-1).tolist())

    # --- the check -----------------------------------------------------------------------------------------------
    def _routes_per_utterance(self) -> bool:
        config = self.model.config
        return len(getattr(config, "active_languages", []) or []) > 1 and not getattr(config, "fusion_active", False)

    def _expected(self, name: str, absent_languages: set[str]) -> bool:
        layer = self.layer_of.get(name)
        if layer is not None and layer not in self.called_layers:
            return False  # LayerDrop skipped this layer in every micro-batch of the step
        group = self.model._group_of(name) if hasattr(self.model, "_group_of") else ""
        return not (group.startswith("adapter:") and group.split(":", 1)[1] in absent_languages)

    def _absent_languages(self) -> set[str]:
        if not self._routes_per_utterance() or not self.languages_seen:
            return set()
        languages = list(getattr(self.model, "adapter_languages", []))
        seen = {languages[i] for i in self.languages_seen if 0 <= i < len(languages)}
        return set(languages) - seen

    def missing_gradients(self) -> list[str]:
        """Trainable parameters that this step used but that have no gradient."""
        absent = self._absent_languages()
        return [
            name
            for name, param in self.model.named_parameters()
            if param.requires_grad and param.grad is None and self._expected(name, absent)
        ]

    def on_pre_optimizer_step(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: Any
    ):
        if self.checked >= self.steps or self.model is None:
            return control
        missing = self.missing_gradients()
        self.checked += 1
        self.called_layers.clear()
        self.languages_seen.clear()
        if self.checked >= self.steps:
            self._remove_hooks()
        if self.any_process(bool(missing)):
            self._remove_hooks()
            if not missing:
                raise TrainingError(
                    f"step {state.global_step + 1}: another process found a trainable parameter without gradient "
                    "(see its message)"
                )
            raise TrainingError(self.message(state.global_step + 1, missing))
        return control

    def on_train_end(self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: Any):
        self._remove_hooks()
        return control

    def message(self, step: int, missing: Iterable[str]) -> str:
        groups: dict[str, list[str]] = {}
        for name in missing:
            group = self.model._group_of(name) if hasattr(self.model, "_group_of") else "parameters"
            groups.setdefault(group, []).append(name)
        parts = [
            f"{group} ({len(names)} tensor{'s' if len(names) > 1 else ''}, e.g. {names[0]})"
            for group, names in groups.items()
        ]
        verb = "receives" if len(groups) == 1 else "receive"
        return (
            f"step {step}: {', '.join(parts)} {verb} no gradient although reported as trainable: the forward pass does "
            "not use it (an adapter that is not active, a fusion that is switched off?); check model.active_languages "
            "and model.trainable (model.gradient_check_steps=0 disables this check)"
        )
