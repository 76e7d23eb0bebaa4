"""DDP-safe training defaults for adaptspeech models (many GPUs, or several CPU processes with gloo).

Two known wav2vec2 traps, and what :func:`ddp_training_defaults` does about them:

* **Unused parameters.** ``DistributedDataParallel`` waits for a gradient of every trainable parameter; a parameter
  that took no part in the loss makes it fail ("Expected to have finished reduction in the prior iteration ...")
  unless ``find_unused_parameters=True``. adaptspeech models leave parameters unused when LayerDrop skips whole
  encoder layers (their adapters with them), when several languages are routed per utterance (a batch without some
  language never reaches its adapter), when a trainable adapter is not active, or when wav2vec2's
  ``masked_spec_embed`` trains with ``mask_time_prob=0``. ``transformers.Trainer`` already passes
  ``find_unused_parameters=True`` by default, *except* with activation (gradient) checkpointing, where it switches
  it off; so the setting is made explicit whenever :func:`unused_parameter_reasons` finds a reason.
  Besides these, transformers' own modules can hold parameters that their forward never uses (in 5.x the
  wav2vec2-conformer encoder builds ``pos_conv_embed`` and never calls it); :func:`modules_never_called` finds those
  with one eval-mode forward pass when a probe batch is given (``run_stage`` gives one when ``WORLD_SIZE > 1``).
* **Activation checkpointing with frozen inputs.** The re-entrant ``torch.utils.checkpoint`` only back-propagates
  into a checkpointed layer when one of its *inputs* requires grad. With a frozen feature encoder (or a frozen
  backbone and adapters inside the layers) nothing does, so those parameters silently get no gradient; and DDP's
  unused-parameter search is known not to work with the re-entrant backward (which is why the Trainer turns it off
  under checkpointing). The non-re-entrant implementation (``use_reentrant=False``) has neither problem (no
  ``enable_input_require_grads`` hook is needed), so it is set explicitly and ``use_reentrant=True`` is refused with a
  one-line explanation.

An explicit ``ddp_find_unused_parameters`` in the stage's ``training`` section always wins.
"""

from __future__ import annotations

import json
from typing import Any

import torch

from ..errors import StageConfigError

CHECKPOINTING_KEYS = (("activation_checkpointing", "activation_checkpointing_kwargs"),
                      ("gradient_checkpointing", "gradient_checkpointing_kwargs"))
"""``TrainingArguments`` flags of activation checkpointing and their kwargs (the second pair: deprecated aliases)."""


def unused_parameter_reasons(model: Any) -> list[str]:
    """Why some trainable parameters of ``model`` may get no gradient in a training step (empty: none known).

    Args:
        model: an adaptspeech model (``AdaptSpeechForCTC`` / ``AdaptSpeechForJointCTCAttention``), with its
            trainable groups already set.
    """
    config = model.config
    reasons: list[str] = []
    backbone_config = getattr(config, "backbone_config", None)
    layerdrop = float(getattr(backbone_config, "layerdrop", 0.0) or 0.0)
    if layerdrop > 0:
        reasons.append(f"layerdrop={layerdrop:g} skips whole encoder layers (and their adapters) at random")
    active = list(getattr(config, "active_languages", []) or [])
    fusion_active = bool(getattr(config, "fusion_active", False))
    if len(active) > 1 and not fusion_active:
        reasons.append(f"per-utterance routing over {active}: a batch without some language leaves its adapter unused")
    if hasattr(model, "trainable_parameters"):
        groups = model.trainable_parameters()["groups"]
        reached = set((config.fusion or {}).get("languages", [])) if fusion_active else set(active)
        idle = sorted(
            g.split(":", 1)[1]
            for g, v in groups.items()
            if g.startswith("adapter:") and v["trainable"] and g.split(":", 1)[1] not in reached
        )
        if idle:
            reasons.append(f"trainable adapter(s) {idle} are not active")
    mask_time_prob = float(getattr(backbone_config, "mask_time_prob", 0.0) or 0.0)
    spec_augment = bool(getattr(backbone_config, "apply_spec_augment", True))
    for name, param in model.named_parameters():
        if name.endswith("masked_spec_embed") and param.requires_grad and (mask_time_prob == 0 or not spec_augment):
            reasons.append("masked_spec_embed trains but time masking is off (mask_time_prob=0)")
            break
    return reasons


