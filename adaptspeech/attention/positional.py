"""Relative sinusoidal position embeddings and the ``rel_shift`` trick of Transformer-XL (Dai et al. 2019), as WeNet
implements it.

Ordering. The table holds the embeddings ``R_r`` of relative positions ``r = T-1, T-2, ..., 0, ..., -(T-1)``
(``2T-1`` rows; ``r = i - j`` is the query position minus the key position), as in Transformer-XL, ESPnet and
transformers' ``Wav2Vec2ConformerRelPositionalEmbedding``: with this order ``rel_shift`` puts ``R_{i-j}`` at
score ``(i, j)`` and pretrained wav2vec2-conformer ``linear_pos`` weights apply unchanged. ``R_r[2k] = sin(r
w_k)``, ``R_r[2k+1] = cos(r w_k)``, ``w_k = 10000^(-2k/D)``. (The seed's wenet snippet slices an absolute
table around ``max_len/2``, i.e. embeds ``mid + r``; that is a fixed rotation of the same sinusoids, which
``linear_pos`` would absorb, but it would not load transformers' checkpoints, so we embed ``r`` itself.)
"""

from __future__ import annotations

import math

import torch
from torch.nn import functional as F


def relative_sinusoids(
    num_frames: int, dim: int, dtype: torch.dtype = torch.float32, device: torch.device | None = None
) -> torch.Tensor:
    """Sinusoids of relative positions ``T-1 .. -(T-1)``: ``[2T-1, D]`` (``D`` even).

    Computed in float32 exactly as transformers does (same operations, same order), then cast to ``dtype``.
    """
    if dim % 2:
        raise ValueError(f"relative position embeddings need an even hidden_size, got {dim}")
    positions = torch.arange(num_frames - 1, -num_frames, -1, dtype=torch.int64, device=device).float()[:, None]
    div_term = torch.exp(torch.arange(0, dim, 2, dtype=torch.int64, device=device).float() * -(math.log(10000.0) / dim))
    table = torch.zeros(2 * num_frames - 1, dim, device=device)
    table[:, 0::2] = torch.sin(positions * div_term)
    table[:, 1::2] = torch.cos(positions * div_term)
    return table.to(dtype)


class RelativePositionTable:
    """A cache of :func:`relative_sinusoids` for the longest length seen so far (not part of any state dict).

    Args:
        dim (`int`): embedding width ``D``.
        max_len (`int`): length of the table built on first use; longer inputs rebuild it.
    """

    def __init__(self, dim: int, max_len: int) -> None:
        self.dim = dim
        self.max_len = max_len
        self._table: torch.Tensor | None = None

    def __call__(self, num_frames: int, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
        """``[2T-1, D]`` embeddings of positions ``T-1 .. -(T-1)``, sliced from the centre of the cached
        table."""
        if torch.compiler.is_exporting():  # the table of this length, from torch ops of it: no cache to compare
            return relative_sinusoids(num_frames, self.dim, dtype=dtype, device=device)
        table = self._table
        # built outside inference mode: a cached inference tensor would break every later pass that records
        # autograd (e.g. training after a ``torch.inference_mode()`` evaluation)
        with torch.inference_mode(False):
            if table is None or (table.shape[0] + 1) // 2 < num_frames:
                table = relative_sinusoids(max(num_frames, self.max_len), self.dim, device=device)
            if table.dtype != dtype or table.device != device:
                table = table.to(device=device, dtype=dtype)
        self._table = table
        centre = table.shape[0] // 2  # row of relative position 0
        return table[centre - num_frames + 1 : centre + num_frames]


def rel_shift(scores: torch.Tensor) -> torch.Tensor:
    """The seed's ``rel_shift``, by padding and reshaping (no loop): ``[..., C, 2L-1] -> [..., C, 2L-1]``.

    Prepend a zero column, view the ``C x 2L`` block as ``2L x C``, drop its first row (the first ``C``
    elements), view back as ``C x (2L-1)``. Row ``i`` ends up shifted left by ``C-1-i``: entry ``(i, j)`` of
    the result is entry ``(i, j + C-1-i)`` of the input, so with the table order above and ``L = M + C`` keys
    of which the ``C`` queries are the last, the first ``L`` columns hold ``R_{(M+i) - j}``. Take them with
    :func:`relative_scores`.
    """
    *lead, rows, cols = scores.shape
    padded = F.pad(scores, (1, 0))  # [..., C, 2L]: a zero column in front of every row
    padded = padded.reshape(*lead, cols + 1, rows)  # the C x 2L block viewed as 2L x C
    return padded[..., 1:, :].reshape(*lead, rows, cols)  # drop the first C elements, view as C x (2L-1)


def relative_scores(scores: torch.Tensor, num_keys: int) -> torch.Tensor:
    """``rel_shift`` then keep the first ``num_keys`` columns: ``[..., C, 2L-1] -> [..., C, L]`` (a view)."""
    return rel_shift(scores)[..., :num_keys]


def relative_scores_prepadded(padded: torch.Tensor, num_keys: int) -> torch.Tensor:
    """The views of :func:`rel_shift` on a matrix that already carries WeNet's zero first column.

    ``[..., C, 2L]`` (column 0 all zeros) -> ``[..., C, L]``, a view: no copy. ``relative_scores(x, L)`` equals
    ``relative_scores_prepadded(F.pad(x, (1, 0)), L)``; ``rel_pos`` gets the padded matrix for free by giving the
    position matrix a zero first row (``q . 0 = 0``), so the ``T x 2T`` score matrix is never copied to pad it.
    """
    *lead, rows, cols = padded.shape
    shifted = padded.reshape(*lead, cols, rows)[..., 1:, :].reshape(*lead, rows, cols - 1)
    return shifted[..., :num_keys]


def relative_scores_prepadded_backward(grad: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
    """The gradient of :func:`relative_scores_prepadded`: ``grad`` ``[..., C, L]`` written into ``out`` ``[..., C, W]``
    (contiguous, the padded matrix's shape, ``W > L``) at the entries the forward read, zeros elsewhere.

    Each entry of the padded matrix is read at most once, so the gradient is a scatter, not a sum. Only the
    unread entries are zeroed (the first ``C`` elements and the last ``W - 1 - L`` of every shifted row), not the
    whole matrix. Returns ``out``.
    """
    *lead, rows, cols = out.shape
    num_keys = grad.shape[-1]
    flat = out.view(*lead, rows * cols)
    flat[..., :rows].zero_()  # the first C elements, dropped by the shift
    shifted = flat[..., rows:].view(*lead, rows, cols - 1)
    shifted[..., num_keys:].zero_()  # columns past the kept keys
    shifted[..., :num_keys].copy_(grad)
    return out
