"""The bottleneck adapter type (Houlsby-style, as in the official SimAdapter code and MMS): its module, its settings
and its registration. One :class:`BottleneckAdapter` per language sits after the output of each adapter layer, in
the layer's language-adapter block (:mod:`adaptspeech.adapters.block`); SimAdapter fuses them and they can be MMS
adapters (:mod:`adaptspeech.adapters.mms`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from ..settings import is_int
from .adapter_types import ADAPTER_MODULE_NAME, ADAPTER_TYPES, AdapterType, LanguageAdapterConfig

ACTIVATIONS: dict[str, type[nn.Module]] = {
    "relu": nn.ReLU,
    "gelu": nn.GELU,
    "silu": nn.SiLU,
    "tanh": nn.Tanh,
}
ADAPTER_INITS = ("default", "near_identity")


class BottleneckAdapter(nn.Module):
    """``y = x + up(act(down(LayerNorm(x))))``.

    The official SimAdapter implementation uses LayerNorm -> Linear(d, r, no bias) -> ReLU -> Linear(r, d, no bias)
    with PyTorch's default initialisation and the input added back as a residual; that is the default here.
    ``init="near_identity"`` zeroes the up projection so that a freshly added adapter leaves a frozen backbone's
    output unchanged (Houlsby et al.'s near-identity initialisation); it is offered because it keeps a pretrained
    encoder intact at the first step, which the official default does not.

    Args:
        hidden_size (`int`): width ``d`` of the encoder layer output.
        bottleneck (`int`): inner width ``r`` (64 for low-resource targets, 128 otherwise in the paper).
        activation (`str`, defaults to ``"relu"``): one of ``ACTIVATIONS``.
        layer_norm (`bool`, defaults to `True`): apply a LayerNorm to the input of the down projection.
        bias (`bool`, defaults to `False`): biases on the two projections.
        dropout (`float`, defaults to 0.0): dropout on the adapter branch.
        init (`str`, defaults to ``"default"``): one of ``ADAPTER_INITS``.
    """

    def __init__(
        self,
        hidden_size: int,
        bottleneck: int,
        activation: str = "relu",
        layer_norm: bool = True,
        bias: bool = False,
        dropout: float = 0.0,
        init: str = "default",
    ) -> None:
        super().__init__()
        if activation not in ACTIVATIONS:
            raise ValueError(f"adapter activation {activation!r} unknown; allowed values: {', '.join(ACTIVATIONS)}")
        if init not in ADAPTER_INITS:
            raise ValueError(f"adapter init {init!r} unknown; allowed values: {', '.join(ADAPTER_INITS)}")
        if bottleneck < 1 or hidden_size < 1:
            raise ValueError(f"adapter sizes must be positive, got hidden_size={hidden_size}, bottleneck={bottleneck}")
        self.hidden_size = hidden_size
        self.bottleneck = bottleneck
        self.layer_norm = nn.LayerNorm(hidden_size) if layer_norm else nn.Identity()
        self.down = nn.Linear(hidden_size, bottleneck, bias=bias)
        self.act = ACTIVATIONS[activation]()
        self.up = nn.Linear(bottleneck, hidden_size, bias=bias)
        self.dropout = nn.Dropout(dropout)
        if init == "near_identity":
            nn.init.zeros_(self.up.weight)
            if self.up.bias is not None:
                nn.init.zeros_(self.up.bias)

    @classmethod
    def from_config(cls, hidden_size: int, config: Any) -> BottleneckAdapter:
        """Build from a :class:`BottleneckAdapterConfig` (or anything with its fields)."""
        return cls(
            hidden_size,
            config.bottleneck,
            activation=config.activation,
            layer_norm=config.layer_norm,
            bias=getattr(config, "bias", False),
            dropout=config.dropout,
            init=config.init,
        )

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        """[..., D] -> [..., D]."""
        branch = self.up(self.act(self.down(self.layer_norm(hidden_states))))
        return hidden_states + self.dropout(branch)


@dataclass
class BottleneckAdapterConfig(LanguageAdapterConfig):
    """Settings of one language's bottleneck adapter (``adapter_type="bottleneck"``).

    Args:
        bottleneck (`int`, defaults to 64): bottleneck width ``r``.
        activation (`str`, defaults to ``"relu"``): one of ``ACTIVATIONS``.
        layer_norm (`bool`, defaults to `True`): LayerNorm at the adapter input.
        bias (`bool`, defaults to `False`): biases on the down and up projections (the official SimAdapter adapter
            has none; MMS's ``Wav2Vec2AttnAdapterLayer`` has them, so adapters read from MMS files set it).
        dropout (`float`, defaults to 0.0): dropout on the adapter branch.
        init (`str`, defaults to ``"default"``): ``"default"`` (official: PyTorch default) or ``"near_identity"``
            (zero up projection).
    """

    bottleneck: int = 64
    activation: str = "relu"
    layer_norm: bool = True
    bias: bool = False
    dropout: float = 0.0
    init: str = "default"

    def __post_init__(self) -> None:
        if self.activation not in ACTIVATIONS:
            raise ValueError(
                f"adapter activation {self.activation!r} unknown; allowed values: {', '.join(ACTIVATIONS)}"
            )
        if self.init not in ADAPTER_INITS:
            raise ValueError(f"adapter init {self.init!r} unknown; allowed values: {', '.join(ADAPTER_INITS)}")
        if not is_int(self.bottleneck) or self.bottleneck < 1:
            raise ValueError(f"adapter bottleneck must be a positive integer, got {self.bottleneck!r}")
        if not 0.0 <= self.dropout < 1.0:
            raise ValueError(f"adapter dropout must be in [0, 1), got {self.dropout}")

    def describe(self) -> str:
        return f"bottleneck r={self.bottleneck}, {self.activation}"


@ADAPTER_TYPES.register("bottleneck", options=BottleneckAdapterConfig)
class BottleneckType(AdapterType):
    """:class:`BottleneckAdapter` after the output of each adapter layer, in the layer's language-adapter block."""

    fusable = True
    mms_format = True

    def build(self, model: Any, language: str, config: LanguageAdapterConfig) -> None:
        for block in model.adapter_blocks.values():
            block.add_adapter(language, config)

    def remove(self, model: Any, language: str) -> None:
        for block in model.adapter_blocks.values():
            block.remove_adapter(language)

    def tensors(self, model: Any, language: str) -> dict[str, torch.Tensor]:
        return {
            f"layers.{i}.{name}": tensor
            for i, block in model.adapter_blocks.items()
            for name, tensor in block.adapters[language].state_dict().items()
        }

    def expected_shapes(self, model: Any, language: str, config: LanguageAdapterConfig) -> dict[str, tuple[int, ...]]:
        with torch.device("meta"):
            prototype = BottleneckAdapter.from_config(model.config.hidden_size, config)
        shapes = {name: tuple(t.shape) for name, t in prototype.state_dict().items()}
        return {f"layers.{i}.{name}": shape for i in model.adapter_blocks for name, shape in shapes.items()}

    def modules(self, model: Any, language: str) -> list[nn.Module]:
        return [block.adapters[language] for block in model.adapter_blocks.values()]

    def holds(self, parameter_name: str, language: str) -> bool:
        return f"{ADAPTER_MODULE_NAME}.adapters.{language}." in parameter_name
