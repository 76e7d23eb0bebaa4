"""Stock PEFT LoRA as a per-language adapter type (``add_language_adapter(lang, adapter_type="lora", lora_r=8)``):
its settings (:class:`LoraAdapterConfig`), its type (:class:`LoraType`) and the injection into the encoder.

Each LoRA language is one peft adapter, named by its language code, injected with peft's own
:class:`~peft.LoraConfig` and :func:`~peft.inject_adapter_in_model` into ``model.backbone``. Only the modules
named in ``lora_target_modules`` (last name component, e.g. ``q_proj`` / ``v_proj`` of wav2vec2, ``linear_q``
/ ``linear_v`` of the conformer attention) inside the encoder layers listed by
``model.config.layers_with_adapters()`` are targeted, never modules of the language-adapter blocks (whose
SimAdapter also has a ``linear_q`` and a ``linear_v``). The wrapped projections keep peft's parameter names
(``...q_proj.base_layer.weight``, ``...q_proj.lora_A.<lang>.weight``), so ``save_pretrained`` /
``from_pretrained`` round-trip: the config lists the LoRA languages and rebuilds the same wrappers before the
weights are loaded.

Which LoRA adapters run follows ``model.routing``, with the meaning the bottleneck blocks give it (see
:mod:`adaptspeech.adapters.block`):

* no active LoRA language, or the fusion active (it fuses bottleneck adapters only): the wrapped projections
  return their base output unchanged;
* one active language, a LoRA one: ``W x + (lora_alpha / lora_r) B A x`` with that language's ``A`` and ``B``;
* several active languages (LoRA or not): **per-utterance routing**, not peft's sum. Each utterance goes
  through the LoRA of its own language, given per batch as ``lang_ids``; utterances of a language without
  LoRA, or of an inactive one, get the base projection. "Several active languages" thus means the same for
  both adapter types, and a multilingual batch can mix bottleneck and LoRA languages. It runs on peft's own
  mixed-batch path (the ``adapter_names`` argument of peft's LoRA layers), fed by a forward pre-hook; without
  ``lang_ids`` the forward raises a ``ValueError``, as the bottleneck blocks do. Summing several languages'
  LoRA deltas (what peft does with several active adapters) is not offered: it has no meaning for
  per-language adapters.

A call routed by a :class:`~adaptspeech.adapters.routing.RoutingOverride` (automatic language routing) never touches
peft's layer state: the pre-hook passes the override's languages as peft's per-call ``adapter_names`` (every row to
the override's language, or ``"__base__"``), and peft's active adapters (the model's settings) are ignored for that
call.

Switching the active languages never changes ``requires_grad`` (peft's ``set_adapter`` would): trainability is
decided by ``set_trainable`` alone. Adding a LoRA language leaves the trainability of every existing parameter
as it was; the new LoRA weights start trainable, like a new bottleneck adapter.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import Any

import torch
from peft import LoraConfig, inject_adapter_in_model
from peft.tuners.lora import LoraLayer
from peft.tuners.tuners_utils import BaseTunerLayer
from torch import nn

from ..settings import is_int
from .adapter_types import ADAPTER_MODULE_NAME, ADAPTER_TYPES, AdapterType, LanguageAdapterConfig
from .block import mark_initialized
from .routing import BASE_ROW, AdapterRouting, current_call, effective_routing

#: attribute set on a LoRA layer once the routing pre-hook is registered on it.
_HOOK_FLAG = "_adaptspeech_lora_routing_hook"


@dataclass
class LoraAdapterConfig(LanguageAdapterConfig):
    """Settings of one language's LoRA adapter (``adapter_type="lora"``), passed to peft's :class:`~peft.LoraConfig`.

    Args:
        lora_r (`int`, defaults to 8): rank ``r``.
        lora_alpha (`int`, defaults to 16): scaling numerator (the update is ``(lora_alpha / r) B A x``).
        lora_dropout (`float`, defaults to 0.0): dropout on the LoRA branch's input.
        lora_target_modules (`list[str]`): last name component of the projections to wrap inside the adapter layers
            (``q_proj`` / ``v_proj`` of wav2vec2, ``linear_q`` / ``linear_v`` of the conformer attention).
    """

    lora_r: int = 8
    lora_alpha: int = 16
    lora_dropout: float = 0.0
    lora_target_modules: list[str] = field(default_factory=lambda: ["q_proj", "v_proj", "linear_q", "linear_v"])

    def __post_init__(self) -> None:
        if not is_int(self.lora_r) or self.lora_r < 1:
            raise ValueError(f"lora_r must be a positive integer, got {self.lora_r!r}")
        self.lora_target_modules = list(self.lora_target_modules)

    def describe(self) -> str:
        return f"LoRA r={self.lora_r} on {', '.join(self.lora_target_modules)}"


def _lora_languages(model: Any) -> list[str]:
    return [lang for lang, settings in model.config.adapters.items() if isinstance(settings, LoraAdapterConfig)]


def _encoder_layers(model: Any) -> dict[int, tuple[str, nn.Module]]:
    """Adapter layer index -> (its name inside ``model.backbone``, the encoder layer). An encoder layer wrapped
    by a peft tuner layer (e.g. the speech_adapter method) is looked into."""
    layers = model.config.backbone_spec.encoder_layers(model.backbone)
    names = {id(module): name for name, module in model.backbone.named_modules()}
    found = {}
    for i in model.config.layers_with_adapters():
        layer, name = layers[i], names[id(layers[i])]
        while isinstance(layer, BaseTunerLayer) and hasattr(layer, "base_layer"):
            layer, name = layer.base_layer, f"{name}.base_layer"
        found[i] = (name, layer)
    return found


def _is_adapter_internal(sub_name: str) -> bool:
    """A module of the language-adapter block, or inside a LoRA wrapper (its base layer, lora_A, ...)."""
    parts = sub_name.split(".")
    return ADAPTER_MODULE_NAME in parts or "base_layer" in parts or any(p.startswith("lora_") for p in parts)


def _lora_layers(model: Any) -> list[tuple[int, str, LoraLayer]]:
    """``(layer index, name inside the encoder layer, LoRA wrapper)`` of the adapter layers, in order."""
    found = []
    for i, (_, layer) in sorted(_encoder_layers(model).items()):
        for sub_name, sub in layer.named_modules():
            if isinstance(sub, LoraLayer) and not _is_adapter_internal(sub_name):
                found.append((i, sub_name, sub))
    return found


def _target_names(model: Any, language: str, target_modules: list[str]) -> dict[int, list[str]]:
    """Adapter layer index -> names (inside that encoder layer) of the projections to wrap; raises if none
    matches."""
    wanted = set(target_modules)
    targets: dict[int, list[str]] = {}
    linear_names: set[str] = set()
    for i, (_, layer) in _encoder_layers(model).items():
        for sub_name, sub in layer.named_modules():
            if not sub_name or _is_adapter_internal(sub_name) or not isinstance(sub, (nn.Linear, LoraLayer)):
                continue
            short = sub_name.rsplit(".", 1)[-1]
            linear_names.add(short)
            if short in wanted:
                targets.setdefault(i, []).append(sub_name)
    if not targets:
        raise ValueError(
            f"LoRA adapter for {language!r}: lora_target_modules {sorted(wanted)} match no nn.Linear in "
            f"encoder layers {model.config.layers_with_adapters()}; Linear modules there: "
            f"{sorted(linear_names)}"
        )
    return targets


def _language_entries(layer: LoraLayer, language: str) -> list[tuple[str, nn.Module | nn.Parameter]]:
    """``(container name, module or parameter)`` holding ``language``'s weights on one LoRA wrapper."""
    return [
        (name, getattr(layer, name)[language])
        for name in layer.adapter_layer_names
        if language in getattr(layer, name)
    ]


