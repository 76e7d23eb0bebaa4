"""The decoding methods as a registry: each method's function and what it reads.

:data:`DECODING_METHODS` maps a method name to a :class:`DecodingMethod`: the function that decodes
(:class:`DecodingInputs` -> token ids), the output layers of the model it reads (names of
:data:`~adaptspeech.heads.HEAD_OUTPUTS`), and the options it takes. Every "which / whether" question about a method
asks it: which methods a head supports (:func:`decoders_for`), what a method needs (:attr:`DecodingMethod.needs`),
whether it takes a beam, whether it reads the CTC output alone (so that a long recording is decoded on one stitched
frame grid), whether its result is the best CTC path (whose frame labels give timestamps). Adding a method is its
module plus one :func:`register_decoding_method` call at the end of this file, and its name with the paths that serve
it in :data:`~adaptspeech.runtime.decoding_methods.METHOD_PATHS` (the torch-free vocabulary every command lists and
checks methods from: PyTorch, streaming, ONNX runtime).

The registry itself imports no torch (each method's module is imported when the method runs), so that the command
line lists the methods without it.
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..heads import HEAD_OUTPUTS, HeadSpec
from ..registry import Registry
from ..runtime.decoding_methods import METHOD_PATHS, PYTORCH

if TYPE_CHECKING:
    import torch

    from ..heads.las import LASDecoder
    from .hypothesis import Hypothesis


@dataclass
class DecodingInputs:
    """What a model hands to :func:`decode` (each method uses what it needs).

    Attributes:
        ctc_log_probs: ``[B, T, V]`` CTC log-probabilities.
        ctc_lengths: ``[B]`` real CTC frames.
        decoder: the LAS head.
        encoder_hidden_states: ``[B, T, D]`` input of the LAS head.
        encoder_padding_mask: ``[B, T]`` True on real frames.
    """

    ctc_log_probs: torch.Tensor | None = None
    ctc_lengths: torch.Tensor | None = None
    decoder: LASDecoder | None = None
    encoder_hidden_states: torch.Tensor | None = None
    encoder_padding_mask: torch.Tensor | None = None

    def need(self, method: str, *names: str) -> None:
        """Raise naming ``method`` and every input in ``names`` that is missing."""
        missing = [name for name in names if getattr(self, name) is None]
        if missing:
            raise ValueError(f"decode(method={method!r}) needs {', '.join(missing)}")


DecodeFunction = Callable[..., list[list[int]]]
"""``(DecodingInputs, **options) -> best token ids per utterance``."""


@dataclass(frozen=True)
class DecodingMethod:
    """One decoding method.

    Args:
        name: the method's name (``--method``, ``decode(method=...)``).
        function: ``(DecodingInputs, **options) -> [[token id, ...], ...]`` (best ids per utterance).
        reads: the output layers it reads (names of :data:`~adaptspeech.heads.HEAD_OUTPUTS`).
        beam: it takes ``beam_size``.
        options: the other options it takes by name (``ctc_weight``).
        best_path: its result is the best CTC path, whose frame labels give timestamps.
    """

    name: str
    function: DecodeFunction
    reads: frozenset[str]
    beam: bool = False
    options: tuple[str, ...] = ()
    best_path: bool = False

    @property
    def ctc_only(self) -> bool:
        """It reads the CTC log-probabilities alone, frame by frame: a long recording's log-probabilities are
        stitched on one frame grid and decoded at once (the n-gram LM decoder reads them too)."""
        return self.reads == frozenset({"ctc"})

    @property
    def paths(self) -> frozenset[str]:
        """The paths that serve it (:data:`~adaptspeech.runtime.decoding_methods.METHOD_PATHS`: ``"pytorch"``,
        ``"streaming"``, ``"onnx"``)."""
        return METHOD_PATHS[self.name].paths

    @property
    def needs(self) -> str:
        """What it needs of a model, for messages (``"a CTC head and an attention (LAS) head"``)."""
        return " and ".join(text for name, text in HEAD_OUTPUTS.items() if name in self.reads)


DECODING_METHODS: Registry[DecodingMethod] = Registry("decoding method")
_ORDER: list[str] = []
"""Method names in registration order (simplest first): the order :func:`decoders_for` lists them in."""


def register_decoding_method(method: DecodingMethod) -> DecodingMethod:
    """Add ``method`` to :data:`DECODING_METHODS` under its name, which the vocabulary
    (:data:`~adaptspeech.runtime.decoding_methods.METHOD_PATHS`) must list with the PyTorch path among its paths."""
    if method.name not in METHOD_PATHS or PYTORCH not in METHOD_PATHS[method.name].paths:
        raise ValueError(f"decoding method {method.name!r}: add it to adaptspeech.runtime.decoding_methods."
                         "METHOD_PATHS with the paths that serve it (PyTorch among them)")
    DECODING_METHODS.register(method.name)(method)
    _ORDER.append(method.name)
    return method


def method_names() -> tuple[str, ...]:
    """Every method's name, simplest first (registration order)."""
    return tuple(_ORDER)


