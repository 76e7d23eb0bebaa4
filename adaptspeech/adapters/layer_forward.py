"""The one adapter layer forward: what an adapter layer does to an encoder layer's output, shared by the native
:class:`~adaptspeech.adapters.block.LanguageAdapterBlock` and the peft ``speech_adapter`` layer.

Semantics (the same in both):

* no active adapter on this layer: the layer output ``z`` is left unchanged;
* exactly one active adapter: every utterance goes through it (MMS's target language);
* several active adapters: **each utterance goes through the adapter of its own language**, named per call
  (``lang_ids`` for adaptspeech models, ``adapter_names`` for a ``PeftModel``, both ending up in the
  :class:`~adaptspeech.adapters.routing.RoutingCall`); an utterance whose language has no active adapter on this
  layer (e.g. a LoRA language, or ``"__base__"``) passes unchanged; the batch is routed in one grouped pass
  (:func:`_route_grouped`). Deltas of several adapters are never summed:
  a per-language adapter has no meaning applied to another language's speech. Without per-utterance languages the
  call is refused;
* an active fusion: SimAdapter over its fused adapters (:func:`fuse`).

The adapters compute in their own dtype (peft keeps adapter weights in float32 under a half-precision model when
asked to) and the result is returned in ``z``'s dtype.

A fusion over bottleneck adapters runs on the stacked path
(:func:`~adaptspeech.adapters.fusion.stacked_simadapter_output`: the same function, in a fraction of the memory
traffic); other adapters, adapters whose dropout acts, every call inside :func:`reference_path` and every
fusion set to the ``reference`` path (:meth:`~adaptspeech.adapters.fusion.SimAdapterFusion.set_path`) run each
adapter's own forward (:func:`~adaptspeech.adapters.fusion.simadapter_output`), the reference the stacked path is
tested against.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping, Sequence
from contextvars import ContextVar
from typing import Any

import torch
from torch import nn

from .bottleneck import stackable
from .fusion import SimAdapterFusion, simadapter_output, stacked_simadapter_output

_REFERENCE: ContextVar[bool] = ContextVar("adaptspeech_reference_adapter_path", default=False)


@contextlib.contextmanager
def reference_path() -> Iterator[None]:
    """Inside this block every adapter layer runs each adapter's own forward and the fusion over their stacked
    outputs (the reference the stacked path equals), and routes utterances to their languages' adapters one language
    at a time over the whole batch (the reference of the grouped routing); for tests and the benchmarks' before /
    after rows."""
    token = _REFERENCE.set(True)
    try:
        yield
    finally:
        _REFERENCE.reset(token)


def _param_dtype(module: nn.Module, fallback: torch.dtype) -> torch.dtype:
    param = next(module.parameters(), None)
    return fallback if param is None else param.dtype


def _run(adapter: nn.Module, z: torch.Tensor) -> torch.Tensor:
    """``adapter(z)`` computed in the adapter's dtype, returned in ``z``'s."""
    dtype = _param_dtype(adapter, z.dtype)
    return adapter(z.to(dtype)).to(z.dtype)


def route(
    z: torch.Tensor,
    adapters: Mapping[str, nn.Module],
    active: Sequence[str],
    row_languages: Sequence[str] | None,
    where: str,
) -> torch.Tensor:
    """Apply the active adapters to a layer output (see the module docstring).

    Args:
        z: the layer output [B, T, D].
        adapters: this layer's adapters by language / adapter name.
        active: every active language, in order (also those without an adapter on this layer).
        row_languages: the language of each of the ``B`` utterances, or None.
        where: the layer, for messages.

    Returns:
        ``[B, T, D]``.

    Raises:
        ValueError: several adapters active and ``row_languages`` missing or of the wrong length.
    """
    present = [name for name in active if name in adapters]
    if not present:
        return z
    if len(active) == 1:
        return _run(adapters[present[0]], z)
    if row_languages is None:
        raise ValueError(
            f"{where}: several adapters are active ({', '.join(active)}) without fusion: give each utterance its "
            "language (`lang_ids` to an adaptspeech model, `adapter_names` to a PeftModel), or activate one"
        )
    if len(row_languages) != z.shape[0]:
        raise ValueError(
            f"{where}: {len(row_languages)} per-utterance languages for a batch of {z.shape[0]} utterances"
        )
    if _REFERENCE.get():
        return _route_masked(z, adapters, present, row_languages)
    return _route_grouped(z, adapters, present, row_languages)


def _route_grouped(
    z: torch.Tensor, adapters: Mapping[str, nn.Module], present: Sequence[str], row_languages: Sequence[str]
) -> torch.Tensor:
    """Each utterance through its language's adapter in one grouped pass: the rows gathered once, language by
    language (each language's rows in batch order), split into one contiguous block per language, each block through
    its adapter (rows of a language without an adapter here pass as they are), the blocks concatenated and put back
    in batch order with one more gather. Backward costs one pass over the batch whatever the number of languages
    (:func:`_route_masked`, the reference, costs one per language); every adapter sees exactly the rows it saw
    there, so outputs and gradients are the same numbers.

    Args:
        z: the layer output [B, T, D].
        adapters: this layer's adapters by language.
        present: the active languages with an adapter here.
        row_languages: the language of each of the ``B`` utterances.

    Returns:
        ``[B, T, D]``.
    """
    groups = [[i for i, lang in enumerate(row_languages) if lang == name] for name in present]
    for rows, name in zip(groups, present):
        if len(rows) == len(row_languages):  # one language in the whole batch: no gathering
            return _run(adapters[name], z)
    routed = {i for rows in groups for i in rows}
    order = [i for rows in groups for i in rows] + [i for i in range(len(row_languages)) if i not in routed]
    sizes = [len(rows) for rows in groups] + [len(row_languages) - len(routed)]
    identity = order == list(range(len(order)))
    index = None if identity else torch.tensor(order, device=z.device)
    blocks = list((z if index is None else z.index_select(0, index)).split(sizes))
    for k, name in enumerate(present):
        if sizes[k]:
            blocks[k] = _run(adapters[name], blocks[k])
    output = torch.cat(blocks)
    if index is None:
        return output
    inverse = torch.empty_like(index)
    inverse[index] = torch.arange(len(order), device=z.device)
    return output.index_select(0, inverse)


def _route_masked(
    z: torch.Tensor, adapters: Mapping[str, nn.Module], present: Sequence[str], row_languages: Sequence[str]
) -> torch.Tensor:
    """The reference of :func:`_route_grouped` (the implementation before it; inside :func:`reference_path`): a copy
    of ``z`` and, language by language, its rows gathered, run through the adapter and written back into the copy.
    Arguments and result as there."""
    output = z.clone()
    for name in present:
        rows = [i for i, lang in enumerate(row_languages) if lang == name]
        if rows:
            index = torch.tensor(rows, device=z.device)
            output[index] = _run(adapters[name], z.index_select(0, index))
    return output


def fuse(
    z: torch.Tensor,
    fusion: SimAdapterFusion,
    settings: Any,
    adapters: Mapping[str, nn.Module],
    residual: torch.Tensor | None,
    recompute: bool = False,
) -> tuple[torch.Tensor, torch.Tensor]:
    """SimAdapter over ``settings.languages`` on the layer output.

    Args:
        z: the layer output [B, T, D].
        fusion: the layer's :class:`SimAdapterFusion`.
        settings: its :class:`~adaptspeech.adapters.config.FusionConfig` (languages, include_self, residual).
        adapters: this layer's adapters by language.
        residual: the layer's pre-FFN LayerNorm output [B, T, D] (for ``residual="ffn_input"``), or None.
        recompute: on the stacked path, keep only the block's inputs for backward and recompute the adapters and
            the fusion there (less memory, one more forward of the block); also on when ``fusion.recompute`` is.

    Returns:
        ``(output [B, T, D] in z's dtype, weights [B, T, N])``.
    """
    dtype = _param_dtype(fusion, z.dtype)
    fused = [adapters[lang] for lang in settings.languages]
    x = z.to(dtype)
    residual = None if residual is None else residual.to(dtype)
    reference = _REFERENCE.get() or bool(getattr(fusion, "reference", False))
    if not reference and stackable(fused) and _param_dtype(fused[0], dtype) == dtype:
        recompute = recompute or bool(getattr(fusion, "recompute", False))
        output, weights = stacked_simadapter_output(fusion, settings, fused, x, residual, recompute=recompute)
    else:
        output, weights = simadapter_output(fusion, settings, fused, x, residual)
    return output.to(z.dtype), weights