def _set_active_keep_grad(layer: LoraLayer, adapters: list[str]) -> None:
    """peft's ``set_adapter`` without its side effect on ``requires_grad``."""
    params = [p for name in layer.adapter_layer_names for p in getattr(layer, name).parameters()]
    flags = [p.requires_grad for p in params]
    layer.set_adapter(adapters)
    for param, flag in zip(params, flags):
        param.requires_grad = flag


def _route_lora(
    routing: AdapterRouting, layer: LoraLayer, args: tuple, kwargs: dict[str, Any]
) -> tuple[tuple, dict[str, Any]] | None:
    """Forward pre-hook: with several active languages (of any adapter type, fusion off), route each utterance
    to the LoRA of its own language, or to the base projection when that language has no active LoRA here. The
    utterances' languages come from the running :class:`~adaptspeech.adapters.routing.RoutingCall` (also when a
    checkpointed layer recomputes in backward). A call with a routing override gets the override's languages as
    ``adapter_names`` whatever their number: peft's active adapters (the model's settings) do not apply to it."""
    call = current_call()
    overridden = call is not None and call.override is not None
    routing = effective_routing(routing)
    if routing.fusion_active or not routing.active_languages:
        if not overridden:
            return None
        return args, {**kwargs, "adapter_names": [BASE_ROW] * _batch_size(args, kwargs)}
    if len(routing.active_languages) == 1:
        if not overridden:
            return None
        language = routing.active_languages[0]
        return args, {**kwargs, "adapter_names": [language if language in layer.lora_A else BASE_ROW]
                      * _batch_size(args, kwargs)}
    if call is None or call.row_languages is None:
        raise ValueError(
            f"several languages are active ({routing.active_languages}) without fusion: pass `lang_ids` (one "
            "per utterance) to forward, or call set_active_languages([lang]) for one"
        )
    routed = {lang for lang in routing.active_languages if lang in layer.lora_A}
    return args, {**kwargs, "adapter_names": [n if n in routed else BASE_ROW for n in call.row_languages]}


