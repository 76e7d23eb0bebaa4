"""The figures of a recipe run, written as PNG: the SimAdapter fusion heatmap (and the per-frame sums it averages) and
the training curves of its stages; :func:`pyplot` and :func:`save_figure` for every other figure of a recipe."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np


def pyplot() -> Any:
    """``matplotlib.pyplot`` on the non-interactive Agg backend (recipes write PNG files; no display needed)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def save_figure(fig: Any, path: str | os.PathLike, dpi: int = 120, tight: bool = True) -> Path:
    """Write ``fig`` to ``path`` (its folder created) and close it; returns ``path``.

    Args:
        tight: lay the panels out with ``tight_layout`` first (False: the caller has placed them).
    """
    if tight:
        fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=dpi)
    pyplot().close(fig)
    return path


def _heatmap_panel(ax: Any, weights: np.ndarray, languages: Sequence[str], layer_labels: list[str], title: str) -> Any:
    image = ax.imshow(weights, cmap="viridis", vmin=0.0, vmax=max(1e-9, float(weights.max())), aspect="auto")
    ax.set_xticks(range(len(languages)), labels=list(languages))
    ax.set_yticks(range(len(weights)), labels=layer_labels)
    ax.set_xlabel("fused language adapter")
    ax.set_ylabel("encoder layer")
    ax.set_title(title, fontsize=10)
    for i in range(weights.shape[0]):
        for j in range(weights.shape[1]):
            dark = weights[i, j] < 0.6 * weights.max()
            ax.text(
                j, i, f"{weights[i, j]:.2f}", ha="center", va="center", color="white" if dark else "black", fontsize=8
            )
    return image


def to_numpy(values: Any) -> np.ndarray:
    """A tensor on any device and of any dtype (CUDA, bfloat16 ...) or an array-like -> a float numpy array.

    Tensors are detached and moved to the CPU in float32 first: a CUDA tensor and a bfloat16 tensor have no
    ``.numpy()``.
    """
    if hasattr(values, "detach"):  # a tensor: read without importing torch (figures of saved results need none)
        return values.detach().cpu().float().numpy()
    return np.asarray(values, dtype=float)


def fusion_weight_sums(fusion_weights: Sequence[Any], frame_mask: Any) -> np.ndarray:
    """Sum each layer's SimAdapter attention over the real frames of a batch.

    Args:
        fusion_weights: one tensor per fused layer, [B, T, N] (attention over the N fused adapters per frame), on
            any device and of any dtype (bfloat16 under autocast).
        frame_mask: [B, T], True (or 1) on real frames.

    Returns:
        `np.ndarray` [num_layers, N], float64: per layer and language, the attention summed over the real frames;
        divide by the number of real frames for the mean.
    """
    sums = []
    for weights in fusion_weights:
        mask = frame_mask.to(weights.device).float()[..., None]
        sums.append((weights.detach().float() * mask).sum((0, 1)))
    return np.stack([to_numpy(s).astype(np.float64) for s in sums])


def plot_fusion_heatmap(
    weights: np.ndarray,
    languages: Sequence[str],
    path: str | os.PathLike,
    title: str = "SimAdapter attention per layer",
    layers: Sequence[int] | None = None,
    target: str | None = None,
) -> Path:
    """Heatmap of the mean fusion attention: rows = encoder layers, columns = fused languages.

    Args:
        weights: [num_layers, num_languages], each row a distribution (the time-, batch- and utterance-averaged
            attention of that layer); a numpy array or a tensor on any device and of any dtype.
        target: the target language among ``languages``; when given, a second panel shows the attention over the
            *source* languages alone (the target's column dropped, rows renormalised): the language similarity
            SimAdapter learns, which the target's own adapter otherwise dominates.
    """
    weights = to_numpy(weights).astype(float)
    layer_labels = [str(i) for i in (layers if layers is not None else range(len(weights)))]
    plt = pyplot()
    panels = 2 if target is not None and target in languages and len(languages) > 1 else 1
    fig, axes = plt.subplots(
        1, panels, figsize=(panels * (1.6 + 0.9 * len(languages)), 1.4 + 0.5 * len(weights)), squeeze=False
    )
    image = _heatmap_panel(axes[0][0], weights, languages, layer_labels, title)
    fig.colorbar(image, ax=axes[0][0], fraction=0.046, pad=0.04)
    if panels == 2:
        keep = [j for j, lang in enumerate(languages) if lang != target]
        sources = weights[:, keep]
        sources = sources / np.clip(sources.sum(1, keepdims=True), 1e-12, None)
        image = _heatmap_panel(
            axes[0][1],
            sources,
            [languages[j] for j in keep],
            layer_labels,
            f"source languages only (renormalised, {target} dropped)",
        )
        fig.colorbar(image, ax=axes[0][1], fraction=0.046, pad=0.04)
    return save_figure(fig, path)


def plot_training_curves(
    histories: Mapping[str, Sequence[Mapping[str, Any]]],
    path: str | os.PathLike,
    keys: Sequence[str] = ("loss", "eval_cer"),
) -> Path:
    """One panel per key (training loss, dev CER ...), one line per run, from ``Trainer.state.log_history``."""
    plt = pyplot()
    many = len(histories) > 8  # the default colour cycle repeats after 10: tab20 and two line styles, legend outside
    fig, axes = plt.subplots(1, len(keys), figsize=(5 * len(keys) + (2.2 if many else 0), 3.6), squeeze=False)
    cmap = plt.get_cmap("tab20")
    for ax, key in zip(axes[0], keys, strict=True):
        for i, (run, history) in enumerate(histories.items()):
            points = [(h["step"], h[key]) for h in history if key in h and "step" in h]
            if points:
                steps, values = zip(*points, strict=True)
                style = {"color": cmap(i % 20), "linestyle": "-" if i % 2 == 0 else "--"} if many else {}
                ax.plot(steps, values, marker="o" if len(points) < 30 else None, markersize=3, label=run, **style)
        ax.set_xlabel("optimizer step")
        ax.set_ylabel(key)
        ax.set_title(key)
        ax.grid(alpha=0.3)
    last = axes[0][-1]
    if last.get_legend_handles_labels()[0]:
        if many:
            last.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.02, 1.0), borderaxespad=0)
        else:
            last.legend(fontsize=8)
    return save_figure(fig, path)
