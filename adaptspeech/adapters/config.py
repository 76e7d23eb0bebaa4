"""Settings of a model's adapters taken together: the defaults new adapters take (:class:`AdapterDefaults`), the
SimAdapter fusion (:class:`FusionConfig`) and the language codes that name adapters. One language's adapter settings
are its type's :class:`~adaptspeech.adapters.adapter_types.LanguageAdapterConfig` subclass."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ..settings import Settings, check_language_code
from .adapter_types import ADAPTER_TYPES, DEFAULT_ADAPTER_TYPE, LanguageAdapterConfig, own_settings
from .fusion import FUSION_RESIDUALS, FUSION_TYPES


def _type_defaults() -> dict[str, LanguageAdapterConfig]:
    return {name: ADAPTER_TYPES.options(name)() for name in ADAPTER_TYPES.names()}


@dataclass
class AdapterDefaults(Settings):
    """What a new adapter takes for the settings it leaves out (``AdaptSpeechConfig.adapter_defaults``): a type, and
    default settings for every registered type.

    Saved flat (``{"adapter_type": "bottleneck", "bottleneck": 64, ..., "lora_r": 8, ...}``); given as any part of
    that layout (``{"bottleneck": 128}``), the rest from each type's own defaults.

    Args:
        adapter_type (`str`, defaults to ``"bottleneck"``): the type of an adapter whose settings name none.
        per_type (`dict[str, LanguageAdapterConfig]`): adapter type -> its default settings (each registered type's
            class defaults where missing).
    """

    what = "adapter_defaults"

    adapter_type: str = DEFAULT_ADAPTER_TYPE
    per_type: dict[str, LanguageAdapterConfig] = field(default_factory=_type_defaults)

    def __post_init__(self) -> None:
        ADAPTER_TYPES.check(self.adapter_type, "adapter_defaults.adapter_type")
        self.per_type = {**_type_defaults(), **self.per_type}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> AdapterDefaults:
        """From the flat layout (any part of it)."""
        if not isinstance(data, Mapping):
            raise ValueError(f"adapter_defaults must be a mapping of settings, got {type(data).__name__}")
        name = data.get("adapter_type", DEFAULT_ADAPTER_TYPE)
        ADAPTER_TYPES.check(name, "adapter_defaults.adapter_type")
        per_type = {t: ADAPTER_TYPES.options(t)(**own_settings(t, data, strict=False)) for t in ADAPTER_TYPES.names()}
        return cls(adapter_type=name, per_type=per_type)

    def to_dict(self) -> dict[str, Any]:
        """The flat layout: ``adapter_type`` and every type's default settings."""
        data: dict[str, Any] = {}
        for settings in self.per_type.values():
            data.update(settings.to_dict())
        data["adapter_type"] = self.adapter_type
        return data

    def settings(self, given: Mapping[str, Any], strict: bool = False) -> LanguageAdapterConfig:
        """One language's settings: ``given`` (flat) over these defaults, of the type ``given`` names (else
        :attr:`adapter_type`).

        Args:
            given: the language's own settings.
            strict: refuse a setting of another type (a caller's mistake) instead of ignoring it (a saved file holds
                every type's settings).
        """
        name = given.get("adapter_type", self.adapter_type)
        ADAPTER_TYPES.check(name, "adapter_type")
        return dataclasses.replace(self.per_type[name], **own_settings(name, given, strict))

    def saved(self, settings: LanguageAdapterConfig) -> dict[str, Any]:
        """``settings`` in the flat layout of ``config.json`` and adapter files: these defaults' settings of every
        type, overlaid by ``settings``' own."""
        return {**self.to_dict(), **settings.to_dict()}


@dataclass
class FusionConfig(Settings):
    """Settings of the SimAdapter fusion over several language adapters.

    Args:
        fusion_type (`str`): ``"simadapter"``.
        languages (`list[str]`): the fused languages, in order (the attention's N entries).
        target_language (`str`, optional): the language being learnt; needed by the guide loss.
        temperature (`float`): ``tau`` (the official code fixes it at 1.0).
        reg_weight (`float`): weight of ``L_reg`` (0.01 in the official code).
        guide_weight (`float`): weight of the guide loss (0 = off, the default).
        guide_decay (`float`): the guide weight is multiplied by this factor after each optimizer step
            (applied by the trainer; 1.0 = constant).
        include_self (`bool`): add the layer output itself as one more fused entry.
        residual (`str`): ``"ffn_input"`` (official), ``"query"`` or ``"none"``.
    """

    what = "fusion config"

    fusion_type: str = "simadapter"
    languages: list[str] = field(default_factory=list)
    target_language: str | None = None
    temperature: float = 1.0
    reg_weight: float = 0.01
    guide_weight: float = 0.0
    guide_decay: float = 1.0
    include_self: bool = False
    residual: str = "ffn_input"

    def __post_init__(self) -> None:
        FUSION_TYPES.check(self.fusion_type, "fusion_type")
        self.languages = [check_language_code(lang) for lang in self.languages]
        if len(self.languages) < 1:
            raise ValueError("fusion.languages must name at least one language adapter to fuse")
        if len(set(self.languages)) != len(self.languages):
            raise ValueError(f"fusion.languages has duplicates: {self.languages}")
        if self.target_language is not None and self.target_language not in self.languages:
            raise ValueError(
                f"fusion.target_language {self.target_language!r} is not among the fused languages {self.languages}"
            )
        if self.temperature <= 0:
            raise ValueError(f"fusion.temperature must be > 0, got {self.temperature}")
        if self.reg_weight < 0 or self.guide_weight < 0:
            raise ValueError("fusion.reg_weight and fusion.guide_weight must be >= 0")
        if self.guide_weight > 0 and self.target_language is None:
            raise ValueError("fusion.guide_weight > 0 needs fusion.target_language")
        if self.residual not in FUSION_RESIDUALS:
            raise ValueError(
                f"fusion.residual {self.residual!r} unknown; allowed values: {', '.join(FUSION_RESIDUALS)}"
            )

    @property
    def num_entries(self) -> int:
        return len(self.languages) + int(self.include_self)

    @property
    def target_index(self) -> int | None:
        """Position of ``target_language`` among the fused entries (None without one)."""
        return None if self.target_language is None else self.languages.index(self.target_language)
