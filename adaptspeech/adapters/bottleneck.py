"""Per-language bottleneck adapter (Houlsby-style, as in the official SimAdapter code and MMS)."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

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
        """Build from a :class:`~adaptspeech.adapters.config.LanguageAdapterConfig` (or anything with its fields)."""
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
