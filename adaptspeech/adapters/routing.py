"""Which adapters run, and for which utterance: the model's routing settings and the per-call routing context.

Two kinds of state decide what an adapter layer does, and they live in different places:

* **Settings** (:class:`AdapterRouting`): the active languages, whether the fusion is on, the order of the
  languages that ``lang_ids`` index. They change only when the user calls ``set_active_languages`` /
  ``set_fusion_active`` / ``add_language_adapter`` (like peft's active adapter), and are held by the model.
* **Per-call state** (:class:`RoutingCall`): which language each utterance of *this* batch is, whether this call
  collects the fusion weights, the tensors one hook hands to another during the call (the pre-FFN residual,
  the fusion weights) and an optional :class:`RoutingOverride`. It never lives on a module: :func:`routing_call`
  puts it in a :class:`contextvars.ContextVar` for the duration of one forward (or of a block of them), so two
  threads (``nn.DataParallel`` replicas, a server) calling the same model see their own call, and nothing is left
  behind after the call.

**Routing per call.** A :class:`RoutingOverride` (active languages, fusion on / off, the target language whose CTC
head and vocabulary are used) replaces the settings for the calls inside its :func:`routing_call` block, as peft
takes ``adapter_names=`` per forward: automatic language routing
(:mod:`adaptspeech.inference.language_id.routing`), the language-ID pass (no adapters) and a stream routed to a
language use it instead of writing ``config.active_languages`` / ``fusion_active``. Every consumer (the bottleneck
blocks, LoRA's routing pre-hook, the PEFT ``speech_adapter`` layers, the CTC head's choice of output layer,
streaming) reads :func:`effective_routing`: the override of the running call if there is one, else the model's
settings. A call nested in a block with an override inherits it (``model(...)`` inside ``routed_to``). Routing is
thus thread-safe: two threads, or two interleaved streams, routed to different languages compute exactly what each
computes alone, and an error inside a routed block leaves the model's settings as they were (they were never
written).

Activation checkpointing re-runs a layer's forward during backward, after the call has returned (and, on GPUs, on
the autograd engine's thread). :func:`checkpoint_with_routing` wraps the checkpoint function so that the
recomputation runs inside a copy of the context its forward saw: the very :class:`RoutingCall` (marked
``replay=True`` so that collecting hooks do not collect twice) and every other context variable of that call (the
frame padding the conformer convolutions mask, :mod:`adaptspeech.backbones.conv_padding`). adaptspeech models
install it from ``_set_gradient_checkpointing``; it works with
re-entrant and non-re-entrant checkpointing alike.
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import functools
from collections.abc import Callable, Iterator, Sequence
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

import torch

#: the name a row gets to mean "no adapter" (peft's own spelling in ``adapter_names``).
BASE_ROW = "__base__"


@dataclass
class AdapterRouting:
    """A model's routing settings (not per call; see the module docstring).

    Args:
        active_languages: the adapters that run (one: every utterance goes through it; several: each utterance
            goes through the adapter of its own language).
        fusion_active: run the SimAdapter fusion instead of single adapters.
        language_ids: the languages that ``lang_ids`` index (the model's ``adapter_languages``).
        fusion_target: the fusion's ``target_language`` (whose CTC head runs while the fusion is active), or None.
    """

    active_languages: list[str] = field(default_factory=list)
    fusion_active: bool = False
    language_ids: list[str] = field(default_factory=list)
    fusion_target: str | None = None


@dataclass(frozen=True)
class RoutingOverride:
    """Routing settings for the calls inside one :func:`routing_call` block, used instead of the model's.

    Args:
        active_languages: the adapters that run (empty: none, the encoder alone).
        fusion_active: run the SimAdapter fusion instead of single adapters.
        target_language: the language whose CTC head and vocabulary the output is read with (None: as the
            settings choose from ``active_languages`` / the fusion's target).
    """

    active_languages: tuple[str, ...] = ()
    fusion_active: bool = False
    target_language: str | None = None

    def applied_to(self, settings: AdapterRouting) -> AdapterRouting:
        """``settings`` with this override's active languages and fusion switch (a new object)."""
        return AdapterRouting(active_languages=list(self.active_languages), fusion_active=self.fusion_active,
                              language_ids=settings.language_ids, fusion_target=settings.fusion_target)


#: the override that runs the encoder without any adapter or fusion (the language-ID pass)
NO_ADAPTERS = RoutingOverride()


@dataclass
class RoutingCall:
    """The routing state of one forward call.

    Args:
        row_languages: the language of each utterance of the batch (``None``: not given). A row named
            :data:`BASE_ROW` uses no adapter.
        collect_fusion_weights: keep each fused layer's attention weights.
        fusion_weights: layer index -> fusion weights ``[B, T, N]`` (filled by the fusion layers).
        residuals: adapter layer -> the pre-FFN LayerNorm output ``[B, T, D]`` captured for the fusion residual
            (handed from the capturing hook to the adapter layer within one layer call).
        replay: this is the recomputation of a checkpointed layer during backward.
        override: the routing settings this call uses instead of the model's (None: the model's).
    """

    row_languages: tuple[str, ...] | None = None
    collect_fusion_weights: bool = False
    fusion_weights: dict[int, torch.Tensor] = field(default_factory=dict)
    residuals: dict[int, torch.Tensor] = field(default_factory=dict)
    replay: bool = False
    override: RoutingOverride | None = None

    def for_replay(self) -> RoutingCall:
        """A copy for a checkpoint recomputation: same rows, own scratch dicts, collects nothing."""
        return dataclasses.replace(self, collect_fusion_weights=False, fusion_weights={}, residuals={}, replay=True)


_CURRENT: ContextVar[RoutingCall | None] = ContextVar("adaptspeech_routing_call", default=None)


def current_call() -> RoutingCall | None:
    """The :class:`RoutingCall` of the forward running in this thread / context, or None outside one."""
    return _CURRENT.get()


def current_override() -> RoutingOverride | None:
    """The :class:`RoutingOverride` of the running call, or None (the model's settings apply)."""
    call = _CURRENT.get()
    return None if call is None else call.override


def effective_routing(settings: AdapterRouting) -> AdapterRouting:
    """The routing the running call uses: ``settings`` (the model's) with the call's override applied, if any."""
    override = current_override()
    return settings if override is None else override.applied_to(settings)


@contextlib.contextmanager
def routing_call(
    row_languages: Sequence[str] | None = None,
    collect_fusion_weights: bool = False,
    override: RoutingOverride | None = None,
) -> Iterator[RoutingCall]:
    """Run a forward (or a block of them) inside a fresh :class:`RoutingCall` (restoring the previous one afterwards).

    Args:
        row_languages: the language of each utterance (``B`` names), or None.
        collect_fusion_weights: keep each fused layer's attention weights in ``call.fusion_weights``.
        override: routing settings used instead of the model's inside the block (None: the enclosing call's
            override, if any; see the module docstring).
    """
    if override is None:
        override = current_override()
    call = RoutingCall(
        row_languages=None if row_languages is None else tuple(row_languages),
        collect_fusion_weights=collect_fusion_weights,
        override=override,
    )
    token = _CURRENT.set(call)
    try:
        yield call
    finally:
        _CURRENT.reset(token)


def row_languages_from_ids(lang_ids: torch.Tensor | None, languages: Sequence[str]) -> tuple[str, ...] | None:
    """``lang_ids`` [B] (positions in ``languages``) -> one language name per utterance.

    Raises:
        ValueError: an id outside ``languages`` (naming it and the languages).
    """
    if lang_ids is None:
        return None
    ids = [int(i) for i in lang_ids.reshape(-1).tolist()]
    bad = [i for i in ids if not 0 <= i < len(languages)]
    if bad:
        raise ValueError(
            f"lang_ids holds {bad[0]} but the model has {len(languages)} adapter languages {list(languages)}"
        )
    return tuple(languages[i] for i in ids)


def _bind_call(function: Callable[..., Any], context: contextvars.Context) -> Callable[..., Any]:
    """``function`` run as is the first time (the forward) and, on every later run (the recomputations of a
    checkpoint), inside a copy of ``context`` — the context variables of its forward: the routing call (as
    :meth:`RoutingCall.for_replay`), the frame padding of :mod:`adaptspeech.backbones.conv_padding`, ..."""
    runs = 0

    @functools.wraps(function)
    def bound(*args: Any, **kwargs: Any) -> Any:
        nonlocal runs
        runs += 1
        if runs == 1:
            return function(*args, **kwargs)
        return context.copy().run(_replay, function, args, kwargs)

    return bound


def _replay(function: Callable[..., Any], args: tuple, kwargs: dict[str, Any]) -> Any:
    call = _CURRENT.get()
    if call is not None:
        _CURRENT.set(call.for_replay())  # in the copied context only
    return function(*args, **kwargs)


def checkpoint_with_routing(checkpoint: Callable[..., Any]) -> Callable[..., Any]:
    """Wrap an activation-checkpoint function (``torch.utils.checkpoint.checkpoint`` or a partial of it) so that
    the checkpointed function recomputes inside the routing call of its forward (see the module docstring)."""
    if getattr(checkpoint, "_adaptspeech_routed", False):
        return checkpoint

    @functools.wraps(checkpoint)
    def routed_checkpoint(function: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        return checkpoint(_bind_call(function, contextvars.copy_context()), *args, **kwargs)

    routed_checkpoint._adaptspeech_routed = True  # type: ignore[attr-defined]
    return routed_checkpoint
