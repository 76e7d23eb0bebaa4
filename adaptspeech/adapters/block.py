"""The per-layer home of the language adapters and the fusion, hooked onto an encoder layer.

peft replaces a target module by a wrapper; we attach a :class:`LanguageAdapterBlock` as a *child* of each
chosen encoder layer (``layer.language_adapters``) and apply it with a forward hook on the layer. The backbone's own
parameter names therefore stay exactly those of the HF checkpoint (a pretrained wav2vec2 state dict loads unchanged),
and the adapters live beside them under ``...layers.<i>.language_adapters.adapters.<lang>``.

Which adapters run is decided by a :class:`AdapterRouting` object shared by all blocks of one model:

* fusion active: every fused language's adapter runs on the layer output ``z`` and SimAdapter mixes them;
* one active language: ``y = adapter_lang(z)``;
* several active languages without fusion: each utterance goes through the adapter of its own language, given
  per batch as ``lang_ids`` (multilingual adapter training in one batch);
* no active language: the layer output is left unchanged.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field

import torch
from torch import nn

from .bottleneck import BottleneckAdapter
from .config import FusionConfig, LanguageAdapterConfig
from .simadapter import SimAdapterFusion, simadapter_output


@dataclass
class AdapterRouting:
    """Forward-time state shared by the blocks of one model (not saved; the model sets it before each forward)."""

    active_languages: list[str] = field(default_factory=list)
    fusion_active: bool = False
    language_ids: list[str] = field(default_factory=list)
    lang_ids: torch.Tensor | None = None
    frame_mask: torch.Tensor | None = None
    collect_fusion_weights: bool = False
    fusion_weights: list[torch.Tensor] = field(default_factory=list)


def mark_initialized(module: nn.Module) -> None:
    """Tell transformers' ``post_init`` not to re-initialise a module that initialised itself (e.g. ``W_V``)."""
    for sub in module.modules():
        sub._is_hf_initialized = True


class LanguageAdapterBlock(nn.Module):
    """Adapters (one per language, in a ModuleDict) and an optional SimAdapter fusion for one encoder layer.

    Args:
        hidden_size (`int`): width of the layer output.
        layer_index (`int`): index of the encoder layer (for messages).
        routing (`AdapterRouting`): shared forward-time state.
    """

    def __init__(self, hidden_size: int, layer_index: int, routing: AdapterRouting) -> None:
        super().__init__()
        self.hidden_size = hidden_size
        self.layer_index = layer_index
        self.routing = routing
        self.adapters = nn.ModuleDict()
        self.fusion: SimAdapterFusion | None = None
        self.fusion_config: FusionConfig | None = None
        self._residual: torch.Tensor | None = None

    # --- construction ------------------------------------------------------------------------------------------
    def add_adapter(self, language: str, config: LanguageAdapterConfig) -> BottleneckAdapter:
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

    # --- forward -------------------------------------------------------------------------------------------------
    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        """Apply the routed adapters (or the fusion) to the layer output [B, T, D] -> [B, T, D]."""
        routing = self.routing
        residual, self._residual = self._residual, None
        if routing.fusion_active and self.fusion is not None:
            return self._fuse(hidden_states, residual)
        languages = [lang for lang in routing.active_languages if lang in self.adapters]
        if not languages:
            return hidden_states
        if len(routing.active_languages) == 1:
            return self.adapters[languages[0]](hidden_states)
        # several active languages (some may be LoRA languages, absent here): route each utterance
        return self._route_per_utterance(hidden_states, languages)

    def _fuse(self, hidden_states: torch.Tensor, residual: torch.Tensor | None) -> torch.Tensor:
        assert self.fusion is not None and self.fusion_config is not None
        adapters = [self.adapters[lang] for lang in self.fusion_config.languages]
        output, weights = simadapter_output(self.fusion, self.fusion_config, adapters, hidden_states, residual)
        if self.routing.collect_fusion_weights:
            self.routing.fusion_weights.append(weights)
        return output

    def _route_per_utterance(self, hidden_states: torch.Tensor, languages: list[str]) -> torch.Tensor:
        routing = self.routing
        if routing.lang_ids is None:
            raise ValueError(
                f"several languages are active ({languages}) without fusion: pass `lang_ids` (one per utterance) "
                "to forward, call set_active_languages([lang]) for one, or enable the fusion"
            )
        output = hidden_states.clone()
        for lang in languages:
            index = routing.language_ids.index(lang)
            rows = (routing.lang_ids == index).nonzero(as_tuple=True)[0]
            if rows.numel():
                output[rows] = self.adapters[lang](hidden_states[rows])
        return output

    def regularizer(self) -> torch.Tensor | None:
        """This layer's ``L_reg`` (unweighted), or None without fusion."""
        return None if self.fusion is None else self.fusion.regularizer()


def _capture_residual(block: LanguageAdapterBlock, module: nn.Module, args: tuple, output: torch.Tensor) -> None:
    if block.routing.fusion_active and block.fusion is not None:
        block._residual = output


def _apply_language_adapters(layer: nn.Module, args: tuple, output: torch.Tensor | tuple) -> torch.Tensor | tuple:
    block: LanguageAdapterBlock = layer.language_adapters
    if isinstance(output, tuple):
        return (block(output[0]), *output[1:])
    return block(output)