def decoders_for(outputs: Collection[str]) -> tuple[str, ...]:
    """The methods that can decode a model with these output layers (a :class:`~adaptspeech.heads.HeadSpec`'s
    ``outputs``), simplest first."""
    return tuple(name for name in _ORDER if DECODING_METHODS.get(name).reads <= frozenset(outputs))


def check_decoder(head: HeadSpec, method: str) -> None:
    """Raise ``ValueError`` naming the head and the methods it supports unless it supports ``method``."""
    supported = decoders_for(head.outputs)
    if method not in supported:
        needs = DECODING_METHODS.get(method).needs if method in DECODING_METHODS else "a decoder this head lacks"
        raise ValueError(
            f"decoding method {method!r} needs {needs}; head {head.name!r} ({head.description}) supports: "
            f"{', '.join(supported)}"
        )


def decode(
    method: str,
    *,
    ctc_log_probs: torch.Tensor | None = None,
    ctc_lengths: torch.Tensor | None = None,
    decoder: LASDecoder | None = None,
    encoder_hidden_states: torch.Tensor | None = None,
    encoder_padding_mask: torch.Tensor | None = None,
    **options: Any,
) -> list[list[int]]:
    """Best token ids per utterance with the named method.

    Args:
        method: one of ``DECODING_METHODS.names()``: ``"ctc_greedy"``, ``"ctc_beam"``,
            ``"attention_greedy"``, ``"attention_beam"``, ``"joint"``.
        ctc_log_probs: ``[B, T, V]`` CTC log-probabilities (CTC methods and ``"joint"``).
        ctc_lengths: ``[B]`` real CTC frames.
        decoder: the LAS head (attention methods and ``"joint"``).
        encoder_hidden_states: ``[B, T, D]`` input of the LAS head.
        encoder_padding_mask: ``[B, T]`` True on real frames.
        **options: passed to the method's function (e.g. ``beam_size``, ``ctc_weight``, ``length_penalty``).

    Raises:
        ValueError: unknown method (listing the allowed ones) or a missing input.
    """
    DECODING_METHODS.check(method, "decode(method=...)")
    inputs = DecodingInputs(ctc_log_probs, ctc_lengths, decoder, encoder_hidden_states, encoder_padding_mask)
    return DECODING_METHODS.get(method).function(inputs, **options)


def _best(nbest_lists: list[list[Hypothesis]]) -> list[list[int]]:
    return [hyps[0].tokens if hyps else [] for hyps in nbest_lists]


def _decode_ctc_greedy(inputs: DecodingInputs, **options: Any) -> list[list[int]]:
    from .ctc_greedy import ctc_greedy_decode

    inputs.need("ctc_greedy", "ctc_log_probs")
    return ctc_greedy_decode(inputs.ctc_log_probs, inputs.ctc_lengths, **options)


def _decode_ctc_beam(inputs: DecodingInputs, **options: Any) -> list[list[int]]:
    from .ctc_prefix_beam import ctc_prefix_beam_search

    inputs.need("ctc_beam", "ctc_log_probs")
    return _best(ctc_prefix_beam_search(inputs.ctc_log_probs, inputs.ctc_lengths, **options))


def _decode_attention_greedy(inputs: DecodingInputs, **options: Any) -> list[list[int]]:
    from .attention_greedy import attention_greedy_decode

    inputs.need("attention_greedy", "decoder", "encoder_hidden_states")
    return attention_greedy_decode(inputs.decoder, inputs.encoder_hidden_states, inputs.encoder_padding_mask,
                                   **options)


def _decode_attention_beam(inputs: DecodingInputs, **options: Any) -> list[list[int]]:
    from .attention_beam import attention_beam_search

    inputs.need("attention_beam", "decoder", "encoder_hidden_states")
    return _best(attention_beam_search(inputs.decoder, inputs.encoder_hidden_states,
                                       inputs.encoder_padding_mask, **options))


def _decode_joint(inputs: DecodingInputs, **options: Any) -> list[list[int]]:
    from .joint import joint_beam_search

    inputs.need("joint", "ctc_log_probs")
    return _best(joint_beam_search(inputs.decoder, inputs.encoder_hidden_states, inputs.encoder_padding_mask,
                                   inputs.ctc_log_probs, inputs.ctc_lengths, **options))


register_decoding_method(DecodingMethod("ctc_greedy", _decode_ctc_greedy, frozenset({"ctc"}), best_path=True))
register_decoding_method(DecodingMethod("ctc_beam", _decode_ctc_beam, frozenset({"ctc"}), beam=True))
register_decoding_method(DecodingMethod("attention_greedy", _decode_attention_greedy, frozenset({"las"})))
register_decoding_method(DecodingMethod("attention_beam", _decode_attention_beam, frozenset({"las"}), beam=True))
register_decoding_method(DecodingMethod("joint", _decode_joint, frozenset({"ctc", "las"}), beam=True,
                                        options=("ctc_weight",)))
