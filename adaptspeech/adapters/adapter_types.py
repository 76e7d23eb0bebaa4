"""Adapter types: what a per-language adapter type is and can do, one class per type in :data:`ADAPTER_TYPES`,
registered together with the type's settings class (as peft registers a tuner with its config class):

```python
@ADAPTER_TYPES.register("lora", options=LoraAdapterConfig)
class LoraType(AdapterType): ...
```

An adapter type knows how its weights for one language are built into a model, removed, listed for saving and
loading (the live parameters, keyed as in ``adapter.<lang>.safetensors``), what shapes a file must have before any
of them is touched (so a load can be refused without changing the model), which modules to move to the model's
device and dtype, what it does when the routing changes, whether SimAdapter can fuse it and whether it can be an MMS
adapter. Its settings are a :class:`LanguageAdapterConfig` subclass holding only that type's settings. Adding a type
is one module (its settings class, its type class, one registration) imported by :mod:`adaptspeech.adapters`; the
model's adapter API (:mod:`adaptspeech.adapters.mixin`) only asks this table.

Saved (``config.json``, adapter files, YAML) a language's settings are *flat*: ``adapter_type`` beside the settings of
every registered type (``{"adapter_type": "lora", "bottleneck": 64, ..., "lora_r": 8, ...}``), as adaptspeech 0.1.0
wrote them; reading keeps the named type's settings and ignores the others'.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

import torch
from torch import nn

from ..registry import Registry
from ..settings import Settings, flat_layout, unknown_settings

#: the adapter type of a new adapter whose settings (and the model's ``adapter_defaults``) name none.
DEFAULT_ADAPTER_TYPE = "bottleneck"

#: the name of an encoder layer's language-adapter block (:mod:`adaptspeech.adapters.block`) as its child
#: (``layer.language_adapters``): the block's adapters and fusion are named ``...language_adapters.<...>``.
ADAPTER_MODULE_NAME = "language_adapters"


class LanguageAdapterConfig(Settings):
    """Settings of one language's adapter: the base of each adapter type's settings dataclass (e.g.
    :class:`~adaptspeech.adapters.bottleneck.BottleneckAdapterConfig`,
    :class:`~adaptspeech.adapters.lora.LoraAdapterConfig`), registered with its type.

    ``LanguageAdapterConfig.from_dict(saved)`` builds the class its ``adapter_type`` names (``"bottleneck"`` when
    absent); :meth:`to_dict` writes ``adapter_type`` and the type's own settings.
    """

    what = "adapter config"

    @property
    def adapter_type(self) -> str:
        """The registered name of this settings class's adapter type."""
        return ADAPTER_TYPES.name_of_options(type(self))

    def to_dict(self) -> dict[str, Any]:
        return {"adapter_type": self.adapter_type, **dataclasses.asdict(self)}  # type: ignore[call-overload]

    def describe(self) -> str:
        """One line for model cards (``"bottleneck r=64, relu"``)."""
        raise NotImplementedError(f"{type(self).__name__} must implement describe")

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> LanguageAdapterConfig:
        """Build from the saved (flat) layout: the class ``adapter_type`` names, from its own settings (those of other
        types are ignored); an unknown setting is refused."""
        if not isinstance(data, Mapping):
            raise ValueError(f"adapter config must be a mapping of settings, got {type(data).__name__}")
        own_name = None if cls is LanguageAdapterConfig else ADAPTER_TYPES.name_of_options(cls)
        name = data.get("adapter_type", own_name or DEFAULT_ADAPTER_TYPE)
        ADAPTER_TYPES.check(name, "adapter_type")
        if own_name is not None and name != own_name:
            raise ValueError(f"adapter_type {name!r}: {cls.__name__} holds the settings of {own_name!r} adapters")
        options = ADAPTER_TYPES.options(name)
        return options(**own_settings(name, data, strict=False))

    @classmethod
    def flat_layout(cls) -> type:
        """The saved layout (``adapter_type`` and every registered type's settings side by side) as a dataclass, to
        check a YAML / JSON section against the field annotations before it is typed."""
        return _flat_adapter_layout(tuple(ADAPTER_TYPES.option_classes()))


