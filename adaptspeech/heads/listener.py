"""The LAS listener: pyramidal BLSTM layers on top of the encoder output.

Seed (``004``): ``h_i^j = pBLSTM(h_(i-1)^j, [h_2i^(j-1), h_(2i+1)^(j-1)])`` — every layer reads the
concatenation of two consecutive frames of the layer below, so each layer halves the number of frames.

Odd lengths: a sequence with an odd number of real frames gets one zero frame appended before pairing,
so its last output frame reads ``[h_(L-1), 0]`` and no real frame is ever dropped (the LAS paper and
ESPnet drop it instead). The new length is ``ceil(L / 2)``. Padded frames are zeroed before pairing and
the BLSTM runs on packed sequences, so padding never leaks into real frames in either direction.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

from .las_config import LASConfig


def padding_mask_to_lengths(padding_mask: torch.Tensor, name: str = "encoder_padding_mask") -> torch.Tensor:
    """Lengths ``[B]`` of a right-padded mask ``[B, T]`` (True / non-zero = real frame).

    Raises:
        ValueError: naming ``name`` and the row, if a row has no real frame or real frames after padding.
    """
    if padding_mask.dim() != 2:
        raise ValueError(f"{name} must be [batch, frames]; got shape {tuple(padding_mask.shape)}")
    mask = padding_mask.bool()
    lengths = mask.sum(dim=1)
    expected = lengths_to_padding_mask(lengths, mask.shape[1])
    bad = (mask != expected).any(dim=1) | (lengths == 0)
    if bad.any():
        row = int(bad.nonzero()[0])
        raise ValueError(
            f"{name} row {row} must be right-padded with at least one real frame "
            f"(True for the first L frames, False after); got {mask[row].int().tolist()}"
        )
    return lengths


def lengths_to_padding_mask(lengths: torch.Tensor, max_length: int) -> torch.Tensor:
    """Bool mask ``[B, max_length]``, True on the first ``lengths[b]`` frames."""
    return torch.arange(max_length, device=lengths.device)[None, :] < lengths[:, None]


def join_pairs(hidden_states: torch.Tensor, lengths: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Concatenate frames ``2i`` and ``2i+1``: ``[B, T, D] -> [B, ceil(T/2), 2D]``.

    Padded frames (``t >= lengths[b]``) are zeroed first; an odd length gets a zero partner for its last
    frame. Returns the joined frames and the new lengths ``ceil(lengths / 2)``.
    """
    batch, frames, width = hidden_states.shape
    real = lengths_to_padding_mask(lengths, frames)
    hidden_states = hidden_states.masked_fill(~real[..., None], 0.0)
    if frames % 2:
        hidden_states = nn.functional.pad(hidden_states, (0, 0, 0, 1))
    joined = hidden_states.reshape(batch, hidden_states.shape[1] // 2, 2 * width)
    return joined, (lengths + 1) // 2


class ListenerOutput(NamedTuple):
    """hidden_states ``[B, T', D']`` and padding_mask ``[B, T']`` (True = real).

    With at least one layer the padded frames of ``hidden_states`` are zero; with none the encoder
    output is passed through untouched (the attention masks padded frames either way).
    """

    hidden_states: torch.Tensor
    padding_mask: torch.Tensor


class PyramidalBLSTM(nn.Module):
    """``config.listener_layers`` pyramidal BLSTM layers; zero layers is the identity.

    Args:
        config (`LASConfig`): reads ``encoder_hidden_size``, ``listener_layers``, ``listener_hidden``,
            ``dropout``.

    Attributes:
        output_size (`int`): ``2 * listener_hidden`` with layers, ``encoder_hidden_size`` without.
    """

    def __init__(self, config: LASConfig) -> None:
        super().__init__()
        self.layers = nn.ModuleList()
        width = config.encoder_hidden_size
        for _ in range(config.listener_layers):
            layer = nn.LSTM(2 * width, config.listener_hidden, batch_first=True, bidirectional=True)
            self.layers.append(layer)
            width = 2 * config.listener_hidden
        self.output_size = width
        self.dropout = nn.Dropout(config.dropout)

    def output_lengths(self, lengths: torch.Tensor) -> torch.Tensor:
        """Frames left after all layers: ``ceil`` halving once per layer."""
        for _ in self.layers:
            lengths = (lengths + 1) // 2
        return lengths

    def forward(self, hidden_states: torch.Tensor, padding_mask: torch.Tensor) -> ListenerOutput:
        """Run the pyramid.

        Args:
            hidden_states: ``[B, T, D]`` encoder output.
            padding_mask: ``[B, T]`` bool, True on real frames (right padding).

        Returns:
            `ListenerOutput` with ``[B, ceil(T / 2^layers), output_size]`` frames and the matching mask.
        """
        lengths = padding_mask_to_lengths(padding_mask)
        if not self.layers:
            return ListenerOutput(hidden_states, padding_mask.bool())
        for layer in self.layers:
            joined, lengths = join_pairs(hidden_states, lengths)
            packed = pack_padded_sequence(joined, lengths.cpu(), batch_first=True, enforce_sorted=False)
            output, _ = layer(packed)
            hidden_states, _ = pad_packed_sequence(output, batch_first=True, total_length=joined.shape[1])
            hidden_states = self.dropout(hidden_states)
        mask = lengths_to_padding_mask(lengths, hidden_states.shape[1])
        return ListenerOutput(hidden_states.masked_fill(~mask[..., None], 0.0), mask)
