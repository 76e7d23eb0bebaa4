"""Output heads. :data:`HEADS` holds, per head name a config may use, a :class:`HeadSpec`: the model class that
carries the head, the decoders that can read it and the default one.

Everything that must know a head (stage building, model loading in the CLI, the recipe, pre-flight checks, the
decoding options) asks this table; adding a head is its module plus one :func:`register_head` call here.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any

from ..registry import Registry
from .ctc import CTCHead

#: decoders that read a CTC head / an attention (LAS) head / both.
CTC_DECODERS = ("ctc_greedy", "ctc_beam")
ATTENTION_DECODERS = ("attention_greedy", "attention_beam")
JOINT_DECODERS = ("joint",)


@dataclass(frozen=True)
class HeadSpec:
    """What a head is and supports.

    Args:
        name: the ``AdaptSpeechConfig.head`` value.
        model_class_path: ``"module:Class"`` of the model class that carries it (imported on first use, so that the
            config can be checked without importing the models).
        decoders: the decoding methods (names of ``adaptspeech.decoding.DECODING_METHODS``) it supports.
        default_decoder: the decoder used when none is asked for.
        has_ctc / has_las: which output layers the model has (for messages and checks).
        description: one line for ``--help`` and errors.
    """

    name: str
    model_class_path: str
    decoders: tuple[str, ...]
    default_decoder: str
    has_ctc: bool
    has_las: bool
    description: str

    @property
    def model_class(self) -> Any:
        """The model class (e.g. ``AdaptSpeechForJointCTCAttention``)."""
        module, _, name = self.model_class_path.partition(":")
        return getattr(importlib.import_module(module), name)

    def check_decoder(self, method: str) -> None:
        """Raise ``ValueError`` naming the head and the decoders it supports unless it supports ``method``."""
        if method not in self.decoders:
            needs = (
                "a CTC head and an attention (LAS) head" if method in JOINT_DECODERS
                else "a CTC head" if method in CTC_DECODERS
                else "an attention (LAS) head" if method in ATTENTION_DECODERS
                else "a decoder this head does not have"
            )
            raise ValueError(
                f"decoding method {method!r} needs {needs}; head {self.name!r} ({self.description}) supports: "
                f"{', '.join(self.decoders)}"
            )


HEADS: Registry[HeadSpec] = Registry("head")


def register_head(spec: HeadSpec) -> HeadSpec:
    """Add ``spec`` to :data:`HEADS` under ``spec.name``."""
    return HEADS.register(spec.name)(spec)


def get_head(name: str) -> HeadSpec:
    """The :class:`HeadSpec` of head ``name`` (KeyError listing the allowed names)."""
    return HEADS.get(name)


register_head(HeadSpec(
    name="ctc",
    model_class_path="adaptspeech.modeling:AdaptSpeechForCTC",
    decoders=CTC_DECODERS,
    default_decoder="ctc_greedy",
    has_ctc=True,
    has_las=False,
    description="CTC only",
))
register_head(HeadSpec(
    name="las",
    model_class_path="adaptspeech.modeling:AdaptSpeechForJointCTCAttention",
    decoders=ATTENTION_DECODERS,
    default_decoder="attention_beam",
    has_ctc=False,
    has_las=True,
    description="Listen-Attend-Spell attention decoder only",
))
register_head(HeadSpec(
    name="ctc_las",
    model_class_path="adaptspeech.modeling:AdaptSpeechForJointCTCAttention",
    decoders=CTC_DECODERS + ATTENTION_DECODERS + JOINT_DECODERS,
    default_decoder="ctc_greedy",
    has_ctc=True,
    has_las=True,
    description="CTC and Listen-Attend-Spell, trained jointly",
))

__all__ = ["ATTENTION_DECODERS", "CTC_DECODERS", "HEADS", "JOINT_DECODERS", "CTCHead", "HeadSpec", "get_head",
           "register_head"]
