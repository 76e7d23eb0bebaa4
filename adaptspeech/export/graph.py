"""One language of an adaptspeech CTC model as an ONNX graph, correct at any batch size and input length.

``torch.onnx.export(..., dynamo=False)`` traces the model with its example input and freezes every Python integer
taken from a shape on the way (the frame count of ``_get_feat_extract_output_lengths``, transformers' mask padding,
the conformer's position table), so the graph is wrong at other lengths. This module exports through
``torch.export`` with dynamic batch and length instead (``Dim.DYNAMIC``): the model's own length arithmetic runs on
symbolic integers (:meth:`adaptspeech.backbones.BackboneSpec.num_frames`), the conformer convolution masks its padding
without a data-dependent shortcut, and attention runs transformers' ``eager`` implementation (the ``sdpa`` one does
not translate for the conformer's relative positions).

The graph (:class:`ExportableCTC`):

* inputs ``x`` (waveform ``[B, S]`` float32, or log-mel frames ``[B, S, F]``, *un-normalised*) and ``x_lengths``
  (``[B]`` int64 real samples / frames per row; ``-1`` means the whole row). ``x_lengths`` also has a stored
  default ``[-1]``, so a caller that feeds ``x`` alone with one row (sherpa-onnx) gets the whole input.
* the normalisation of the feature extractor inside the graph (``do_normalize``): per utterance (zero mean, unit
  variance over each row's real part, eps 1e-7) or, under ``normalization: global``, with the training set's per-bin
  mean and variance held in the graph as constants (:func:`global_normalize`); padding set to 0 as the collator pads;
  then the model with the chosen adapter or SimAdapter fusion and the language's CTC head.
* outputs ``logits`` (``[B, T, V]`` float32, the CTC head's, as PyTorch computes them) and ``logits_lengths``
  (``[B]`` int64 real frames).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn
from torch.export import Dim

INPUT_NAMES = ("x", "x_lengths")
OUTPUT_NAMES = ("logits", "logits_lengths")
NORMALIZE_EPS = 1e-7
"""The ``Wav2Vec2FeatureExtractor`` / :func:`adaptspeech.runtime.features.normalize_utterance` epsilon."""
OPSET = 18


def masked_normalize(x: torch.Tensor, mask: torch.Tensor, eps: float = NORMALIZE_EPS) -> torch.Tensor:
    """Each row of ``x`` (``[B, S]`` or ``[B, S, F]``) normalised to zero mean and unit variance over its real units
    (``mask`` ``[B, S]`` bool; per column for ``[B, S, F]``), padding set to 0: what
    :func:`~adaptspeech.runtime.features.normalize_utterance` does to each utterance before the collator pads it."""
    weights = mask.to(x.dtype)
    if x.dim() == 3:
        weights = weights.unsqueeze(-1)
    count = weights.sum(dim=1, keepdim=True).clamp(min=1.0)
    mean = (x * weights).sum(dim=1, keepdim=True) / count
    var = (((x - mean) * weights) ** 2).sum(dim=1, keepdim=True) / count
    return (x - mean) / torch.sqrt(var + eps) * weights


def global_normalize(x: torch.Tensor, mask: torch.Tensor, mean: torch.Tensor, var: torch.Tensor,
                     eps: float = NORMALIZE_EPS) -> torch.Tensor:
    """``x`` ``[B, S, F]`` normalised with fixed per-bin statistics (``mean``, ``var`` ``[F]``: WeNet's global CMVN),
    padding (``mask`` ``[B, S]`` false) set to 0: what :meth:`adaptspeech.runtime.features.GlobalCmvn.apply` does to
    each utterance before the collator pads it."""
    return (x - mean) / torch.sqrt(var + eps) * mask.to(x.dtype).unsqueeze(-1)


class ExportableCTC(nn.Module):
    """The exported computation: normalisation, encoder with the routed adapter / fusion, CTC head.

    Args:
        model: an :class:`~adaptspeech.modeling.AdaptSpeechForCTC` in eval mode, its language (or fusion) active.
        normalize: normalise each row inside the graph (the feature extractor's ``do_normalize``).
        global_cmvn: the training set's statistics (``normalization: global``; a
            :class:`~adaptspeech.runtime.features.GlobalCmvn`): the graph normalises with them (when ``normalize``),
            not per row. None: per row.
    """

    def __init__(self, model: nn.Module, normalize: bool, global_cmvn: Any | None = None) -> None:
        super().__init__()
        self.model = model
        self.normalize = normalize
        self.input_name = model.main_input_name
        self.uses_global_cmvn = global_cmvn is not None
        if global_cmvn is not None:
            self.register_buffer("cmvn_mean", torch.tensor(global_cmvn.mean, dtype=torch.float32), persistent=False)
            self.register_buffer("cmvn_var", torch.tensor(global_cmvn.var, dtype=torch.float32), persistent=False)

    def forward(self, x: torch.Tensor, x_lengths: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``x`` ``[B, S]`` / ``[B, S, F]``, ``x_lengths`` ``[B]`` (-1: all of ``S``) -> ``(logits [B, T, V],
        logits_lengths [B])``."""
        units = x.shape[1]
        lengths = torch.where(x_lengths < 0, torch.full_like(x_lengths, units), x_lengths)
        mask = torch.arange(units, device=x.device)[None, :] < lengths[:, None]
        if self.normalize and self.uses_global_cmvn:
            x = global_normalize(x, mask, self.cmvn_mean, self.cmvn_var)
        elif self.normalize:
            x = masked_normalize(x, mask)
        out = self.model(**{self.input_name: x}, attention_mask=mask)
        return out.logits, out.frame_lengths.to(torch.int64)


@contextmanager
def eager_attention(model: nn.Module) -> Iterator[None]:
    """transformers' ``eager`` attention for the duration (the ``sdpa`` graph of the conformer's relative attention
    does not translate to ONNX); the model's own setting is restored after."""
    previous = getattr(model.config, "_attn_implementation", None)
    backbone = getattr(model, "backbone", model)
    before = getattr(backbone.config, "_attn_implementation", None)
    try:
        if hasattr(backbone, "set_attn_implementation"):
            backbone.set_attn_implementation("eager")
        yield
    finally:
        if before is not None and hasattr(backbone, "set_attn_implementation"):
            backbone.set_attn_implementation(before)
        if previous is not None:
            model.config._attn_implementation = previous


def example_inputs(model: nn.Module, feature_size: int, units: int = 16000, batch: int = 2) -> tuple[torch.Tensor, ...]:
    """Random ``(x, x_lengths)`` to export with: ``[batch, units]`` (or ``[batch, units, feature_size]`` for framed
    features), the second row shorter."""
    gen = torch.Generator().manual_seed(0)
    shape = (batch, units) if feature_size == 1 else (batch, units, feature_size)
    x = torch.randn(*shape, generator=gen)
    lengths = torch.full((batch,), units, dtype=torch.int64)
    lengths[-1] = units * 3 // 4
    return x, lengths


def export_graph(module: ExportableCTC, example: tuple[torch.Tensor, ...], path: str | os.PathLike) -> Path:
    """``torch.export`` ``module`` with dynamic batch and length and write it as ONNX (opset :data:`OPSET`, weights
    inside the file) at ``path``; the stored ``x_lengths`` default ``[-1]`` is added (see the module docstring).

    Raises:
        RuntimeError: ``torch.export`` or the ONNX translation failed (the cause chained).
    """
    import onnx  # noqa: PLC0415 (export extra): the module imports without it

    path = Path(path)
    dynamic = ({0: Dim.DYNAMIC, 1: Dim.DYNAMIC}, {0: Dim.DYNAMIC})
    with torch.no_grad():
        program = torch.export.export(module, example, dynamic_shapes=dynamic, strict=False)
        onnx_program = torch.onnx.export(
            program, dynamo=True, input_names=list(INPUT_NAMES), output_names=list(OUTPUT_NAMES), opset_version=OPSET,
            optimize=True, verbose=False,
        )
    proto = onnx_program.model_proto
    _add_lengths_default(proto)
    onnx.save_model(proto, str(path))
    return path


def _add_lengths_default(proto: Any) -> None:
    """Give the ``x_lengths`` input a stored default ``[-1]`` (an initializer of the same name: onnxruntime uses it
    when the caller does not feed the input)."""
    from onnx import numpy_helper  # noqa: PLC0415 (export extra): the module imports without it

    name = INPUT_NAMES[1]
    if any(init.name == name for init in proto.graph.initializer):
        return
    proto.graph.initializer.append(numpy_helper.from_array(np.array([-1], dtype=np.int64), name=name))
