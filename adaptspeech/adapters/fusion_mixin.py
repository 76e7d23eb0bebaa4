"""The SimAdapter fusion part of the models' adapter API: add, activate, compute, save and load the fusion over the
languages' adapters, and its regulariser.

Mixed into :class:`~adaptspeech.adapters.mixin.LanguageAdapterMixin` (which provides ``_check_languages``,
``_adapter_type_of``, ``_place``, ``_placement``, ``sync_routing`` and ``_provenance``); it relies on ``self.config``
and ``self.adapter_blocks`` (encoder layer index -> :class:`~adaptspeech.adapters.block.LanguageAdapterBlock`).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import torch

from .adapter_types import fusable_types
from .block import LanguageAdapterBlock
from .config import FusionConfig
from .files import (
    FUSION_CONFIG,
    FUSION_WEIGHTS,
    AdapterLoadError,
    check_shapes,
    copy_tensors,
    read_meta,
    read_tensors,
    resolve_file,
    write_tensors,
)
from .fusion import SimAdapterFusion


class FusionMixin:
    """SimAdapter fusion over the model's language adapters (Hou et al. 2022)."""

    config: Any
    adapter_blocks: dict[int, LanguageAdapterBlock]

    def add_fusion(self, languages: list[str], activate: bool = True, **settings: Any) -> None:
        """Create SimAdapter fusion over ``languages`` in every adapter layer (replacing an existing one).

        Args:
            languages: the fused languages, in order; each needs an adapter of a type SimAdapter fuses
                (bottleneck).
            activate: make the fusion the active path at once.
            **settings: other :class:`FusionConfig` fields (``target_language``, ``temperature``, ...).
        """
        self._check_languages(languages, "add_fusion")
        fusion_config = FusionConfig(languages=list(languages), **settings)
        unfusable = [lang for lang in languages if not self._adapter_type_of(lang).fusable]
        if unfusable:
            types = {lang: self.config.adapters[lang].adapter_type for lang in unfusable}
            raise ValueError(f"SimAdapter fuses {' or '.join(fusable_types())} adapters; {types} cannot be fused")
        for block in self.adapter_blocks.values():
            block.set_fusion(fusion_config)
        self._place(block.fusion for block in self.adapter_blocks.values())
        self.config.fusion = fusion_config
        self.fusion_guide_weight = fusion_config.guide_weight
        if activate:
            self.set_fusion_active(True)

    def remove_fusion(self) -> None:
        for block in self.adapter_blocks.values():
            block.set_fusion(None)
        self.config.fusion = None
        self.config.fusion_active = False
        self.sync_routing()

    def set_fusion_active(self, active: bool = True) -> None:
        """Route through the SimAdapter fusion (True) or through the active single adapters (False)."""
        if active and self.config.fusion is None:
            raise ValueError("no fusion to activate: call add_fusion(languages) first")
        self.config.fusion_active = bool(active)
        if active:
            self.config.active_languages = list(self.config.fusion.languages)
        self.sync_routing()

    def set_fusion_recompute(self, enable: bool = True) -> None:
        """Recompute the adapters and the fusion of every layer in backward instead of keeping their activations
        (activation checkpointing of the fusion block alone; see :class:`SimAdapterFusion`). Applies to the current
        fusion; not saved."""
        if self.config.fusion is None:
            raise ValueError("no fusion to recompute: call add_fusion(languages) first")
        for module in self.modules():
            if isinstance(module, SimAdapterFusion):
                module.recompute = bool(enable)

    def set_fusion_path(self, path: str) -> None:
        """Compute every layer's fusion on ``path``: ``"stacked"`` (the default), ``"reference"`` (each adapter's
        own forward, as before the stacked path: the same function, for before / after measurements) or
        ``"recompute"`` (as :meth:`set_fusion_recompute`). Applies to the current fusion; not saved.

        Raises:
            ValueError: no fusion, or an unknown path (naming the allowed ones).
        """
        if self.config.fusion is None:
            raise ValueError(f"no fusion to compute on the {path!r} path: call add_fusion(languages) first")
        for module in self.modules():
            if isinstance(module, SimAdapterFusion):
                module.set_path(path)

    # --- files -------------------------------------------------------------------------------------------------
    def save_fusion(self, folder: str | os.PathLike) -> Path:
        """Write ``fusion.safetensors`` / ``fusion.json`` (the SimAdapter layers, not the fused adapters)."""
        if self.config.fusion is None:
            raise ValueError("the model has no fusion to save")
        tensors = {
            f"layers.{i}.{k}": v
            for i, block in self.adapter_blocks.items()
            for k, v in block.fusion.state_dict().items()
        }
        meta = {"fusion": self.config.fusion.to_dict(), **self._provenance()}
        return write_tensors(folder, FUSION_WEIGHTS, FUSION_CONFIG, tensors, meta)

    def load_fusion(
        self,
        path_or_repo: str | os.PathLike,
        revision: str | None = None,
        token: str | bool | None = None,
        activate: bool = True,
    ) -> None:
        """Load a fusion saved by :meth:`save_fusion`; its languages' adapters must be loaded already.

        Atomic like :meth:`load_adapter`: the settings, the fused languages and every tensor shape are checked
        before the model's current fusion (if any) is replaced.
        """
        meta_path = resolve_file(path_or_repo, FUSION_CONFIG, revision, token)
        weights_path = resolve_file(path_or_repo, FUSION_WEIGHTS, revision, token)
        meta = read_meta(meta_path)
        try:
            fusion_config = FusionConfig.from_dict(dict(meta["fusion"]))
        except (KeyError, TypeError, ValueError) as err:
            raise AdapterLoadError(f"{meta_path}: fusion settings do not fit: {err}") from err
        try:
            self._check_languages(fusion_config.languages, f"{meta_path}")
        except KeyError as err:
            raise AdapterLoadError(str(err.args[0])) from err
        source = read_tensors(weights_path)
        with torch.device("meta"):
            prototype = SimAdapterFusion(self.config.hidden_size, fusion_config.num_entries)
        shapes = {k: tuple(v.shape) for k, v in prototype.state_dict().items()}
        expected = {f"layers.{i}.{k}": shape for i in self.adapter_blocks for k, shape in shapes.items()}
        check_shapes(expected, source, weights_path)
        settings = fusion_config.to_dict()
        languages = settings.pop("languages")
        self.add_fusion(languages, activate=activate, **settings)
        target = {
            f"layers.{i}.{k}": v
            for i, block in self.adapter_blocks.items()
            for k, v in block.fusion.state_dict().items()
        }
        copy_tensors(target, source)

    # --- fusion losses -----------------------------------------------------------------------------------------
    def fusion_regularizer(self) -> torch.Tensor:
        """Unweighted ``L_reg = sum_layers sum_ij (I - W_V)_ij^2``; zero without fusion."""
        terms = [block.regularizer() for block in self.adapter_blocks.values() if block.fusion is not None]
        if not terms:
            device, dtype = self._placement()
            return torch.zeros((), device=device, dtype=dtype)
        return torch.stack(terms).sum()
