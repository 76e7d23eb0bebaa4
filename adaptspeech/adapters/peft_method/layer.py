"""``SpeechAdapterLayer``: a peft tuner layer wrapping one encoder layer with per-name bottleneck adapters."""

from __future__ import annotations

from typing import Any

import torch
from peft.tuners.tuners_utils import BaseTunerLayer
from torch import nn

from ...backbones import get_backbone_spec
from ..bottleneck import BottleneckAdapter
from ..config import FusionConfig
from ..simadapter import SimAdapterFusion, simadapter_output
from .config import SpeechAdapterConfig


def ffn_input_module(layer: nn.Module) -> nn.Module:
    """The module of an encoder layer whose output is the layer's pre-FFN LayerNorm output (the SimAdapter
    residual ``"ffn_input"``), found with the backbone specs: conformer layers (``ffn2_layer_norm``) or wav2vec2
    layers of either layer-norm variant."""
    if hasattr(layer, "ffn2_layer_norm"):
        return get_backbone_spec("wav2vec2_conformer").ffn_input_module(layer)
    if hasattr(layer, "final_layer_norm") and hasattr(layer, "layer_norm"):
        return get_backbone_spec("wav2vec2").ffn_input_module(layer)
    raise ValueError(
        f"fusion_residual='ffn_input' needs a wav2vec2 or wav2vec2-conformer encoder layer, got "
        f"{type(layer).__name__}; use fusion_residual='query' or 'none' for other layers"
    )


