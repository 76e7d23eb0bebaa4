"""``SpeechAdapterLayer``: a peft tuner layer wrapping one encoder layer with per-name bottleneck adapters."""

from __future__ import annotations

import contextlib
from typing import Any

import torch
from peft.tuners.tuners_utils import BaseTunerLayer
from torch import nn

from ...backbones import get_backbone_spec
from ..bottleneck import BottleneckAdapter
from ..config import FusionConfig
from ..fusion import SimAdapterFusion
from ..layer_forward import fuse, route
from ..routing import current_call, current_override, routing_call
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
    * one active bottleneck adapter ``a``: ``a(z) = z + up(act(down(LN(z))))`` for every utterance;
    * several active bottleneck adapters: each utterance goes through the adapter named for it in the call
      (``peft_model(..., adapter_names=[...])``, one name per utterance, ``"__base__"`` for none), exactly as the
      native adaptspeech block routes by ``lang_ids``: both run :mod:`adaptspeech.adapters.layer_forward`. Deltas are
      never summed (peft's LoRA sums them; a per-language adapter has no meaning on another language's speech),
      and several active adapters without per-utterance names are refused;
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
        """Hand the pre-FFN LayerNorm output to this layer's fusion through the running routing call."""
        call = current_call()
        if call is not None and not self.disable_adapters and self._active()[1]:
            call.residuals[id(self)] = output

    # --- forward -------------------------------------------------------------------------------------------------
    def _active(self) -> tuple[list[str], list[str]]:
        """(active bottleneck adapters, active fusion adapters) present on this layer. A call with a routing override
        (:class:`~adaptspeech.adapters.routing.RoutingOverride`) runs the override's languages (its fusion on: the
        active fusion adapters; off: none) instead of peft's active adapters."""
        active = self.active_adapters
        override = current_override()
        if override is not None:
            fusions = [a for a in active if a in self.speech_adapter_fusion] if override.fusion_active else []
            if fusions:
                return [], fusions
            return [a for a in override.active_languages if a in self.speech_adapter_bottleneck], []
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
        call = current_call()
        with contextlib.nullcontext(call) if call is not None else routing_call() as call:
            output = self.base_layer(hidden_states, *args, **kwargs)
            ffn_input = call.residuals.pop(id(self), None)
        z = output[0] if isinstance(output, tuple) else output
        if fusions:
            name = fusions[0]
            settings = self.speech_adapter_fusion_settings[name]
            fusion = self.speech_adapter_fusion[name]
            y, _ = fuse(z, fusion, settings, self.speech_adapter_bottleneck, ffn_input)
        else:
            y = route(z, self.speech_adapter_bottleneck, adapters, call.row_languages, "speech_adapter layer")
        return (y, *output[1:]) if isinstance(output, tuple) else y

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
