"""The bottleneck adapter and SimAdapter fusion as a PEFT method (``peft_type = "SPEECH_ADAPTER"``).

Once this module is imported (``from adaptspeech import SpeechAdapterConfig``; a bare ``import adaptspeech`` is
light and imports no peft) the method works through peft's own API on HF ``Wav2Vec2ForCTC`` /
``Wav2Vec2ConformerForCTC`` models and on ``AdaptSpeechForCTC``: ``get_peft_model(model,
SpeechAdapterConfig(...), adapter_name="ro")``, ``add_adapter``, ``set_adapter``, ``save_pretrained``,
``PeftModel.from_pretrained`` and ``load_adapter``.

How it is registered (:func:`register_speech_adapter`, run on import, idempotent): peft's
``register_peft_method`` refuses any name that is not a member of its closed ``PeftType`` enum. The options:

1. add a member to ``PeftType`` through the enum's private tables (``_member_map_`` ...): depends on CPython's
   enum internals and changes peft's enum for every user in the process;
2. write into ``peft.mapping``'s ``PEFT_TYPE_TO_*`` dictionaries directly: skips ``register_peft_method``'s
   checks (unique name, unique prefix, prefix consistency) and whatever a later peft adds to it;
3. (chosen) call ``register_peft_method`` itself while the name ``PeftType`` in ``peft.utils.peft_types``, the
   one its membership check reads, is bound to our one-member ``SpeechPeftType`` enum; the binding is restored at
   once. peft's enum is never modified, peft's own checks run, and the key registered is
   ``SpeechPeftType.SPEECH_ADAPTER``: a ``str`` enum member equal to ``"SPEECH_ADAPTER"``, which is all peft's
   lookups need (``adapter_config.json`` holds the string; ``PeftConfig.peft_type`` is typed ``str |
   PeftType``; peft reads ``.value`` only on enum members, which ours is).

The registration is checked afterwards; if a future peft stops reading the module-level ``PeftType`` the check
raises a ``RuntimeError`` naming the peft version instead of leaving the method half-registered.
"""

from __future__ import annotations

import threading

import peft
from peft.mapping import PEFT_TYPE_TO_CONFIG_MAPPING, PEFT_TYPE_TO_PREFIX_MAPPING, PEFT_TYPE_TO_TUNER_MAPPING
from peft.utils import peft_types

from .config import ENCODER_LAYERS_PATTERN, SpeechAdapterConfig, SpeechPeftType
from .layer import SpeechAdapterLayer
from .model import SpeechAdapterModel

METHOD_NAME = "speech_adapter"
PEFT_TYPE = SpeechPeftType.SPEECH_ADAPTER

_lock = threading.Lock()


def _registered() -> bool:
    return (
        PEFT_TYPE_TO_CONFIG_MAPPING.get(PEFT_TYPE) is SpeechAdapterConfig
        and PEFT_TYPE_TO_TUNER_MAPPING.get(PEFT_TYPE) is SpeechAdapterModel
        and PEFT_TYPE_TO_PREFIX_MAPPING.get(PEFT_TYPE) == SpeechAdapterModel.prefix
    )


def register_speech_adapter() -> None:
    """Register ``SpeechAdapterConfig`` / ``SpeechAdapterModel`` with peft (see the module docstring).

    Idempotent: a second call, or a re-import of this module, replaces this method's own earlier entries; an
    entry under ``"SPEECH_ADAPTER"`` left by some other code is an error.
    """
    with _lock:
        if _registered():
            return
        for mapping in (PEFT_TYPE_TO_CONFIG_MAPPING, PEFT_TYPE_TO_TUNER_MAPPING):
            previous = mapping.get(PEFT_TYPE)
            if previous is not None and not getattr(previous, "__module__", "").startswith(__name__):
                raise KeyError(f"another PEFT method is already registered as {PEFT_TYPE.value}: {previous!r}")
        for mapping in (PEFT_TYPE_TO_CONFIG_MAPPING, PEFT_TYPE_TO_TUNER_MAPPING, PEFT_TYPE_TO_PREFIX_MAPPING):
            mapping.pop(PEFT_TYPE, None)  # our own entries from an earlier import of this module
        original = peft_types.PeftType
        peft_types.PeftType = SpeechPeftType
        try:
            peft_types.register_peft_method(
                name=METHOD_NAME,
                config_cls=SpeechAdapterConfig,
                model_cls=SpeechAdapterModel,
                prefix=SpeechAdapterModel.prefix,
            )
        finally:
            peft_types.PeftType = original
        if not _registered():
            raise RuntimeError(
                f"registering the {METHOD_NAME!r} PEFT method failed with peft {peft.__version__}: "
                "register_peft_method no longer reads peft.utils.peft_types.PeftType"
            )


register_speech_adapter()

__all__ = [
    "ENCODER_LAYERS_PATTERN",
    "METHOD_NAME",
    "PEFT_TYPE",
    "SpeechAdapterConfig",
    "SpeechAdapterLayer",
    "SpeechAdapterModel",
    "SpeechPeftType",
    "register_speech_adapter",
]
