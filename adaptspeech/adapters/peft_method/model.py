"""``SpeechAdapterModel``: the peft tuner that puts bottleneck adapters (and SimAdapter fusions) after encoder
layers of HF wav2vec2 / wav2vec2-conformer models and of adaptspeech models."""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterator
from typing import Any

import torch
from peft.tuners.tuners_utils import BaseTuner, _ExcludedModule, check_target_module_exists
from torch import nn

from ..files import AdapterLoadError
from ..routing import BASE_ROW, routing_call
from .config import ENCODER_LAYERS_PATTERN, SpeechAdapterConfig
from .layer import SpeechAdapterLayer

_LAYER_INDEX = re.compile(r"(?:^|\.)(\d+)$")


class SpeechAdapterModel(BaseTuner):
    """Wraps each target encoder layer in a :class:`SpeechAdapterLayer`; used through peft's API.

    Example:
        ```python
        >>> from peft import PeftModel, get_peft_model
        >>> import adaptspeech.adapters.peft_method  # registers the method
        >>> from adaptspeech.adapters.peft_method import SpeechAdapterConfig
        >>> model = get_peft_model(Wav2Vec2ForCTC(config), SpeechAdapterConfig(bottleneck=32), adapter_name="ro")
        >>> model.add_adapter("cs", SpeechAdapterConfig(bottleneck=32))
        >>> model.add_adapter("fusion", SpeechAdapterConfig(fusion_of=["ro", "cs"]))
        >>> model.set_adapter("fusion")  # trains the fusion only; model.fusion_loss() gives the W_V regulariser
        ```

    Args:
        model (`nn.Module`): the model to adapt.
        config (`SpeechAdapterConfig` or `dict[str, SpeechAdapterConfig]`): the adapter settings.
        adapter_name (`str`): the adapter's name.
        low_cpu_mem_usage (`bool`, defaults to `False`): create the adapter weights on the meta device.
    """

    prefix: str = "speech_adapter_"
    tuner_layer_cls = SpeechAdapterLayer
    target_module_mapping: dict[str, list[str]] = {}  # noqa: RUF012 - peft's class attribute, unused here

    def _prepare_adapter_config(self, peft_config: SpeechAdapterConfig, model_config: dict) -> SpeechAdapterConfig:
        if peft_config.target_modules is None:
            peft_config.target_modules = ENCODER_LAYERS_PATTERN
        return peft_config

    @staticmethod
    def _check_target_module_exists(peft_config: SpeechAdapterConfig, key: str) -> bool | re.Match[str] | None:
        """peft's matching (``target_modules``, ``exclude_modules``), then ``target_layers`` on the last index."""
        found = check_target_module_exists(peft_config, key)
        if not found or isinstance(found, _ExcludedModule) or peft_config.target_layers is None:
            return found
        index = _LAYER_INDEX.search(key)
        return index is not None and int(index.group(1)) in peft_config.target_layers

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._register_load_state_dict_pre_hook(self._check_incoming_weights)
        self.register_load_state_dict_post_hook(lambda module, result: module._pending_loads.clear())

    @property
    def _pending_loads(self) -> set[str]:
        """Adapters created from a saved config whose weights have not been loaded yet."""
        return vars(self).setdefault("_adaptspeech_pending_loads", set())

    def inject_adapter(self, model: nn.Module, adapter_name: str, *args: Any, **kwargs: Any) -> None:
        super().inject_adapter(model, adapter_name, *args, **kwargs)
        if getattr(self.peft_config.get(adapter_name), "_adaptspeech_from_file", False):
            self._pending_loads.add(adapter_name)

    def _check_incoming_weights(self, state_dict: dict, prefix: str, *args: Any) -> None:
        """Load pre-hook: refuse a state dict whose speech-adapter tensors do not fit, before any tensor is copied
        (torch would copy the fitting ones and raise afterwards, leaving an adapter half overwritten). An adapter
        that peft's ``load_adapter`` / ``PeftModel.from_pretrained`` created for this load is removed again, so a
        failed load leaves the adapters, their weights and the active adapter as they were."""
        own = self.state_dict()
        bad = []
        for key, tensor in state_dict.items():
            name = key[len(prefix):] if key.startswith(prefix) else None
            if name in own and tuple(own[name].shape) != tuple(tensor.shape) and self.prefix in name:
                bad.append((key, tuple(tensor.shape), tuple(own[name].shape)))
        if not bad:
            return
        containers = SpeechAdapterLayer.adapter_layer_names
        loading = sorted(
            adapter
            for adapter in self._pending_loads
            if any(f".{container}.{adapter}." in key for key, _, _ in bad for container in containers)
        )
        self._discard(loading)
        key, got, want = bad[0]
        raise AdapterLoadError(
            f"speech adapter weights do not fit this model: {key} has shape {got}, the model expects {want}"
            f"{f' ({len(bad)} tensors differ)' if len(bad) > 1 else ''}; nothing was loaded"
            f"{f', adapter(s) {loading} removed again' if loading else ''}"
        )

    def _discard(self, names: list[str]) -> None:
        """Delete adapters created for a failed load, keeping the active adapter and every ``requires_grad``."""
        if not names:
            return
        active = self.active_adapter
        flags = [(p, p.requires_grad) for p in self.model.parameters()]
        for name in names:
            self.delete_adapter(name)
            self._pending_loads.discard(name)
        self.active_adapter = active
        for module in self.model.modules():
            if isinstance(module, SpeechAdapterLayer):
                module._active_adapter = active
        for param, flag in flags:
            param.requires_grad = flag

    def _hidden_size(self, peft_config: SpeechAdapterConfig) -> int:
        if peft_config.hidden_size is not None:
            return peft_config.hidden_size
        hidden_size = getattr(getattr(self.model, "config", None), "hidden_size", None)
        if not isinstance(hidden_size, int):
            raise ValueError(
                f"SpeechAdapterConfig.hidden_size is not set and the model ({type(self.model).__name__}) has no "
                "config.hidden_size: pass hidden_size=<width of the encoder layer output>"
            )
        return hidden_size

    def _create_and_replace(
        self,
        peft_config: SpeechAdapterConfig,
        adapter_name: str,
        target: nn.Module,
        target_name: str,
        parent: nn.Module,
        current_key: str,
        parameter_name: str | None = None,
    ) -> None:
        if isinstance(target, SpeechAdapterLayer):
            target.update_layer(adapter_name, peft_config)
            return
        if peft_config.is_fusion:
            raise ValueError(
                f"fusion adapter {adapter_name!r}: {current_key} has no speech adapters; add or load the fused "
                f"adapters {peft_config.fusion_of} on the same target layers first"
            )
        new_module = SpeechAdapterLayer(target, adapter_name, peft_config, self._hidden_size(peft_config))
        if adapter_name not in self.active_adapters:
            new_module.requires_grad_(False)  # an added adapter is not trainable until it is set active
        self._replace_module(parent, target_name, new_module, target)

    @classmethod
    def _remove_adapter_name_from_key(cls, key: str, adapter_name: str) -> str:
        """Drop the adapter name from a state-dict key, e.g. ``...speech_adapter_bottleneck.ro.down.weight`` ->
        ``...speech_adapter_bottleneck.down.weight``; peft's default only drops a name just before the last
        component (``lora_A.ro.weight``), but our adapters are nested modules. Saving and loading both use this
        mapping, so a saved adapter loads under any name."""
        for container in SpeechAdapterLayer.adapter_layer_names:
            marker = f".{container}.{adapter_name}."
            if marker in key:
                return key.replace(marker, f".{container}.", 1)
        return super()._remove_adapter_name_from_key(key, adapter_name)

    @contextlib.contextmanager
    def _enable_peft_forward_hooks(self, *args: Any, **kwargs: Any) -> Iterator[None]:
        """peft's per-call hook: ``adapter_names`` (one adapter name per utterance, ``"__base__"`` for none) routes
        each utterance to its own adapter when several are active (see :class:`SpeechAdapterLayer`); unlike
        peft's LoRA this also works in training (multilingual adapter training in one batch)."""
        adapter_names = kwargs.pop("adapter_names", None)
        if adapter_names is None:
            yield
            return
        known = {
            name
            for module in self.model.modules()
            if isinstance(module, SpeechAdapterLayer)
            for name in module.speech_adapter_bottleneck
        }
        unknown = sorted({name for name in adapter_names if name != BASE_ROW} - known)
        if unknown:
            raise ValueError(
                f"adapter_names {unknown} are not speech adapters of this model; its adapters: {sorted(known)}"
            )
        with routing_call(row_languages=list(adapter_names)):
            yield

    # --- fusion losses -----------------------------------------------------------------------------------------
    def _fusion_name(self, adapter_name: str | None) -> str:
        if adapter_name is None:
            fusions = [a for a in self.active_adapters if self.peft_config[a].is_fusion]
            if len(fusions) != 1:
                raise ValueError(f"name the fusion adapter: active adapters {self.active_adapters}")
            return fusions[0]
        if adapter_name not in self.peft_config or not self.peft_config[adapter_name].is_fusion:
            fusions = sorted(a for a, c in self.peft_config.items() if c.is_fusion)
            raise ValueError(f"{adapter_name!r} is not a fusion adapter; fusion adapters: {fusions}")
        return adapter_name

    def fusion_regularizer(self, adapter_name: str | None = None) -> torch.Tensor:
        """Unweighted ``L_reg = sum_layers sum_ij (I - W_V)_ij^2`` of a fusion adapter (default: the active one)."""
        name = self._fusion_name(adapter_name)
        terms = [
            term
            for module in self.model.modules()
            if isinstance(module, SpeechAdapterLayer)
            and (term := module.fusion_regularizer(name)) is not None
        ]
        return torch.stack(terms).sum()

    def fusion_loss(self, adapter_name: str | None = None) -> torch.Tensor:
        """``fusion_reg_weight * L_reg``, to add to the task loss while training a fusion adapter."""
        name = self._fusion_name(adapter_name)
        return self.peft_config[name].fusion_reg_weight * self.fusion_regularizer(name)
