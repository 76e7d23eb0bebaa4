"""adaptspeech: per-language adapters, SimAdapter fusion, swappable encoder attention and LAS heads for
low-resource speech recognition on the Hugging Face stack.

Importing the package registers ``AdaptSpeechConfig`` with ``AutoConfig`` and ``AdaptSpeechForCTC`` with
``AutoModelForCTC``, so ``AutoModelForCTC.from_pretrained(folder)`` works without ``trust_remote_code``; it also
registers the fbank feature extractor (``AutoFeatureExtractor``) and adapts transformers' ASR pipeline to adaptspeech's
models (:mod:`adaptspeech.pipeline`), so ``pipeline("automatic-speech-recognition", model=folder)`` works.

Where PyTorch cannot be imported, the package imports its torch-free part alone: :mod:`adaptspeech.runtime` runs
exported ONNX models with onnxruntime (:class:`~adaptspeech.runtime.OnnxRecognizer`, the ``runtime`` extra).
"""

import importlib.util as _importlib_util

try:
    _HAS_TORCH = _importlib_util.find_spec("torch") is not None
except (ImportError, ValueError):  # a finder that refuses torch (the torch-free tests) or a broken torch entry
    _HAS_TORCH = False

if _HAS_TORCH:
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
