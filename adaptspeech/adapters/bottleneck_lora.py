"""A bottleneck adapter and LoRA for one language (``adapter_type="bottleneck_lora"``): the language's
:class:`~adaptspeech.adapters.bottleneck.BottleneckAdapter` after each adapter layer's output *and* stock peft LoRA on
that layer's attention projections, built, trained, frozen, saved and loaded together as the language's adapter.

More capacity than either alone for the same language (a self-trained adapter student: the self-training section's
``adapter_lora``), at the price of both parameter sets. The two parts route as their own types do
(:mod:`adaptspeech.adapters.block`, :mod:`adaptspeech.adapters.lora`): with the language active both apply; under
SimAdapter fusion LoRA returns the base projection, so a fusion would not compute what the language trained, and the
type is not fusable. The adapter file holds both parts' tensors (bottleneck keys ``layers.<i>.down.weight``..., LoRA
keys ``layers.<i>.<module>.lora_A.weight``...).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from .adapter_types import ADAPTER_TYPES, AdapterType, LanguageAdapterConfig
from .bottleneck import BottleneckAdapterConfig, BottleneckType
from .lora import LoraAdapterConfig, LoraType


@dataclass
class BottleneckLoraAdapterConfig(BottleneckAdapterConfig, LoraAdapterConfig):
    """Settings of one language's bottleneck adapter plus LoRA: every setting of
    :class:`~adaptspeech.adapters.bottleneck.BottleneckAdapterConfig` (``bottleneck``, ``activation``, ...) and of
    :class:`~adaptspeech.adapters.lora.LoraAdapterConfig` (``lora_r``, ``lora_alpha``, ``lora_dropout``,
    ``lora_target_modules``), each checked as its own type checks it."""

    def __post_init__(self) -> None:
        BottleneckAdapterConfig.__post_init__(self)
        LoraAdapterConfig.__post_init__(self)

    def describe(self) -> str:
        return f"{BottleneckAdapterConfig.describe(self)} + {LoraAdapterConfig.describe(self)}"


_BOTTLENECK, _LORA = BottleneckType(), LoraType()


@ADAPTER_TYPES.register("bottleneck_lora", options=BottleneckLoraAdapterConfig)
class BottleneckLoraType(AdapterType):
    """A bottleneck adapter in the language-adapter block and LoRA on the attention projections (module docstring)."""

    def build(self, model: Any, language: str, config: LanguageAdapterConfig) -> None:
        _BOTTLENECK.build(model, language, config)
        try:
            _LORA.build(model, language, config)
        except Exception:
            _BOTTLENECK.remove(model, language)  # no half-built language left behind
            raise

    def remove(self, model: Any, language: str) -> None:
        _LORA.remove(model, language)
        _BOTTLENECK.remove(model, language)

    def tensors(self, model: Any, language: str) -> dict[str, torch.Tensor]:
        return {**_BOTTLENECK.tensors(model, language), **_LORA.tensors(model, language)}

    def expected_shapes(self, model: Any, language: str, config: LanguageAdapterConfig) -> dict[str, tuple[int, ...]]:
        return {**_BOTTLENECK.expected_shapes(model, language, config),
                **_LORA.expected_shapes(model, language, config)}

    def modules(self, model: Any, language: str) -> list[nn.Module]:
        return _BOTTLENECK.modules(model, language) + _LORA.modules(model, language)

    def holds(self, parameter_name: str, language: str) -> bool:
        return _BOTTLENECK.holds(parameter_name, language) or _LORA.holds(parameter_name, language)

    def apply_routing(self, model: Any) -> None:
        _LORA.apply_routing(model)