def _batch_size(args: tuple, kwargs: dict[str, Any]) -> int:
    """Rows of a wrapped projection's input ``[B, T, D]``."""
    return len(args[0] if args else kwargs["x"])


def _apply_routing(model: Any, extra_managed: frozenset[str] = frozenset()) -> None:
    """Activate, on every LoRA wrapper, the LoRA languages routed by ``model.routing``.

    Only adapters named after a LoRA language (of ``model.config.adapters``, plus ``extra_managed`` while a
    language is being injected) are touched; other peft adapters on the same wrappers (e.g. added with
    ``get_peft_model``) keep their active state.
    """
    managed = set(_lora_languages(model)) | extra_managed
    routing = model.routing
    active = [] if routing.fusion_active else [lang for lang in routing.active_languages if lang in managed]
    for _, _, layer in _lora_layers(model):
        others = [a for a in layer.active_adapters if a not in managed]
        _set_active_keep_grad(layer, others + [lang for lang in active if lang in layer.lora_A])


def sync_lora_languages(model: Any) -> None:
    """Make exactly the LoRA adapters of ``model.routing.active_languages`` active (see the module doc)."""
    if _lora_languages(model):
        _apply_routing(model)


def add_lora_language(model: Any, language: str, adapter_config: LoraAdapterConfig) -> None:
    """Inject a stock peft LoRA adapter named ``language`` (see the module docstring).

    Args:
        model: an adaptspeech model (``AdaptSpeechPreTrainedModel``).
        language: the language code, used as the peft adapter name.
        adapter_config: its settings.
    """
    if any(language in layer.lora_A for _, _, layer in _lora_layers(model)):
        raise ValueError(f"the model already has a LoRA adapter named {language!r}")
    targets = _target_names(model, language, list(adapter_config.lora_target_modules))
    flags = [(p, p.requires_grad) for p in model.parameters()]
    layers = _encoder_layers(model)
    for i, names in targets.items():
        # injected layer by layer into the (unwrapped) encoder layer: peft skips every module inside one of its
        # own tuner layers, such as the speech_adapter layer that get_peft_model puts around each encoder layer
        lora_config = LoraConfig(r=adapter_config.lora_r, lora_alpha=adapter_config.lora_alpha,
                                 lora_dropout=adapter_config.lora_dropout, target_modules=names, bias="none")
        layer = layers[i][1]
        had_peft_config = hasattr(layer, "peft_config")
        inject_adapter_in_model(lora_config, layer, adapter_name=language)
        if not had_peft_config and hasattr(layer, "peft_config"):
            del layer.peft_config  # the adaptspeech config is the source of truth
    for param, flag in flags:  # injection froze everything but the new adapter
        param.requires_grad = flag
    for _, _, layer in _lora_layers(model):
        for _, entry in _language_entries(layer, language):
            entry.requires_grad_(True)
            if isinstance(entry, nn.Module):
                mark_initialized(entry)  # post_init must not re-initialise lora_B away from zero
        if not getattr(layer, _HOOK_FLAG, False):
            layer.register_forward_pre_hook(functools.partial(_route_lora, model.routing), with_kwargs=True)
            setattr(layer, _HOOK_FLAG, True)
    # injection made `language` the active adapter of every LoRA wrapper: restore the routed state
    _apply_routing(model, extra_managed=frozenset({language}))


