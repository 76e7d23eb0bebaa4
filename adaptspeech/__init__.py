"""adaptspeech: per-language adapters, SimAdapter fusion, swappable encoder attention and LAS heads for
low-resource speech recognition on the Hugging Face stack.

``import adaptspeech`` is light: it imports neither PyTorch nor transformers nor peft, so that the ``adaptspeech``
command answers ``--help`` at once and :mod:`adaptspeech.runtime` (exported ONNX models with onnxruntime, the
``runtime`` extra) runs without PyTorch's start-up. The public names below load on first use (PEP 562).

What registers with transformers, and when:

- importing :mod:`adaptspeech.modeling` (``from adaptspeech import AdaptSpeechForCTC``, or anything that builds or
  loads a model) registers ``AdaptSpeechConfig`` with ``AutoConfig``, ``AdaptSpeechForCTC`` with ``AutoModelForCTC``,
  the joint model with ``AutoModelForSpeechSeq2Seq`` and the fbank feature extractor with ``AutoFeatureExtractor`` /
  ``AutoProcessor``, so ``AutoModelForCTC.from_pretrained(folder)`` works without ``trust_remote_code``;
- importing :mod:`adaptspeech.pipeline` adapts transformers' ASR pipeline to adaptspeech's models, so
  ``pipeline("automatic-speech-recognition", model=folder)`` works;
- importing :mod:`adaptspeech.adapters.peft_method` (``from adaptspeech import SpeechAdapterConfig``) registers the
  ``speech_adapter`` PEFT method.

Taking any public name from the package (``from adaptspeech import AdaptSpeechConfig`` ...) does all three, as the
eager import of the whole stack did before.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .adapters import (
        AdapterDefaults,
        BottleneckAdapterConfig,
        FusionConfig,
        LanguageAdapterConfig,
        LoraAdapterConfig,
    )
    from .adapters.peft_method import SpeechAdapterConfig
    from .backbones import FbankConformerConfig, FbankConformerModel
    from .configuration import AdaptSpeechConfig
    from .feature_extraction import AdaptSpeechFeatureExtractor
    from .modeling import AdaptSpeechForCTC, AdaptSpeechForJointCTCAttention, AdaptSpeechPreTrainedModel
    from .modeling_outputs import AdaptSpeechOutput
    from .pipeline import AdaptSpeechRecognitionPipeline

__version__ = "0.1.0"

_EXPORTS: dict[str, str] = {
    "AdaptSpeechConfig": ".configuration",
    "AdaptSpeechFeatureExtractor": ".feature_extraction",
    "AdaptSpeechForCTC": ".modeling",
    "AdaptSpeechForJointCTCAttention": ".modeling",
    "AdaptSpeechOutput": ".modeling_outputs",
    "AdaptSpeechPreTrainedModel": ".modeling",
    "AdaptSpeechRecognitionPipeline": ".pipeline",
    "AdapterDefaults": ".adapters",
    "BottleneckAdapterConfig": ".adapters",
    "FbankConformerConfig": ".backbones",
    "FbankConformerModel": ".backbones",
    "FusionConfig": ".adapters",
    "LanguageAdapterConfig": ".adapters",
    "LoraAdapterConfig": ".adapters",
    "SpeechAdapterConfig": ".adapters.peft_method",
}
"""Each public name and the submodule that defines it."""

_REGISTERS = (".pipeline", ".adapters.peft_method")
"""Imported before any public name is taken: the model (Auto classes, feature extractor, processor), the ASR
pipeline and the PEFT method register, so that a name taken from the package finds transformers and peft ready (the
model imports peft anyway, for its LoRA adapters)."""

__all__ = [
    "AdaptSpeechConfig",
    "AdaptSpeechFeatureExtractor",
    "AdaptSpeechForCTC",
    "AdaptSpeechForJointCTCAttention",
    "AdaptSpeechOutput",
    "AdaptSpeechPreTrainedModel",
    "AdaptSpeechRecognitionPipeline",
    "AdapterDefaults",
    "BottleneckAdapterConfig",
    "FbankConformerConfig",
    "FbankConformerModel",
    "FusionConfig",
    "LanguageAdapterConfig",
    "LoraAdapterConfig",
    "SpeechAdapterConfig",
]
"""The public names (the keys of :data:`_EXPORTS`)."""


def __getattr__(name: str) -> Any:
    """Load a public name from its submodule on first use (and cache it on the package)."""
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    for registers in _REGISTERS:
        importlib.import_module(registers, __name__)
    value = getattr(importlib.import_module(module, __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_EXPORTS})
