"""The per-layer home of the language adapters and the fusion, hooked onto an encoder layer.

peft replaces a target module by a wrapper; we attach a :class:`LanguageAdapterBlock` as a *child* of each
chosen encoder layer (``layer.language_adapters``) and apply it with a forward hook on the layer. The backbone's own
parameter names therefore stay exactly those of the HF checkpoint (a pretrained wav2vec2 state dict loads unchanged),
and the adapters live beside them under ``...layers.<i>.language_adapters.adapters.<lang>``.

Which adapters run is decided by the model's :class:`~adaptspeech.adapters.routing.AdapterRouting` settings (or
the running call's :class:`~adaptspeech.adapters.routing.RoutingOverride`: :func:`~adaptspeech.adapters.routing.
effective_routing`) and, for per-utterance languages, by the :class:`~adaptspeech.adapters.routing.RoutingCall` of
the running forward;
what they do is :mod:`adaptspeech.adapters.layer_forward` (shared with the peft ``speech_adapter`` layer):

* fusion active: every fused language's adapter runs on the layer output ``z`` and SimAdapter mixes them;
* one active language: ``y = adapter_lang(z)``;
* several active languages without fusion: each utterance goes through the adapter of its own language, given
  per call as ``lang_ids`` (multilingual adapter training in one batch);
* no active language: the layer output is left unchanged.

No per-call tensor is kept on the block: the pre-FFN residual the fusion needs travels from the capturing hook to
the layer-output hook inside the running :class:`~adaptspeech.adapters.routing.RoutingCall`.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING

import torch
from torch import nn

from .adapter_types import ADAPTER_MODULE_NAME
from .bottleneck import BottleneckAdapter
from .fusion import SimAdapterFusion
from .layer_forward import fuse, route
from .routing import AdapterRouting, RoutingCall, current_call, effective_routing

if TYPE_CHECKING:
    from .bottleneck import BottleneckAdapterConfig
    from .config import FusionConfig

__all__ = ["AdapterRouting", "LanguageAdapterBlock", "mark_initialized"]


def mark_initialized(module: nn.Module) -> None:
    """Tell transformers' ``post_init`` not to re-initialise a module that initialised itself (e.g. ``W_V``)."""
    for sub in module.modules():
        sub._is_hf_initialized = True


class LanguageAdapterBlock(nn.Module):
    """Adapters (one per language, in a ModuleDict) and an optional SimAdapter fusion for one encoder layer.

    Args:
        hidden_size (`int`): width of the layer output.
        layer_index (`int`): index of the encoder layer (for messages and the per-call scratch keys).
        routing (`AdapterRouting`): the model's routing settings (read, never written, by the block).
    """

    def __init__(self, hidden_size: int, layer_index: int, routing: AdapterRouting) -> None:
        super().__init__()
        self.hidden_size = hidden_size
        self.layer_index = layer_index
        self.routing = routing
        self.adapters = nn.ModuleDict()
        self.fusion: SimAdapterFusion | None = None
        self.fusion_config: FusionConfig | None = None

    # --- construction ------------------------------------------------------------------------------------------
    def add_adapter(self, language: str, config: BottleneckAdapterConfig) -> BottleneckAdapter:
        if language in self.adapters:
            raise ValueError(f"layer {self.layer_index} already has an adapter for language {language!r}")
        adapter = BottleneckAdapter.from_config(self.hidden_size, config)
        mark_initialized(adapter)
        self.adapters[language] = adapter
        return adapter

    def remove_adapter(self, language: str) -> None:
        del self.adapters[language]

    def set_fusion(self, config: FusionConfig | None) -> None:
        """Create (or drop, with None) this layer's SimAdapter over ``config.languages``."""
        if config is None:
            self.fusion, self.fusion_config = None, None
            return
        missing = [lang for lang in config.languages if lang not in self.adapters]
        if missing:
            raise ValueError(
                f"cannot fuse {missing} in encoder layer {self.layer_index}: no bottleneck adapter for them "
                f"(this layer has {sorted(self.adapters)})"
            )
        fusion = SimAdapterFusion(self.hidden_size, config.num_entries, temperature=config.temperature)
        mark_initialized(fusion)
        self.fusion, self.fusion_config = fusion, config

    def attach(self, layer: nn.Module, residual_module: nn.Module) -> None:
        """Register the hooks: capture the pre-FFN LayerNorm output, then transform the layer's output."""
        residual_module.register_forward_hook(functools.partial(_capture_residual, self))
        layer.register_forward_hook(_apply_language_adapters)

    @property
    def fusing(self) -> bool:
        """The fusion is the active path of this layer (for the running call)."""
        return self.fusion is not None and effective_routing(self.routing).fusion_active

    # --- forward -------------------------------------------------------------------------------------------------
    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        """Apply the routed adapters (or the fusion) to the layer output [B, T, D] -> [B, T, D]."""
        call = current_call()
        residual = None if call is None else call.residuals.pop(self.layer_index, None)
        routing = effective_routing(self.routing)
        if routing.fusion_active and self.fusion is not None:
            return self._fuse(hidden_states, residual, call)
        return route(
            hidden_states,
            self.adapters,
            routing.active_languages,
            None if call is None else call.row_languages,
            f"encoder layer {self.layer_index}",
        )

    def _fuse(
        self, hidden_states: torch.Tensor, residual: torch.Tensor | None, call: RoutingCall | None
    ) -> torch.Tensor:
        assert self.fusion is not None and self.fusion_config is not None
        output, weights = fuse(hidden_states, self.fusion, self.fusion_config, self.adapters, residual)
        if call is not None and call.collect_fusion_weights:
            call.fusion_weights[self.layer_index] = weights
        return output

    def regularizer(self) -> torch.Tensor | None:
        """This layer's ``L_reg`` (unweighted), or None without fusion."""
        return None if self.fusion is None else self.fusion.regularizer()


def _capture_residual(block: LanguageAdapterBlock, module: nn.Module, args: tuple, output: torch.Tensor) -> None:
    call = current_call()
    if call is not None and block.fusing:
        call.residuals[block.layer_index] = output


def _apply_language_adapters(layer: nn.Module, args: tuple, output: torch.Tensor | tuple) -> torch.Tensor | tuple:
    block: LanguageAdapterBlock = getattr(layer, ADAPTER_MODULE_NAME)
    if isinstance(output, tuple):
        return (block(output[0]), *output[1:])
    return block(output)
