"""Dataclass configs for language adapters and their fusion (peft-style ``__post_init__`` checks)."""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field, fields
from typing import Any

from ..registry import Registry
from .bottleneck import ACTIVATIONS, ADAPTER_INITS
from .simadapter import FUSION_RESIDUALS
from .types import ADAPTER_TYPES  # the adapter types (bottleneck, lora), checked below

#: fusion types.
FUSION_TYPES: Registry[str] = Registry("fusion type")
FUSION_TYPES.register("simadapter")("simadapter")

_LANG_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_\-]*$")


def check_language_code(lang: object) -> str:
    """Language codes become file names (``adapter.<lang>.safetensors``) and module keys: keep them simple."""
    if not isinstance(lang, str) or not _LANG_RE.match(lang):
        raise ValueError(
            f"language code {lang!r} is not valid: use letters, digits, '-' or '_' (e.g. 'ro', 'cs', 'pt-BR')"
        )
    return lang


def _from_dict(cls: type, data: dict[str, Any], what: str) -> Any:
    names = {f.name for f in fields(cls)}
    unknown = sorted(set(data) - names)
    if unknown:
        raise ValueError(
            f"{what}: unknown setting(s) {', '.join(unknown)}; allowed settings: {', '.join(sorted(names))}"
        )
    return cls(**data)


@dataclass
class LanguageAdapterConfig:
    """Settings of one language's adapter.

    Args:
        adapter_type (`str`): ``"bottleneck"`` (LayerNorm -> down -> act -> up, residual, after each chosen encoder
            layer) or ``"lora"`` (stock PEFT LoRA on the attention projections of the chosen layers).
        bottleneck (`int`): bottleneck width ``r`` (bottleneck adapters).
        activation (`str`): activation of the bottleneck adapter.
        layer_norm (`bool`): LayerNorm at the adapter input.
        bias (`bool`): biases on the down and up projections (the official SimAdapter adapter has none; MMS's
            ``Wav2Vec2AttnAdapterLayer`` has them, so adapters read from MMS files set it).
        dropout (`float`): dropout on the adapter branch.
        init (`str`): ``"default"`` (official: PyTorch default) or ``"near_identity"`` (zero up projection).
        lora_r, lora_alpha, lora_dropout, lora_target_modules: LoRA settings (``adapter_type="lora"``).
    """

    adapter_type: str = "bottleneck"
    bottleneck: int = 64
    activation: str = "relu"
    layer_norm: bool = True
    bias: bool = False
    dropout: float = 0.0
    init: str = "default"
    lora_r: int = 8
    lora_alpha: int = 16
    lora_dropout: float = 0.0
    lora_target_modules: list[str] = field(default_factory=lambda: ["q_proj", "v_proj", "linear_q", "linear_v"])

    def __post_init__(self) -> None:
        ADAPTER_TYPES.check(self.adapter_type, "adapter_type")
        if self.activation not in ACTIVATIONS:
            raise ValueError(
                f"adapter activation {self.activation!r} unknown; allowed values: {', '.join(ACTIVATIONS)}"
            )
        if self.init not in ADAPTER_INITS:
            raise ValueError(f"adapter init {self.init!r} unknown; allowed values: {', '.join(ADAPTER_INITS)}")
        if not isinstance(self.bottleneck, int) or self.bottleneck < 1:
            raise ValueError(f"adapter bottleneck must be a positive integer, got {self.bottleneck!r}")
        if not 0.0 <= self.dropout < 1.0:
            raise ValueError(f"adapter dropout must be in [0, 1), got {self.dropout}")
        if self.lora_r < 1:
            raise ValueError(f"lora_r must be a positive integer, got {self.lora_r}")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> LanguageAdapterConfig:
        return _from_dict(cls, data, "adapter config")


@dataclass
class FusionConfig:
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

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> FusionConfig:
        return _from_dict(cls, data, "fusion config")
