"""The bottleneck adapter type (Houlsby-style, as in the official SimAdapter code and MMS): its module, its settings
and its registration. One :class:`BottleneckAdapter` per language sits after the output of each adapter layer, in
the layer's language-adapter block (:mod:`adaptspeech.adapters.block`); SimAdapter fuses them and they can be MMS
adapters (:mod:`adaptspeech.adapters.mms`)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn
from torch.nn import functional as F

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
class BottleneckStack:
    """Several bottleneck adapters that read the same input, held as one down- and one up-projection.

    ``LayerNorm_i(x) = x_hat * g_i + b_i`` with the same statistics ``x_hat`` for every adapter, so adapter ``i``'s
    down-projection of its LayerNorm output is ``x_hat (D_i * g_i)^T + D_i b_i (+ its bias)``: the LayerNorm scales
    fold into the down weights and one product over the concatenated weights gives every adapter's bottleneck
    activations. The adapters of one stack share their bottleneck width (so ``[.., n * r]`` views as ``[.., n, r]``),
    activation, biases and which of their tensors train (so autograd computes weight gradients only for what trains).

    Args:
        indices: positions of the stacked adapters among the adapters given to :func:`stack_bottlenecks`.
        down_weight: ``[n * r, D]`` (LayerNorm scales folded in).
        down_bias: ``[n * r]`` or None (LayerNorm shifts and the down biases).
        up_weight: ``[D, n * r]`` (the up weights side by side).
        up_bias: ``[n, D]`` or None.
        bottleneck: ``r``.
        activation: the adapters' activation module.
    """

    indices: list[int]
    down_weight: torch.Tensor
    down_bias: torch.Tensor | None
    up_weight: torch.Tensor
    up_bias: torch.Tensor | None
    bottleneck: int
    activation: nn.Module

    @property
    def count(self) -> int:
        """``n``, the number of stacked adapters."""
        return len(self.indices)

    def hidden(self, normalized: torch.Tensor) -> torch.Tensor:
        """Every stacked adapter's bottleneck activations, ``[M, D]`` normalized input -> ``[M, n * r]``."""
        return self.activation(F.linear(normalized, self.down_weight, self.down_bias))


def _layer_norm_eps(adapter: BottleneckAdapter) -> float | None:
    """The adapter's LayerNorm epsilon, None without LayerNorm."""
    return adapter.layer_norm.eps if isinstance(adapter.layer_norm, nn.LayerNorm) else None


def _stack_key(adapter: BottleneckAdapter) -> tuple:
    """What the adapters of one :class:`BottleneckStack` must share: their structure only.

    Which tensors train is deliberately not part of it: the grouping decides the order of the sums in the fused
    products, so a model computes bit-identically whether its adapters train or not (a trained model and the same
    weights saved and loaded again give equal outputs). A frozen adapter stacked with one that trains gets its slice
    of the weight gradients computed and dropped (``3 r D`` multiply-adds per frame; none when the trained adapter has
    its own width, as a new target adapter usually has).
    """
    norm = adapter.layer_norm
    return (
        adapter.bottleneck,
        repr(adapter.act),
        adapter.down.bias is not None,
        adapter.up.bias is not None,
        isinstance(norm, nn.LayerNorm) and norm.weight is not None,
        isinstance(norm, nn.LayerNorm) and norm.bias is not None,
    )


def stackable(adapters: Sequence[nn.Module]) -> bool:
    """Whether :func:`stack_bottlenecks` computes ``adapters`` exactly as their own forwards do (up to rounding).

    They must all be plain :class:`BottleneckAdapter` modules in one dtype and on one device, with LayerNorms over their
    width of one epsilon on all or on none, an activation of :data:`ACTIVATIONS`, and no dropout that acts (dropout
    draws a mask per adapter output; with ``p = 0`` or in eval mode it is the identity).
    """
    if not adapters or any(type(a) is not BottleneckAdapter for a in adapters):
        return False
    eps = shared_layer_norm_eps(adapters)
    reference = adapters[0].down.weight
    for adapter in adapters:
        if _layer_norm_eps(adapter) != eps or type(adapter.act) not in ACTIVATIONS.values():
            return False
        if adapter.training and adapter.dropout.p > 0:
            return False
        norm = adapter.layer_norm
        if isinstance(norm, nn.LayerNorm) and tuple(norm.normalized_shape) != (adapter.hidden_size,):
            return False
        if any(p.dtype != reference.dtype or p.device != reference.device for p in adapter.parameters()):
            return False
    return True


def shared_layer_norm_eps(adapters: Sequence[BottleneckAdapter]) -> float | None:
    """The LayerNorm epsilon of the first adapter (:func:`stackable` checks that all share it); None: no LayerNorm."""
    return _layer_norm_eps(adapters[0])


def stack_bottlenecks(adapters: Sequence[BottleneckAdapter]) -> list[BottleneckStack]:
    """Group ``adapters`` (checked with :func:`stackable`) into :class:`BottleneckStack` groups, in order of first
    appearance; an adapter's index is its position in ``adapters``.

    The folded weights are built from the adapters' parameters inside the autograd graph: gradients reach the
    LayerNorm, down and up tensors of every adapter that trains.
    """
    groups: dict[tuple, list[int]] = {}
    for i, adapter in enumerate(adapters):
        groups.setdefault(_stack_key(adapter), []).append(i)
    stacks = []
    for indices in groups.values():
        members = [adapters[i] for i in indices]
        first = members[0]
        down = torch.stack([a.down.weight for a in members])  # [n, r, D]
        bias = torch.stack([a.down.bias for a in members]) if first.down.bias is not None else None  # [n, r]
        if isinstance(first.layer_norm, nn.LayerNorm):
            ln = first.layer_norm
            if ln.bias is not None:
                shift = torch.stack([a.layer_norm.bias for a in members])  # [n, D]
                folded = torch.bmm(down, shift.unsqueeze(-1)).squeeze(-1)  # [n, r]: D_i b_i
                bias = folded if bias is None else bias + folded
            if ln.weight is not None:
                down = down * torch.stack([a.layer_norm.weight for a in members]).unsqueeze(1)  # D_i * g_i
        n, r, d = down.shape
        stacks.append(
            BottleneckStack(
                indices=indices,
                down_weight=down.reshape(n * r, d),
                down_bias=None if bias is None else bias.reshape(n * r),
                up_weight=torch.cat([a.up.weight for a in members], dim=1),
                up_bias=torch.stack([a.up.bias for a in members]) if first.up.bias is not None else None,
                bottleneck=r,
                activation=first.act,
            )
        )
    return stacks


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
