"""adaptspeech: per-language adapters, SimAdapter fusion, swappable encoder attention and LAS heads for
low-resource speech recognition on the Hugging Face stack.

Importing the package registers ``AdaptSpeechConfig`` with ``AutoConfig`` and ``AdaptSpeechForCTC`` with
``AutoModelForCTC``, so ``AutoModelForCTC.from_pretrained(folder)`` works without ``trust_remote_code``.
"""

from .adapters.config import FusionConfig, LanguageAdapterConfig
from .adapters.peft_method import SpeechAdapterConfig
from .backbones import FbankConformerConfig, FbankConformerModel
from .configuration import AdaptSpeechConfig
from .modeling import AdaptSpeechForCTC, AdaptSpeechForJointCTCAttention, AdaptSpeechPreTrainedModel
from .modeling_outputs import AdaptSpeechOutput

__version__ = "0.1.0"

__all__ = [
    "AdaptSpeechConfig",
    "AdaptSpeechForCTC",
    "AdaptSpeechForJointCTCAttention",
    "AdaptSpeechOutput",
    "AdaptSpeechPreTrainedModel",
    "FbankConformerConfig",
    "FbankConformerModel",
    "FusionConfig",
    "LanguageAdapterConfig",
    "SpeechAdapterConfig",
]
