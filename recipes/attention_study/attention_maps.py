"""The effective attention matrix of any swapped attention kind, read off one utterance, and its plots.

Every kind in :mod:`adaptspeech.attention` ends the same way: per head, a weighted sum of the value rows,
``context_h = A_h(X) V_h`` with ``V = value_proj(X)``, then ``output_proj``. Some kinds form ``A_h`` as a matrix
(``mhsa``'s softmax inside SDPA, the synthesizers), others never do (``ldsa`` keeps ``[T, c]`` local weights, the
sparse kinds score blocks, the LSH kinds gather ``C`` keys per query). :func:`effective_attention` recovers
``A_h`` for all of them the same way, without touching their code: since ``A_h`` does not depend on the values,
feeding one-hot *probe values* in place of ``value_proj(X)`` turns the context into columns of ``A_h``. With
``d_k`` value dimensions per head, ``ceil(T / d_k)`` probes (run as one batch) read the whole ``[h, T, T]``
matrix: probe ``p`` sets ``V_h[j, m] = 1`` for ``j = p d_k + m``, so ``context[p, i, h, m] = A_h[i, p d_k + m]``.
The result is exact (no sampling); :func:`reconstruction_error` checks it against the real forward
(``A_h V_h`` must equal the context the module computes from the real values).

A module that holds another attention (``ldsa`` with ``hybrid=True``: LDSA, its output projection, then
``mhsa``) yields one matrix per stage: the LDSA stage's local weights and the MHSA stage's softmax, each read at
its own input.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from adaptspeech.attention.base import EncoderAttention
from adaptspeech.attention.swap import HFCallMixin, padding_mask_from_hf
from adaptspeech.recipes.plots import pyplot, save_figure


@dataclass
class AttentionMap:
    """The effective attention of one attention module on one utterance.

    Attributes:
        name: the module's name in the model (``backbone.encoder.layers.0.self_attn``, ``....self_attn.mhsa``).
        label: a short label for plots (``L0``, ``L0 mhsa``).
        weights: ``[h, T, T]`` float32, row ``i`` = query frame ``i``'s weights over the key frames.
        error: largest ``|A V - context|`` of :func:`reconstruction_error` (float rounding when exact).
    """

    name: str
    label: str
    weights: np.ndarray
    error: float


class _FixedOutput(nn.Module):
    """Returns a fixed tensor whatever its input (stands in for ``value_proj``)."""

    def __init__(self, value: torch.Tensor) -> None:
        super().__init__()
        self.value = value

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        return self.value


class _Capture(nn.Module):
    """Identity that keeps its input (stands in for ``output_proj``: the merged context ``[B, T, D]``)."""

    def __init__(self) -> None:
        super().__init__()
        self.captured: torch.Tensor | None = None

    def forward(self, context: torch.Tensor) -> torch.Tensor:
        self.captured = context
        return context


@contextmanager
def _replaced(module: EncoderAttention, role: str, replacement: nn.Module) -> Iterator[None]:
    """Temporarily put ``replacement`` where ``module`` keeps the sub-module of ``role`` (``value``/``output``)."""
    name = module.roles[role]
    original = getattr(module, name)
    setattr(module, name, replacement)
    try:
        yield
    finally:
        setattr(module, name, original)


def _kind_forward(module: EncoderAttention, hidden_states: torch.Tensor, padding_mask: torch.Tensor | None) -> None:
    """Run ``module`` on ``hidden_states [B, T, D]`` with a bool ``[B, T]`` padding mask (or None), whether it has
    transformers' call signature (a swapped layer) or the kinds' own."""
    if isinstance(module, HFCallMixin):
        module(hidden_states, attention_mask=padding_mask)
    else:
        module(hidden_states, padding_mask)


@torch.no_grad()
def attention_context(
    module: EncoderAttention, hidden_states: torch.Tensor, padding_mask: torch.Tensor | None = None
) -> torch.Tensor:
    """The merged context ``[B, T, D]`` the module hands its output projection for ``hidden_states [B, T, D]``
    (eval mode: no dropout)."""
    capture = _Capture()
    training = module.training
    module.eval()
    try:
        with _replaced(module, "output", capture):
            _kind_forward(module, hidden_states, padding_mask)
    finally:
        module.train(training)
    assert capture.captured is not None
    return capture.captured


def probe_values(frames: int, num_heads: int, head_dim: int) -> torch.Tensor:
    """One-hot probe values ``[P, T, h d_k]`` (``P = ceil(T / d_k)``): in probe ``p`` every head's value row
    ``j = p d_k + m`` is the unit vector ``e_m`` and the other rows are zero."""
    passes = math.ceil(frames / head_dim)
    probe = torch.zeros(passes, frames, num_heads, head_dim)
    rows = torch.arange(frames)
    probe[rows // head_dim, rows, :, rows % head_dim] = 1.0
    return probe.reshape(passes, frames, num_heads * head_dim)


@torch.no_grad()
def effective_attention(
    module: EncoderAttention, hidden_states: torch.Tensor, padding_mask: torch.Tensor | None = None
) -> torch.Tensor:
    """The attention weights ``[h, T, T]`` of ``module`` on one utterance (see the module docstring).

    Args:
        module: any attention kind (a swapped layer or a plain kind), in eval mode for the reading.
        hidden_states: its input ``[1, T, D]``.
        padding_mask: bool ``[1, T]`` (True = real frame) or None.

    Returns:
        ``A [h, T, T]`` float32: ``A[h, i, j]`` = the weight of key frame ``j`` in query frame ``i``'s context.
    """
    if hidden_states.shape[0] != 1:
        raise ValueError(
            f"effective_attention reads one utterance: hidden_states [1, T, D], got {tuple(hidden_states.shape)}"
        )
    frames, heads, head_dim = hidden_states.shape[1], module.num_heads, module.head_dim
    probe = probe_values(frames, heads, head_dim).to(hidden_states)
    passes = probe.shape[0]
    mask = None if padding_mask is None else padding_mask.expand(passes, -1)
    with _replaced(module, "value", _FixedOutput(probe)):
        context = attention_context(module, hidden_states.expand(passes, -1, -1).contiguous(), mask)
    context = context.float().reshape(passes, frames, heads, head_dim)  # [p, i, h, m] = A[h, i, p d_k + m]
    return context.permute(2, 1, 0, 3).reshape(heads, frames, passes * head_dim)[:, :, :frames].contiguous()


@torch.no_grad()
def reconstruction_error(
    module: EncoderAttention,
    hidden_states: torch.Tensor,
    padding_mask: torch.Tensor | None,
    weights: torch.Tensor,
) -> float:
    """Largest ``|A_h V_h - context_h|`` over heads, frames and dimensions: ``weights [h, T, T]`` applied to the
    real values must give the context the module computes (0 up to float rounding when ``weights`` is exact)."""
    context = attention_context(module, hidden_states, padding_mask).float()  # [1, T, D]
    values = module.split_heads(module.value_proj(hidden_states)).float()[0]  # [h, T, d_k]
    rebuilt = module.merge_heads(torch.matmul(weights.float(), values)[None])
    return float((rebuilt - context).abs().max())


def attention_modules(model: nn.Module) -> list[tuple[str, EncoderAttention]]:
    """Every attention-kind module of ``model`` in registration order (layer by layer; a module nested in another,
    such as the hybrid LDSA's ``mhsa``, right after its parent)."""
    return [(name, module) for name, module in model.named_modules() if isinstance(module, EncoderAttention)]


def _call_inputs(
    module: EncoderAttention, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """``(hidden_states [B, T, D], padding mask [B, T] bool or None)`` of one call of ``module``."""
    hidden = args[0] if args else kwargs["hidden_states"]
    if isinstance(module, HFCallMixin):
        mask = args[1] if len(args) > 1 else kwargs.get("attention_mask")
        return hidden, padding_mask_from_hf(mask, hidden)
    return hidden, args[1] if len(args) > 1 else kwargs.get("padding_mask")


def _label(name: str, index: int, parent_labels: dict[str, str]) -> str:
    """``L<layer>`` for a layer's attention, ``L<layer> <child>`` for one nested in it."""
    for parent, label in parent_labels.items():
        if name.startswith(parent + "."):
            return f"{label} {name[len(parent) + 1:]}"
    parts = name.split(".")
    layer = next((p for p in reversed(parts) if p.isdigit()), str(index))
    return f"L{layer}"


@torch.no_grad()
def model_attention_maps(model: nn.Module, inputs: dict[str, torch.Tensor]) -> list[AttentionMap]:
    """Run ``model`` once on one collated utterance (``inputs``: the model's keyword inputs, batch 1) and read the
    effective attention of every attention-kind module at the input it received."""
    modules = attention_modules(model)
    if not modules:
        raise ValueError("the model has no swapped attention module (attention.kind is 'default'): nothing to read")
    seen: dict[str, tuple[torch.Tensor, torch.Tensor | None]] = {}

    def hook(name: str, module: EncoderAttention):
        def record(_: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
            hidden, mask = _call_inputs(module, args, kwargs)
            seen[name] = (hidden.detach(), None if mask is None else mask.detach())

        return record

    handles = [module.register_forward_pre_hook(hook(name, module), with_kwargs=True) for name, module in modules]
    training = model.training
    model.eval()
    try:
        model(**inputs)
    finally:
        for handle in handles:
            handle.remove()
        model.train(training)
    maps: list[AttentionMap] = []
    labels: dict[str, str] = {}
    for index, (name, module) in enumerate(modules):
        if name not in seen:
            continue  # a module the forward did not reach (e.g. a dropped layer)
        hidden, mask = seen[name]
        weights = effective_attention(module, hidden, mask)
        error = reconstruction_error(module, hidden, mask, weights)
        labels[name] = _label(name, index, labels)
        maps.append(AttentionMap(name, labels[name], weights.numpy(), error))
    return maps


def _panel(ax: Any, weights: np.ndarray, title: str) -> None:
    """One head's ``[T, T]`` matrix, queries down, keys across, colour from 0 to its own largest weight (printed in
    the title: a near-uniform head shows its fine structure, and its scale says that it is near-uniform)."""
    peak = float(weights.max())
    ax.imshow(weights, cmap="viridis", vmin=0.0, vmax=max(peak, 1e-9), interpolation="nearest")
    ax.set_title(f"{title} max {peak:.2f}".strip(), fontsize=6, pad=2)
    ax.set_xticks([])
    ax.set_yticks([])


def plot_attention_maps(maps: list[AttentionMap], path: str | Path, title: str, panel_inches: float = 1.3) -> Path:
    """A grid of every module (rows) and head (columns) of one model; returns ``path``."""
    plt = pyplot()
    heads = max(m.weights.shape[0] for m in maps)
    fig, axes = plt.subplots(
        len(maps), heads, figsize=(panel_inches * heads + 0.3, panel_inches * len(maps) + 0.5), squeeze=False
    )
    for row, item in enumerate(maps):
        for head in range(heads):
            ax = axes[row][head]
            if head < item.weights.shape[0]:
                _panel(ax, item.weights[head], f"{item.label} h{head}")
            else:
                ax.axis("off")
    fig.suptitle(_wrap(title, fig), fontsize=8)
    return save_figure_below_title(fig, path)


def plot_maps_overview(rows: list[tuple[str, AttentionMap]], path: str | Path, title: str) -> Path:
    """One chosen module per model: ``rows`` of ``(model label, map)``, one row each, heads across."""
    plt = pyplot()
    heads = max(m.weights.shape[0] for _, m in rows)
    fig, axes = plt.subplots(len(rows), heads, figsize=(1.1 * heads + 1.4, 1.1 * len(rows) + 0.5), squeeze=False)
    for row, (label, item) in enumerate(rows):
        for head in range(heads):
            ax = axes[row][head]
            if head < item.weights.shape[0]:
                _panel(ax, item.weights[head], f"h{head}" if row == 0 else "")
            else:
                ax.axis("off")
        axes[row][0].set_ylabel(label, fontsize=7, rotation=0, ha="right", va="center")
    fig.suptitle(_wrap(title, fig), fontsize=8)
    return save_figure_below_title(fig, path)


def _wrap(title: str, fig: Any) -> str:
    """``title`` broken into lines that fit the figure's width (about 15 characters an inch at 8 points)."""
    import textwrap

    return textwrap.fill(title, width=max(20, int(15 * fig.get_figwidth())))


def save_figure_below_title(fig: Any, path: str | Path) -> Path:
    """Lay the panels out below the (wrapped) title and write the figure at 80 dpi."""
    fig.tight_layout()
    # room above the panels for the wrapped title (about 0.14 inch a line at 8 points) and the first row's two-line
    # panel titles (0.3 inch)
    height = fig.get_figheight()
    lines = 0
    if fig._suptitle is not None:
        lines = fig._suptitle.get_text().count("\n") + 1
        fig._suptitle.set_y(1 - 0.08 / height)  # a fixed 0.08 inch from the top, whatever the figure's height
        fig._suptitle.set_verticalalignment("top")
    fig.subplots_adjust(top=1 - (0.08 + 0.15 * lines + 0.3) / height)
    return save_figure(fig, path, dpi=80, tight=False)
