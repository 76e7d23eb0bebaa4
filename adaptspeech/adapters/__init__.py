"""Per-language adapters, their SimAdapter fusion, and how a model holds, routes, saves and loads them.

Adapter types are a registry of classes (:data:`ADAPTER_TYPES`), each registered with its settings class:
``bottleneck`` (:mod:`.bottleneck`), ``lora`` (stock peft LoRA, :mod:`.lora`) and ``bottleneck_lora`` (both for one
language, :mod:`.bottleneck_lora`); importing this package registers them. The model's adapter API is
:class:`LanguageAdapterMixin`; the same bottleneck adapters and fusion also work as a peft method (:mod:`.peft_method`).
"""

from . import bottleneck, bottleneck_lora, lora  # noqa: F401  (importing registers the adapter types)
from .adapter_types import (
    ADAPTER_MODULE_NAME,
    ADAPTER_TYPES,
    DEFAULT_ADAPTER_TYPE,
    AdapterType,
    LanguageAdapterConfig,
    get_adapter_type,
)
from .block import LanguageAdapterBlock
from .bottleneck import BottleneckAdapter, BottleneckAdapterConfig
from .bottleneck_lora import BottleneckLoraAdapterConfig
from .config import AdapterDefaults, FusionConfig, check_language_code
from .files import AdapterLoadError
from .fusion import FUSION_TYPES, SimAdapterFusion, guide_loss
from .lora import LoraAdapterConfig
from .mixin import LanguageAdapterMixin
from .routing import AdapterRouting

__all__ = [
    "ADAPTER_MODULE_NAME",
    "ADAPTER_TYPES",
    "DEFAULT_ADAPTER_TYPE",
    "FUSION_TYPES",
    "AdapterDefaults",
    "AdapterLoadError",
    "AdapterRouting",
    "AdapterType",
    "BottleneckAdapter",
    "BottleneckAdapterConfig",
    "BottleneckLoraAdapterConfig",
    "FusionConfig",
    "LanguageAdapterBlock",
    "LanguageAdapterConfig",
    "LanguageAdapterMixin",
    "LoraAdapterConfig",
    "SimAdapterFusion",
    "check_language_code",
    "get_adapter_type",
    "guide_loss",
]
