"""The part of the encoder that no adapter touches, computed once for language identification and recognition.

Routing by language ID runs the encoder twice on the same batch: once **without adapters** up to the pooled layer
(the language-ID pass, :meth:`~adaptspeech.heads.lid_model.LanguageIDMixin.lid_logits`), then once with the routed
language's adapters (the recognition pass). Everything before the first encoder layer that carries an adapter is
the same computation in both: the front end (wav2vec2's convolutional feature encoder and feature projection, the
filterbank Conformer's subsampling) and the encoder layers below the first adapter layer. The language-ID pass keeps
what it computed there as an :class:`EncoderPrefix`; inside :func:`reusing_prefix` a recognition pass over the
**same** batch (equal input tensor and mask, checked: :meth:`EncoderPrefix.fitted`) starts from it instead of
computing it again:

* ``start == 0`` (adapters on every layer, as in the demo): the encoder module is called again with the arguments
  the language-ID pass gave it (its input ``[B, T, D]`` from the front end, its frame mask);
* ``start > 0``: the encoder runs its layers from ``start`` only (the layers below are left out for the call,
  :meth:`~adaptspeech.backbones.base.BackboneSpec.layers_from`) and layer ``start`` receives the hidden states the
  language-ID pass fed it (or the pooled layer's output when ``start`` is the layer above it). What the encoder does
  before its first layer (wav2vec2's convolutional position embedding, the Conformer's relative positions) runs
  again on the front end's output and is discarded: only the layers' input is replaced.

``start = min(first adapter layer, pooled layer + 1, last layer)`` (:func:`shared_start`): the language-ID pass
computes nothing above its pooled layer, and the last layer always runs (the encoder's final steps follow it).

Nothing of a pass is left on the shared modules for other callers: the hooks that record the prefix, feed layer
``start`` and stop the language-ID pass at its pooled layer act only on the calls of the context that registered
them (:func:`call_scoped_hooks`), and the layers below ``start`` are left out through a context variable the
encoder's layer list reads (:meth:`~adaptspeech.backbones.base.BackboneSpec.layers_from`), so two threads routing
the same model by language ID never see each other's pass.

The recognition pass's output equals the pass without the prefix exactly (the same modules on the same tensors); the
prefix is used only in evaluation mode, without ``output_hidden_states`` and while ``start`` is still at or below the
model's first adapter layer, else the encoder runs whole, as before.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
from collections.abc import Callable, Iterator
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

import torch

_PREFIX: ContextVar[EncoderPrefix | None] = ContextVar("adaptspeech_encoder_prefix", default=None)
_HOOK_OWNERS: ContextVar[frozenset[object]] = ContextVar("adaptspeech_call_scoped_hooks", default=frozenset())


@contextlib.contextmanager
def call_scoped_hooks() -> Iterator[Callable[[Callable[..., Any]], Callable[..., Any]]]:
    """Yields ``scoped(hook)``: ``hook`` wrapped so that it acts only on module calls made inside this block in this
    thread / context; elsewhere (another thread's forward of the same module while the hook is registered) it returns
    None, i.e. changes nothing. Register the wrapped hooks inside the block and remove them before leaving it."""
    owner = object()
    token = _HOOK_OWNERS.set(_HOOK_OWNERS.get() | {owner})

    def scoped(hook: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(hook)
        def guarded(*args: Any, **kwargs: Any) -> Any:
            if owner not in _HOOK_OWNERS.get():
                return None
            return hook(*args, **kwargs)

        return guarded

    try:
        yield scoped
    finally:
        _HOOK_OWNERS.reset(token)


@dataclass(frozen=True)
class EncoderPrefix:
    """What the language-ID pass computed before the first adapter layer, for one batch.

    Args:
        inputs: the batch's model input ``[B, S]`` (waveforms) or ``[B, S, F]`` (filterbanks).
        attention_mask: its mask ``[B, S]`` (None: no padding).
        start: the first encoder layer the recognition pass runs.
        encoder_args: the positional arguments the encoder module was called with (its input ``[B, T, D]``).
        encoder_kwargs: its keyword arguments (the frame mask ``[B, T]`` ...).
        layer_input: the hidden states ``[B, T, D]`` layer ``start`` receives (None when ``start`` is 0).
    """

    inputs: torch.Tensor
    attention_mask: torch.Tensor | None
    start: int
    encoder_args: tuple[Any, ...]
    encoder_kwargs: dict[str, Any] = field(default_factory=dict)
    layer_input: torch.Tensor | None = None

    def fitted(self, inputs: torch.Tensor, attention_mask: torch.Tensor | None) -> EncoderPrefix | None:
        """This prefix for an encoder call on ``inputs`` / ``attention_mask``, or None where that is another batch.

        The same batch: equal inputs and equal masks (the same tensors or equal ones). A call without a mask on the
        inputs of a prefix whose mask holds no padding (one utterance collated for the language-ID pass, then
        transcribed alone) is the same batch too when ``start`` is 0: the front end computes the same numbers with an
        all-true mask as without one (the mask only zeroes padding), and the encoder module is called without a mask,
        as the call would have called it."""
        if not _same(inputs, self.inputs):
            return None
        if attention_mask is not None and self.attention_mask is not None:
            return self if _same(attention_mask.to(torch.bool), self.attention_mask.to(torch.bool)) else None
        if attention_mask is None and self.attention_mask is None:
            return self
        if attention_mask is None and self.start == 0 and bool(self.attention_mask.all()):
            return dataclasses.replace(self, attention_mask=None,
                                       encoder_kwargs={**self.encoder_kwargs, "attention_mask": None})
        return None


def _same(a: torch.Tensor, b: torch.Tensor) -> bool:
    if a is b:
        return True
    return a.shape == b.shape and a.dtype == b.dtype and a.device == b.device and bool(torch.equal(a, b))


def first_adapter_layer(model: Any) -> int:
    """The lowest encoder layer that any adapter (or the fusion) can change; the layer count without adapters."""
    config = model.config
    if not config.adapters and config.fusion is None:
        return config.num_encoder_layers
    return min(config.layers_with_adapters(), default=config.num_encoder_layers)


def shared_start(model: Any, pooled_layer: int) -> int:
    """The first layer the recognition pass runs after a language-ID pass pooled at ``pooled_layer`` (see the
    module docstring)."""
    return min(first_adapter_layer(model), pooled_layer + 1, model.config.num_encoder_layers - 1)


@contextlib.contextmanager
def capturing_prefix(model: Any, start: int) -> Iterator[dict[str, Any]]:
    """Inside the block, a run of ``model``'s encoder records the encoder module's call (``"args"``, ``"kwargs"``)
    and, for ``start > 0``, the hidden states layer ``start`` receives (``"layer_input"``) into the yielded dict."""
    spec = model.config.backbone_spec
    captured: dict[str, Any] = {}

    def encoder_call(module: Any, args: tuple, kwargs: dict) -> None:
        captured["args"], captured["kwargs"] = tuple(args), dict(kwargs)

    def layer_call(module: Any, args: tuple, kwargs: dict) -> None:
        captured["layer_input"] = args[0] if args else kwargs["hidden_states"]

    with call_scoped_hooks() as scoped:
        encoder = spec.encoder_module(model.backbone)
        handles = [encoder.register_forward_pre_hook(scoped(encoder_call), with_kwargs=True)]
        if start > 0:
            layer = spec.encoder_layers(model.backbone)[start]
            handles.append(layer.register_forward_pre_hook(scoped(layer_call), with_kwargs=True))
        try:
            yield captured
        finally:
            for handle in handles:
                handle.remove()


@contextlib.contextmanager
def reusing_prefix(prefix: EncoderPrefix | None) -> Iterator[None]:
    """Inside the block, an encoder pass over ``prefix``'s batch starts from it (None: no effect)."""
    token = _PREFIX.set(prefix)
    try:
        yield
    finally:
        _PREFIX.reset(token)


def usable_prefix(model: Any, inputs: torch.Tensor, attention_mask: torch.Tensor | None,
                  output_hidden_states: bool) -> EncoderPrefix | None:
    """The prefix of the enclosing :func:`reusing_prefix` when this encoder call may start from it, else None."""
    prefix = _PREFIX.get()
    if prefix is None or output_hidden_states or model.training or prefix.start > first_adapter_layer(model):
        return None
    return prefix.fitted(inputs, attention_mask)


def encode_from_prefix(model: Any, prefix: EncoderPrefix) -> torch.Tensor:
    """The backbone's last hidden states ``[B, T, D]`` computed from ``prefix`` (inside the caller's routing)."""
    spec = model.config.backbone_spec
    encoder = spec.encoder_module(model.backbone)
    if prefix.start == 0:
        outputs = encoder(*prefix.encoder_args, **prefix.encoder_kwargs)
    else:
        layer = spec.encoder_layers(model.backbone)[prefix.start]

        def feed(module: Any, args: tuple, kwargs: dict) -> tuple[tuple, dict]:
            if args:
                return (prefix.layer_input, *args[1:]), kwargs
            return args, {**kwargs, "hidden_states": prefix.layer_input}

        with call_scoped_hooks() as scoped:
            handle = layer.register_forward_pre_hook(scoped(feed), with_kwargs=True)
            try:
                with spec.layers_from(model.backbone, prefix.start):
                    outputs = encoder(*prefix.encoder_args, **prefix.encoder_kwargs)
            finally:
                handle.remove()
    return spec.finish_encoder(model.backbone, outputs.last_hidden_state)