def modules_never_called(model: Any, batch: dict[str, torch.Tensor]) -> list[str]:
    """Names of the modules that hold trainable parameters of their own but are never called by one forward pass.

    The pass runs in eval mode without gradients (no dropout, LayerDrop or SpecAugment, no random numbers drawn, no
    BatchNorm statistics updated), so it finds parameters that no step can use, not the ones that a step may skip.

    Args:
        model: the model about to be trained.
        batch: a collated batch of a few training rows (the model's forward keyword arguments).
    """
    called: set[int] = set()
    handles = [m.register_forward_pre_hook(lambda module, args: called.add(id(module))) for m in model.modules()]
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            model(**batch)
    finally:
        for handle in handles:
            handle.remove()
        model.train(was_training)
    return [
        name
        for name, module in model.named_modules()
        if id(module) not in called and any(p.requires_grad for p in module.parameters(recurse=False))
    ]


def idle_backbone_parameters(model: Any, batch: dict[str, torch.Tensor]) -> list[str]:
    """Trainable backbone parameters that the backbone's own forward never uses, whatever the data.

    These are modules transformers builds but does not call (:func:`modules_never_called`, e.g. ``pos_conv_embed``
    of the wav2vec2-conformer encoder) and wav2vec2's ``masked_spec_embed`` when time masking is off. Reported as
    trainable they would receive no gradient; ``run_stage`` freezes them and lists them in ``stage_summary.json``.
    Adapters, fusion and head parameters are never in the list: an unused one of those is a configuration error.
    """
    group_of = getattr(model, "_group_of", lambda name: "backbone" if name.startswith("backbone.") else "head")
    idle_modules = modules_never_called(model, batch)
    backbone_config = getattr(model.config, "backbone_config", None)
    masking = float(getattr(backbone_config, "mask_time_prob", 0.0) or 0.0) > 0 and bool(
        getattr(backbone_config, "apply_spec_augment", True)
    )
    idle = []
    for name, param in model.named_parameters():
        if not param.requires_grad or group_of(name) != "backbone":
            continue
        owner = name.rsplit(".", 1)[0]
        if owner in idle_modules or (name.endswith("masked_spec_embed") and not masking):
            idle.append(name)
    return idle


def _checkpointing_kwargs(training: dict[str, Any]) -> tuple[bool, str, dict[str, Any]]:
    """``(enabled, kwargs key to write, kwargs)`` of activation checkpointing in a ``training`` section.

    The kwargs key is the one the section already uses, else the one matching the flag it uses.
    """
    enabled = any(training.get(flag) for flag, _ in CHECKPOINTING_KEYS)
    for _, kwargs_key in CHECKPOINTING_KEYS:
        value = training.get(kwargs_key)
        if not value:
            continue
        if isinstance(value, str):
            try:
                value = json.loads(value)
            except json.JSONDecodeError as err:
                raise StageConfigError(f"training.{kwargs_key}: not a JSON object ({err})") from None
        if not isinstance(value, dict):
            raise StageConfigError(f"training.{kwargs_key} must be a mapping, got {type(value).__name__}")
        return enabled, kwargs_key, dict(value)
    flags = [kwargs_key for flag, kwargs_key in CHECKPOINTING_KEYS if training.get(flag)]
    return enabled, (flags or [CHECKPOINTING_KEYS[0][1]])[0], {}


def ddp_training_defaults(
    model: Any, training: dict[str, Any], probe_batch: dict[str, torch.Tensor] | None = None
) -> tuple[dict[str, Any], list[str]]:
    """Fill the DDP-relevant ``TrainingArguments`` fields of ``training`` for ``model`` (see the module docstring).

    Args:
        model: the model about to be trained (trainable groups set).
        training: ``TrainingArguments`` keyword arguments; not modified.
        probe_batch: a collated batch of training rows: also look for modules the forward never calls
            (:func:`modules_never_called`); None skips that pass.

    Returns:
        ``(training with the defaults filled in, the reasons why parameters may go unused)``.

    Raises:
        StageConfigError: activation checkpointing with ``use_reentrant: true``.
    """
    training = dict(training)
    enabled, key, kwargs = _checkpointing_kwargs(training)
    if enabled:
        if kwargs.get("use_reentrant") is True:
            raise StageConfigError(
                f"training.{key}: use_reentrant=true is not supported (with a frozen feature encoder or backbone no "
                "checkpointed input requires grad, so the layers inside get no gradient, and DDP with unused "
                "parameters fails); remove it or set use_reentrant: false"
            )
        kwargs["use_reentrant"] = False
        training[key] = kwargs
    reasons = unused_parameter_reasons(model)
    if probe_batch is not None:
        idle = modules_never_called(model, probe_batch)
        if idle:
            shown = ", ".join(idle[:3]) + (f" and {len(idle) - 3} more" if len(idle) > 3 else "")
            reasons.append(f"the forward pass never calls {shown}")
    if reasons and training.get("ddp_find_unused_parameters") is None:
        training["ddp_find_unused_parameters"] = True
    return training, reasons
