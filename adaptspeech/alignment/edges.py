"""Where an aligned line's clip is cut: at the speech edges the audio's energy shows next to the aligned frames.

The aligner places a line on the model's output frames (40 ms for the demo's models), and a model that does not read
the language well hears a soft last phone (a final fricative, a stop's release after its closure) as blank: measured
on the demo's sk subset with the zero-shot base, 29 of 251 clips ended up to 0.17 s before their speech did, and a
fixed pad of 0.1 s around the frames put 0.09 s of pause on each side where the true clips have 0.01 s. So each edge
is moved to the speech edge of the audio (10 ms frames of log power; a frame is quiet by the pause rule of
:mod:`~adaptspeech.runtime.pauses`: digital silence, or below ``max(R - 30 dB, min(F + 3 dB, R - 10 dB))``):

- an edge on a sounding frame grows outwards over sounding frames, across quiet runs shorter than ``bridge_s`` (a
  stop's closure inside the line), at most ``max_move_s``, never past the middle of the aligned gap to the
  neighbouring line: the pause before a neighbour (or before speech that has no text) ends it;
- an edge on a quiet frame moves inwards to the line's first (last) sounding frame;
- a line with no sounding frame keeps its aligned frames.

Then ``pad_s`` of the pause is added on each side, at most half the pause to the neighbouring line's speech edge, so
that no clip holds a neighbour's speech (and to the recording's ends).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ..runtime.pauses import DIGITAL_SILENCE_DB, energy_cost, pause_threshold
from .segmentation import LineAlignment

SAMPLING_RATE = 16000
EDGE_FRAME_S = 0.01
"""Seconds of one frame of the energy the edges are placed on."""
DEFAULT_BRIDGE_S = 0.08
"""Longest quiet run an edge grows across (a stop's closure; the fixture's pauses between lines are 0.1-1.0 s)."""
DEFAULT_MAX_MOVE_S = 0.5
"""Farthest an edge grows from its aligned frame."""


def quiet_frames(waveform: np.ndarray) -> np.ndarray:
    """``[N]`` bool: which 10 ms frames of the 16 kHz ``waveform`` ``[S]`` are quiet (module docstring)."""
    hop = round(EDGE_FRAME_S * SAMPLING_RATE)
    energy = energy_cost(waveform, hop, -(-len(waveform) // hop))
    return (energy <= DIGITAL_SILENCE_DB) | (energy < pause_threshold(energy))


def _grow(sounding: np.ndarray, edge: int, limit: int, step: int, bridge: int) -> int:
    """The last sounding frame reached from ``edge`` walking by ``step`` towards ``limit`` (inclusive) across quiet
    runs of at most ``bridge`` frames; ``edge`` when none."""
    last, t = edge, edge + step
    while (t >= limit if step < 0 else t <= limit) and abs(t - last) <= bridge + 1:
        if sounding[t]:
            last = t
        t += step
    return last


def speech_edges(spans: Sequence[LineAlignment], waveform: np.ndarray, seconds_per_frame: float,
                 bridge_s: float = DEFAULT_BRIDGE_S, max_move_s: float = DEFAULT_MAX_MOVE_S) -> list[tuple[int, int]]:
    """``[(first, end), ...]`` 10 ms frames of each line's speech (module docstring), from its aligned ``spans``
    (output frames of ``seconds_per_frame``) and the 16 kHz ``waveform`` ``[S]``."""
    sounding = ~quiet_frames(waveform)
    total = len(sounding)
    scale = seconds_per_frame / EDGE_FRAME_S
    aligned = [(min(round(s.first_frame * scale), total - 1), min(max(round(s.end_frame * scale), 1), total))
               for s in spans]
    bridge, reach = round(bridge_s / EDGE_FRAME_S), round(max_move_s / EDGE_FRAME_S)
    out = []
    for i, (first, end) in enumerate(aligned):
        low = 0 if i == 0 else (aligned[i - 1][1] + first) // 2
        high = total - 1 if i == len(aligned) - 1 else (end + aligned[i + 1][0]) // 2 - 1
        inside = np.flatnonzero(sounding[first:end])
        if len(inside) == 0:
            out.append((first, end))
            continue
        start = first + int(inside[0]) if not sounding[first] else \
            _grow(sounding, first, max(low, first - reach), -1, bridge)
        last = first + int(inside[-1]) if not sounding[end - 1] else \
            _grow(sounding, end - 1, min(high, end - 1 + reach), 1, bridge)
        out.append((start, last + 1))
    return out


def clip_edges(spans: Sequence[LineAlignment], waveform: np.ndarray, seconds_per_frame: float, pad_s: float,
               bridge_s: float = DEFAULT_BRIDGE_S, max_move_s: float = DEFAULT_MAX_MOVE_S
               ) -> list[tuple[float, float]]:
    """Seconds ``(start, end)`` of each line's clip: its speech edges (:func:`speech_edges`) widened by ``pad_s``, at
    most half the pause to the neighbouring line's speech and to the recording's ends.

    Args:
        spans: the lines placed on the output frames (frames non-decreasing).
        waveform: ``[S]`` the 16 kHz recording.
        seconds_per_frame: seconds between two output frames.
        pad_s: seconds of pause kept on each side.
    """
    edges = speech_edges(spans, waveform, seconds_per_frame, bridge_s, max_move_s)
    seconds = len(waveform) / SAMPLING_RATE
    out = []
    for i, (first, end) in enumerate(edges):
        low = 0.0 if i == 0 else (edges[i - 1][1] + first) / 2 * EDGE_FRAME_S
        high = seconds if i == len(edges) - 1 else (end + edges[i + 1][0]) / 2 * EDGE_FRAME_S
        out.append((max(low, first * EDGE_FRAME_S - pad_s), min(high, end * EDGE_FRAME_S + pad_s)))
    return out
