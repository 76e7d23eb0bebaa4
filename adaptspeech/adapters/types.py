"""Adapter types: what a per-language adapter type is and can do, one class per type in :data:`ADAPTER_TYPES`.

An adapter type knows how its weights for one language are built into a model, removed, listed for saving and
loading (the live parameters, keyed as in ``adapter.<lang>.safetensors``), what shapes a file must have before any
of them is touched (so a load can be refused without changing the model), which modules to move to the model's
device and dtype, whether SimAdapter can fuse it and whether it can be an MMS adapter. Adding a type is one class
and one registration; the model's adapter API (:mod:`adaptspeech.adapters.mixin`) only asks this table.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar

import torch
from torch import nn

from ..registry import Registry
from .bottleneck import BottleneckAdapter

if TYPE_CHECKING:
    from .config import LanguageAdapterConfig


class AdapterType:
    """Base class of an adapter type (see the module docstring). ``model`` is an adaptspeech model."""

    name: ClassVar[str]
    #: SimAdapter can fuse adapters of this type (their output is a full layer output, not a weight delta).
    fusable: ClassVar[bool] = False
    #: adapters of this type can be MMS's ``Wav2Vec2AttnAdapterLayer`` (read from / written to MMS adapter files,
    #: :mod:`adaptspeech.adapters.mms`) when their settings and placement are MMS's.
    mms_format: ClassVar[bool] = False

    def build(self, model: Any, language: str, config: LanguageAdapterConfig) -> None:
        raise NotImplementedError

    def remove(self, model: Any, language: str) -> None:
        raise NotImplementedError

    def tensors(self, model: Any, language: str) -> dict[str, torch.Tensor]:
        """The live parameters of ``language`` (copying into them loads a file), keyed as in the file."""
        raise NotImplementedError

    def expected_shapes(self, model: Any, language: str, config: LanguageAdapterConfig) -> dict[str, tuple[int, ...]]:
        """Key -> shape that a file with ``config``'s settings must hold for this model; changes nothing."""
        raise NotImplementedError

    def modules(self, model: Any, language: str) -> list[nn.Module]:
        """The modules holding ``language``'s weights (to move them to the model's device and dtype)."""
        raise NotImplementedError


ADAPTER_TYPES: Registry[AdapterType] = Registry("adapter type")


@ADAPTER_TYPES.register("bottleneck")
class BottleneckType(AdapterType):
    """:class:`BottleneckAdapter` after the output of each adapter layer, in the layer's language-adapter block."""

    name = "bottleneck"
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


@ADAPTER_TYPES.register("lora")
class LoraType(AdapterType):
    """Stock peft LoRA on the attention projections of the adapter layers (:mod:`adaptspeech.adapters.lora`)."""

    name = "lora"

    def build(self, model: Any, language: str, config: LanguageAdapterConfig) -> None:
        from .lora import add_lora_language

        add_lora_language(model, language, config)

    def remove(self, model: Any, language: str) -> None:
        from .lora import remove_lora_language

        remove_lora_language(model, language)

    def tensors(self, model: Any, language: str) -> dict[str, torch.Tensor]:
        from .lora import lora_tensors

        return lora_tensors(model, language)

    def expected_shapes(self, model: Any, language: str, config: LanguageAdapterConfig) -> dict[str, tuple[int, ...]]:
        from .lora import lora_expected_shapes

        return lora_expected_shapes(model, language, config)

    def modules(self, model: Any, language: str) -> list[nn.Module]:
        from .lora import lora_modules

        return lora_modules(model, language)


def get_adapter_type(name: str) -> AdapterType:
    """The registered :class:`AdapterType` called ``name`` (KeyError listing the allowed names)."""
    entry = ADAPTER_TYPES.get(name)
    return entry() if isinstance(entry, type) else entry