@dataclass
class _AdapterTypeName:
    adapter_type: str = DEFAULT_ADAPTER_TYPE


@functools.cache
def _flat_adapter_layout(options: tuple[type, ...]) -> type:
    return flat_layout("FlatAdapterSettings", _AdapterTypeName, options)


def own_settings(name: str, settings: Mapping[str, Any], strict: bool) -> dict[str, Any]:
    """The settings of adapter type ``name`` among flat ``settings`` (``adapter_type`` aside).

    Args:
        name: a registered adapter type.
        settings: flat settings (any registered type's, and ``adapter_type``).
        strict: refuse a setting of another type (given by a caller, e.g. ``add_language_adapter("ro", lora_r=4)``
            for a bottleneck adapter) instead of ignoring it (read from a saved file, which holds every type's).

    Raises:
        ValueError: an unknown setting (naming the allowed ones), or, with ``strict``, another type's.
    """
    owners = ADAPTER_TYPES.option_owners()
    unknown = [key for key in settings if key != "adapter_type" and key not in owners]
    if unknown:
        raise unknown_settings("adapter config", unknown, sorted(["adapter_type", *owners]))
    own = {f.name for f in dataclasses.fields(ADAPTER_TYPES.options(name))}
    if strict:
        for key in settings:
            if key != "adapter_type" and key not in own:
                raise ValueError(f"{key} applies only to adapter_type(s) {', '.join(owners[key])}, not {name!r}")
    return {key: value for key, value in settings.items() if key in own}


class AdapterType:
    """Base class of an adapter type (see the module docstring). ``model`` is an adaptspeech model."""

    #: SimAdapter can fuse adapters of this type (their output is a full layer output, not a weight delta).
    fusable: ClassVar[bool] = False
    #: adapters of this type can be MMS's ``Wav2Vec2AttnAdapterLayer`` (read from / written to MMS adapter files,
    #: :mod:`adaptspeech.adapters.mms`) when their settings and placement are MMS's.
    mms_format: ClassVar[bool] = False

    def build(self, model: Any, language: str, config: LanguageAdapterConfig) -> None:
        raise NotImplementedError

    def remove(self, model: Any, language: str) -> None:
        raise NotImplementedError

    def tensors(self, model: Any, language: str) -> dict[str, torch.Tensor]:
        """The live parameters of ``language`` (copying into them loads a file), keyed as in the file."""
        raise NotImplementedError

    def expected_shapes(self, model: Any, language: str, config: LanguageAdapterConfig) -> dict[str, tuple[int, ...]]:
        """Key -> shape that a file with ``config``'s settings must hold for this model; changes nothing."""
        raise NotImplementedError

    def modules(self, model: Any, language: str) -> list[nn.Module]:
        """The modules holding ``language``'s weights (to move them to the model's device and dtype)."""
        raise NotImplementedError

    def holds(self, parameter_name: str, language: str) -> bool:
        """True when the model parameter called ``parameter_name`` is one of ``language``'s weights (it is counted,
        trained and frozen as ``language``'s adapter)."""
        raise NotImplementedError

    def apply_routing(self, model: Any) -> None:
        """Follow ``model.routing`` after it changed (active languages, fusion on or off); the default does nothing
        (adapters that read the routing per call need no update)."""


ADAPTER_TYPES: Registry[type[AdapterType]] = Registry("adapter type")


def get_adapter_type(name: str) -> AdapterType:
    """The registered :class:`AdapterType` called ``name`` (KeyError listing the allowed names)."""
    return ADAPTER_TYPES.get(name)()


def fusable_types() -> list[str]:
    """The adapter types SimAdapter can fuse."""
    return [name for name in ADAPTER_TYPES.names() if ADAPTER_TYPES.get(name).fusable]