def remove_lora_language(model: Any, language: str) -> None:
    """Delete the LoRA adapter ``language``. A wrapper left without adapters is replaced by its base layer, so
    the parameter names return to the backbone's own (``q_proj.weight``) and match a config without LoRA."""
    flags = [(p, p.requires_grad) for p in model.parameters()]
    names = {id(module): name for name, module in model.backbone.named_modules()}
    for _, _, layer in _lora_layers(model):
        if language not in layer.lora_A:
            continue
        layer.delete_adapter(language)
        if not layer.lora_A:
            parent_name, _, child_name = names[id(layer)].rpartition(".")
            parent = model.backbone.get_submodule(parent_name) if parent_name else model.backbone
            setattr(parent, child_name, layer.get_base_layer())
    for param, flag in flags:  # delete_adapter may activate (and unfreeze) another adapter
        param.requires_grad = flag


def lora_tensors(model: Any, language: str) -> dict[str, torch.Tensor]:
    """The live LoRA parameters of ``language``, keyed ``layers.<i>.<module>.lora_A.weight`` (and ``lora_B``).

    ``<i>`` is the encoder layer index and ``<module>`` the projection's name inside that layer (e.g.
    ``attention.q_proj``). The language code is not part of the key, so a file loads under any name. The
    values are the parameters themselves: ``load_adapter`` copies into them in place.
    """
    tensors: dict[str, torch.Tensor] = {}
    for i, sub_name, layer in _lora_layers(model):
        for name, entry in _language_entries(layer, language):
            if isinstance(entry, nn.Parameter):
                tensors[f"layers.{i}.{sub_name}.{name}"] = entry
            else:
                for param_name, param in entry.named_parameters():
                    tensors[f"layers.{i}.{sub_name}.{name}.{param_name}"] = param
    if not tensors:
        raise KeyError(f"the model has no LoRA weights for language {language!r}")
    return tensors


def lora_modules(model: Any, language: str) -> list[nn.Module]:
    """The ``lora_A`` / ``lora_B`` modules of ``language`` on every wrapped projection."""
    return [
        entry
        for _, _, layer in _lora_layers(model)
        for _, entry in _language_entries(layer, language)
        if isinstance(entry, nn.Module)
    ]


def lora_expected_shapes(
    model: Any, language: str, adapter_config: LoraAdapterConfig
) -> dict[str, tuple[int, ...]]:
    """The keys and shapes of :func:`lora_tensors` that a LoRA adapter with ``adapter_config``'s settings would have
    on this model (``lora_A.weight`` [r, in], ``lora_B.weight`` [out, r] per targeted projection); changes nothing.

    Raises:
        ValueError: ``lora_target_modules`` match no projection (as :func:`add_lora_language` would).
    """
    _target_names(model, language, list(adapter_config.lora_target_modules))  # same refusal as the injection
    wanted = set(adapter_config.lora_target_modules)
    r = adapter_config.lora_r
    shapes: dict[str, tuple[int, ...]] = {}
    for i, (_, layer) in sorted(_encoder_layers(model).items()):
        for sub_name, sub in layer.named_modules():
            if not sub_name or _is_adapter_internal(sub_name) or not isinstance(sub, (nn.Linear, LoraLayer)):
                continue
            if sub_name.rsplit(".", 1)[-1] not in wanted:
                continue
            base = sub.get_base_layer() if isinstance(sub, LoraLayer) else sub
            shapes[f"layers.{i}.{sub_name}.lora_A.weight"] = (r, base.in_features)
            shapes[f"layers.{i}.{sub_name}.lora_B.weight"] = (base.out_features, r)
    return shapes


@ADAPTER_TYPES.register("lora", options=LoraAdapterConfig)
class LoraType(AdapterType):
    """Stock peft LoRA on the attention projections of the adapter layers (see the module docstring)."""

    def build(self, model: Any, language: str, config: LanguageAdapterConfig) -> None:
        add_lora_language(model, language, config)

    def remove(self, model: Any, language: str) -> None:
        remove_lora_language(model, language)

    def tensors(self, model: Any, language: str) -> dict[str, torch.Tensor]:
        return lora_tensors(model, language)

    def expected_shapes(self, model: Any, language: str, config: LanguageAdapterConfig) -> dict[str, tuple[int, ...]]:
        return lora_expected_shapes(model, language, config)

    def modules(self, model: Any, language: str) -> list[nn.Module]:
        return lora_modules(model, language)

    def holds(self, parameter_name: str, language: str) -> bool:
        return f".lora_A.{language}." in parameter_name or f".lora_B.{language}." in parameter_name

    def apply_routing(self, model: Any) -> None:
        sync_lora_languages(model)
