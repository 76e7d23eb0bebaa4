"""Output heads. :data:`HEADS` holds, per head name a config may use, a :class:`HeadSpec`: the model class that
carries the head, the output layers it has and the decoder used when none is asked for.

Everything that must know a head (stage building, model loading in the CLI, the recipe, pre-flight checks) asks this
table; which decoders can read a head follows from the output layers each decoder reads
(:func:`adaptspeech.decoding.registry.decoders_for`). Adding a head is its module plus one :func:`register_head` call
here.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any

from ..registry import Registry

HEAD_OUTPUTS: dict[str, str] = {"ctc": "a CTC head", "las": "an attention (LAS) head"}
"""The output layers a model may carry (as its attribute ``<name>_head``), in the order messages name them."""


@dataclass(frozen=True)
class HeadSpec:
    """What a head is and supports.

    Args:
        name: the ``AdaptSpeechConfig.head`` value.
        model_class_path: ``"module:Class"`` of the model class that carries it (imported on first use, so that the
            config can be checked without importing the models).
        outputs: the output layers the model has (names of :data:`HEAD_OUTPUTS`).
        default_decoder: the decoder used when none is asked for.
        description: one line for ``--help`` and errors.
    """

    name: str
    model_class_path: str
    outputs: frozenset[str]
    default_decoder: str
    description: str

    def __post_init__(self) -> None:
        unknown = sorted(set(self.outputs) - set(HEAD_OUTPUTS))
        if unknown:
            raise ValueError(f"head {self.name!r}: unknown output layer(s) {unknown}; allowed values: "
                             f"{', '.join(HEAD_OUTPUTS)}")

    @property
    def model_class(self) -> Any:
        """The model class (e.g. ``AdaptSpeechForJointCTCAttention``)."""
        module, _, name = self.model_class_path.partition(":")
        return getattr(importlib.import_module(module), name)

    @property
    def has_ctc(self) -> bool:
        """The model has a CTC output layer."""
        return "ctc" in self.outputs

    @property
    def has_las(self) -> bool:
        """The model has an attention (LAS) decoder."""
        return "las" in self.outputs


HEADS: Registry[HeadSpec] = Registry("head")


def register_head(spec: HeadSpec) -> HeadSpec:
    """Add ``spec`` to :data:`HEADS` under ``spec.name``."""
    return HEADS.register(spec.name)(spec)


def get_head(name: str) -> HeadSpec:
    """The :class:`HeadSpec` of head ``name`` (KeyError listing the allowed names)."""
    return HEADS.get(name)


def model_outputs(model: Any) -> frozenset[str]:
    """The output layers a model object carries (its ``<name>_head`` attributes that are set)."""
    return frozenset(name for name in HEAD_OUTPUTS if getattr(model, f"{name}_head", None) is not None)


def head_with_outputs(outputs: frozenset[str]) -> HeadSpec | None:
    """The registered head with exactly these output layers (the first by name), or ``None``: what answers for a
    model whose head the registry does not know."""
    return next((HEADS.get(name) for name in HEADS if HEADS.get(name).outputs == outputs), None)


register_head(HeadSpec(
    name="ctc",
    model_class_path="adaptspeech.modeling:AdaptSpeechForCTC",
    outputs=frozenset({"ctc"}),
    default_decoder="ctc_greedy",
    description="CTC only",
))
register_head(HeadSpec(
    name="las",
    model_class_path="adaptspeech.modeling:AdaptSpeechForJointCTCAttention",
    outputs=frozenset({"las"}),
    default_decoder="attention_beam",
    description="Listen-Attend-Spell attention decoder only",
))
register_head(HeadSpec(
    name="ctc_las",
    model_class_path="adaptspeech.modeling:AdaptSpeechForJointCTCAttention",
    outputs=frozenset({"ctc", "las"}),
    default_decoder="ctc_greedy",
    description="CTC and Listen-Attend-Spell, trained jointly",
))

def __getattr__(name: str) -> Any:
    """:class:`~.ctc.CTCHead` loads on first use: the registry above is read without importing torch (the command
    line builds its parser from it)."""
    if name == "CTCHead":
        from .ctc import CTCHead

        return CTCHead
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["HEADS", "HEAD_OUTPUTS", "CTCHead", "HeadSpec", "get_head", "head_with_outputs", "model_outputs",
           "register_head"]
