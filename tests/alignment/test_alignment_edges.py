"""Where a line's clip is cut: the speech edges found in the audio's energy next to the aligned frames."""

from __future__ import annotations

import numpy as np
import pytest

from adaptspeech.alignment.edges import clip_edges
from adaptspeech.alignment.segmentation import LineAlignment

RATE = 16000
FRAME_S = 0.04


def _recording(speech: list[tuple[float, float]], seconds: float, noise_dbfs: float | None,
               seed: int = 0) -> np.ndarray:
    """``[S]`` a recording with loud noise bursts (the 'speech', each with a soft 60 ms tail 14 dB below it
    and a 50 ms near-silent closure before it) on ``speech`` spans, silence or room noise elsewhere."""
    rng = np.random.default_rng(seed)
    wave = np.zeros(round(seconds * RATE), dtype=np.float32)
    for start, end in speech:
        a, b = round(start * RATE), round(end * RATE)
        wave[a:b] = 0.1 * rng.standard_normal(b - a)
        wave[b - round(0.11 * RATE) : b - round(0.06 * RATE)] *= 0.003  # a stop's closure before the last phone
        wave[b - round(0.06 * RATE) : b] *= 0.2  # a soft final fricative (14 dB down)
    if noise_dbfs is not None:
        wave += rng.standard_normal(len(wave)).astype(np.float32) * 10 ** (noise_dbfs / 20)
    return wave


def _frames(start: float, end: float) -> tuple[int, int]:
    return round(start / FRAME_S), round(end / FRAME_S)


def test_edges_reach_the_speech_the_aligner_left_out_and_stop_at_the_pause():
    # the aligner ends lines 0.16 s before their soft last phone (blank over it) and starts them a frame late:
    # the clip's edges are moved to the speech's, plus the pad; an untranscribed burst after the second line's
    # pause (0.15 s) is not taken
    speech = [(0.5, 2.0), (2.6, 4.0), (4.15, 5.0), (5.8, 7.0)]
    for noise in (None, -40.0):
        wave = _recording(speech, 8.0, noise)
        lines = [speech[0], speech[1], speech[3]]
        spans = [LineAlignment(*_frames(a + 0.04, b - 0.16), -0.5) for a, b in lines]
        for pad in (0.0, 0.05):
            edges = clip_edges(spans, wave, FRAME_S, pad)
            for (start, end), (a, b) in zip(edges, lines, strict=True):
                assert abs(start - (a - pad)) <= 0.015, (noise, pad, start, a)
                assert abs(end - (b + pad)) <= 0.015, (noise, pad, end, b)
            assert edges[1][1] < 4.1  # not into the untranscribed burst at 4.15 s


def test_pads_are_capped_by_half_the_pause_and_never_cross_the_neighbour():
    speech = [(0.3, 1.5), (1.6, 3.0)]  # a 0.1 s pause
    wave = _recording(speech, 3.5, -40.0, seed=1)
    spans = [LineAlignment(*_frames(a, b), -0.5) for a, b in speech]
    (s0, e0), (s1, e1) = clip_edges(spans, wave, FRAME_S, 0.2)
    assert e0 == pytest.approx(1.55, abs=0.011) and s1 == pytest.approx(e0)  # half the pause each
    assert s0 == pytest.approx(0.1, abs=0.011) and e1 == pytest.approx(3.2, abs=0.011)


def test_a_line_placed_on_audio_without_speech_keeps_its_aligned_frames():
    wave = np.zeros(3 * RATE, dtype=np.float32)  # digital silence: no speech edge to move to
    spans = [LineAlignment(10, 30, -4.0)]
    ((start, end),) = clip_edges(spans, wave, FRAME_S, 0.05)
    assert start == pytest.approx(0.35) and end == pytest.approx(1.25)