class SpeechAdapterLayer(nn.Module, BaseTunerLayer):
    """An encoder layer (``base_layer``) followed by its active bottleneck adapter(s) or fusion.

    Holds one :class:`BottleneckAdapter` per adapter name in ``speech_adapter_bottleneck`` and one
    :class:`SimAdapterFusion` per fusion adapter name in ``speech_adapter_fusion`` (peft's per-name ModuleDicts).
    The forward runs the encoder layer, then, on its output ``z`` [B, T, D]:

    * no active adapter (or adapters disabled): ``z`` unchanged;
    * one active bottleneck adapter ``a``: ``a(z) = z + up(act(down(LN(z))))``;
    * several active bottleneck adapters: ``z + sum_i (a_i(z) - z)``, i.e. their branches are summed, as peft
      sums the deltas of several active LoRA adapters;
    * an active fusion adapter (it must be the only active one): SimAdapter over its fused adapters.

    Bottleneck adapters cannot be merged into the encoder layer (they are non-linear): ``merge`` raises.

    Args:
        base_layer (`nn.Module`): the encoder layer.
        adapter_name (`str`): the first adapter's name.
        config (`SpeechAdapterConfig`): its settings.
        hidden_size (`int`): width of the layer output.
    """

    adapter_layer_names = ("speech_adapter_bottleneck", "speech_adapter_fusion")
    other_param_names = ("speech_adapter_fusion_settings",)

    def __init__(
        self, base_layer: nn.Module, adapter_name: str, config: SpeechAdapterConfig, hidden_size: int
    ) -> None:
        super().__init__()
        self.base_layer = base_layer
        self.hidden_size = hidden_size
        self.speech_adapter_bottleneck = nn.ModuleDict()
        self.speech_adapter_fusion = nn.ModuleDict()
        self.speech_adapter_fusion_settings: dict[str, FusionConfig] = {}
        self._disable_adapters = False
        self.merged_adapters: list[str] = []
        self._capture_ffn_input = False
        self._ffn_input: torch.Tensor | None = None
        self._ffn_hook: Any = None
        self._active_adapter = adapter_name
        self.update_layer(adapter_name, config)

    # --- construction ------------------------------------------------------------------------------------------
    def update_layer(self, adapter_name: str, config: SpeechAdapterConfig) -> None:
        """Add the adapter (or fusion) ``adapter_name`` to this layer."""
        if adapter_name in self.speech_adapter_bottleneck or adapter_name in self.speech_adapter_fusion:
            raise ValueError(f"this layer already has an adapter named {adapter_name!r}")
        settings = config.fusion_settings()
        if settings is None:
            adapter = config.bottleneck_settings()
            self.speech_adapter_bottleneck[adapter_name] = BottleneckAdapter.from_config(self.hidden_size, adapter)
        else:
            missing = [name for name in settings.languages if name not in self.speech_adapter_bottleneck]
            if missing:
                raise ValueError(
                    f"fusion adapter {adapter_name!r} fuses {missing}, which this layer does not have; its "
                    f"bottleneck adapters: {sorted(self.speech_adapter_bottleneck)}. Add or load them first."
                )
            if settings.residual == "ffn_input" and self._ffn_hook is None:
                self._ffn_hook = ffn_input_module(self.base_layer).register_forward_hook(self._keep_ffn_input)
            self.speech_adapter_fusion[adapter_name] = SimAdapterFusion(
                self.hidden_size, settings.num_entries, temperature=settings.temperature
            )
            self.speech_adapter_fusion_settings[adapter_name] = settings
        self._move_to_base_device(adapter_name)
        self.set_adapter(self.active_adapters, inference_mode=config.inference_mode)

    def _move_to_base_device(self, adapter_name: str) -> None:
        reference = next(self.base_layer.parameters(), None)
        if reference is None or reference.device.type == "meta":
            return
        for name in self.adapter_layer_names:
            container = getattr(self, name)
            if adapter_name in container:
                container[adapter_name].to(reference.device)

    def _keep_ffn_input(self, module: nn.Module, args: tuple, output: torch.Tensor) -> None:
        if self._capture_ffn_input:
            self._ffn_input = output

    # --- forward -------------------------------------------------------------------------------------------------
    def _active(self) -> tuple[list[str], list[str]]:
        """(active bottleneck adapters, active fusion adapters) present on this layer."""
        active = self.active_adapters
        return (
            [a for a in active if a in self.speech_adapter_bottleneck],
            [a for a in active if a in self.speech_adapter_fusion],
        )

    def forward(self, hidden_states: torch.Tensor, *args: Any, **kwargs: Any) -> torch.Tensor | tuple:
        """Run the encoder layer, then the active adapter(s) on its output [B, T, D] (tuples keep their tail)."""
        if self.disable_adapters:
            return self.base_layer(hidden_states, *args, **kwargs)
        adapters, fusions = self._active()
        if not adapters and not fusions:
            return self.base_layer(hidden_states, *args, **kwargs)
        if fusions and len(adapters) + len(fusions) > 1:
            raise ValueError(
                f"a fusion adapter must be the only active adapter, active: {adapters + fusions}; call "
                f"set_adapter({fusions[0]!r})"
            )
        self._capture_ffn_input = bool(fusions)
        try:
            output = self.base_layer(hidden_states, *args, **kwargs)
            ffn_input = self._ffn_input
        finally:
            self._capture_ffn_input, self._ffn_input = False, None
        z = output[0] if isinstance(output, tuple) else output
        y = self._adapt(z, adapters, fusions, ffn_input)
        return (y, *output[1:]) if isinstance(output, tuple) else y

    def _adapt(
        self, z: torch.Tensor, adapters: list[str], fusions: list[str], ffn_input: torch.Tensor | None
    ) -> torch.Tensor:
        """The adapters' part of the forward on the layer output ``z`` [B, T, D], computed in the adapters'
        dtype (peft keeps adapter weights in float32 under a half-precision model) and returned in ``z``'s."""
        first = fusions[0] if fusions else adapters[0]
        container = self.speech_adapter_fusion if fusions else self.speech_adapter_bottleneck
        dtype = next(container[first].parameters()).dtype
        x = z.to(dtype)
        if fusions:
            settings = self.speech_adapter_fusion_settings[first]
            fused = [self.speech_adapter_bottleneck[lang] for lang in settings.languages]
            residual = None if ffn_input is None else ffn_input.to(dtype)
            y, _ = simadapter_output(self.speech_adapter_fusion[first], settings, fused, x, residual)
            return y.to(z.dtype)
        if len(adapters) == 1:
            return self.speech_adapter_bottleneck[first](x).to(z.dtype)
        delta = sum(self.speech_adapter_bottleneck[name](x) - x for name in adapters)
        return z + delta.to(z.dtype)

    # --- housekeeping ------------------------------------------------------------------------------------------
    def delete_adapter(self, adapter_name: str) -> None:
        fused_by = [f for f, s in self.speech_adapter_fusion_settings.items() if adapter_name in s.languages]
        if fused_by:
            raise ValueError(f"adapter {adapter_name!r} is fused by {fused_by}; delete the fusion first")
        super().delete_adapter(adapter_name)
        if not self.speech_adapter_fusion and self._ffn_hook is not None:
            self._ffn_hook.remove()
            self._ffn_hook = None

    def merge(self, safe_merge: bool = False, adapter_names: list[str] | None = None) -> None:
        raise NotImplementedError("bottleneck adapters are non-linear and cannot be merged into the encoder layer")

    def fusion_regularizer(self, adapter_name: str) -> torch.Tensor | None:
        """``sum_ij (I - W_V)_ij^2`` of this layer's fusion ``adapter_name``, or None if it has none."""
        if adapter_name not in self.speech_adapter_fusion:
            return None
        return self.speech_adapter_fusion[adapter_name].regularizer()

    def __repr__(self) -> str:
        return "speech_adapter." + super().__repr__()
