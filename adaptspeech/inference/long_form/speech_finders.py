"""The speech-region finders: where a recording holds speech, on its output-frame grid (stage 1's rule).

:data:`SPEECH_FINDERS` maps a name (``speech_finder``, ``--speech-finder``) to a :class:`SpeechFinder`:

- ``"energy"``: the two-threshold rule on each frame's log power (:mod:`~adaptspeech.runtime.pauses`); levels are
  percentiles over the whole recording, so it needs the whole recording and cannot endpoint a stream;
- ``"silero"``: silero-vad's speech probability per 32 ms window (:mod:`~adaptspeech.inference.long_form.silero`),
  turned into regions by silero's own rule (``get_speech_timestamps_from_probs``: speech from a window at
  ``vad_threshold``, ended by ``min_pause_s`` below ``vad_threshold - 0.15``, widened by ``speech_pad_s``), then laid on
  the frame grid: a region covers every output frame its samples touch, and two regions less than one frame apart are
  one;
- ``"auto"`` (the default): the energy rule's regions, unless it finds no pause between two regions and silero does
  (when ``silero-vad`` is installed; without it, the energy rule's): the energy rule is the better of the two wherever
  it finds the pauses (its regions end within 0.03 s of the speech, silero's up to 0.33 s late), silero where noise
  as loud as the quiet frames of the speech hides them from it (docs/streaming.md, the figures in
  docs/benchmarks.md).

All give ``(regions [(first, end), ...], boundaries [frame, ...])`` on the output frames, regions in order with at
least one frame between two, and the middle frame of every pause between two regions as a word boundary (outside
every region). Their settings (:class:`SpeechFinderSettings`) are checked once, at construction: a finder name that is
not registered, a pause that is not positive, a negative pad, a threshold outside ``(0.15, 1)``, and silero without
the ``silero-vad`` package are each one line.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from ...registry import Registry
from ...runtime.pauses import DEFAULT_MIN_PAUSE_S, DEFAULT_PAUSE_DB, DEFAULT_SPEECH_PAD_S, energy_cost, speech_regions
from .silero import (
    DEFAULT_THRESHOLD,
    StreamingSileroVAD,
    check_silero,
    check_threshold,
    silero_available,
    speech_probabilities,
)

DEFAULT_SPEECH_FINDER = "auto"
"""The finder of ``--split-by pauses`` when none is named."""

SILERO_MIN_PAUSE_S = 0.1
"""silero's shortest pause (its ``min_silence_duration_ms`` default): its probabilities are already smoothed over
time (they fall 0.2-0.3 s after speech ends in -50 dBFS noise), so the energy rule's 0.25 s, chosen to bridge the
demo clips' own pauses, would bridge the 0.3 s pauses between them too."""

FrameRegions = tuple[list[tuple[int, int]], list[int]]
"""``(regions [(first, end), ...] output frames in order, boundaries [frame, ...])``."""


@dataclass(frozen=True)
class SpeechFinderSettings:
    """Which finder, with its settings; checked at construction (see the module docstring).

    Args:
        finder: a name of :data:`SPEECH_FINDERS`.
        min_pause_s: shortest pause between two speech regions (None: each finder's own default,
            :attr:`SpeechFinder.default_min_pause_s`; :meth:`min_pause`).
        speech_pad_s: seconds of pause kept on each side of a region.
        pause_db: ``"energy"``: decibels below the speech level under which a frame is a pause frame.
        vad_threshold: ``"silero"``: the speech probability that starts speech.
    """

    finder: str = DEFAULT_SPEECH_FINDER
    min_pause_s: float | None = None
    speech_pad_s: float = DEFAULT_SPEECH_PAD_S
    pause_db: float = DEFAULT_PAUSE_DB
    vad_threshold: float = DEFAULT_THRESHOLD

    def __post_init__(self) -> None:
        SPEECH_FINDERS.check(self.finder, "speech_finder")
        check_pause_settings(self.min_pause(self.finder), self.speech_pad_s)
        check_threshold(self.vad_threshold)
        SPEECH_FINDERS.get(self.finder).require()

    def min_pause(self, finder: str) -> float:
        """The shortest pause ``finder`` uses: ``min_pause_s``, or its own default."""
        return SPEECH_FINDERS.get(finder).default_min_pause_s if self.min_pause_s is None else self.min_pause_s

    def find(self, waveform: np.ndarray, samples_per_frame: int, num_frames: int) -> FrameRegions:
        """The speech regions and word boundaries of a 16 kHz recording ``[S]`` on ``num_frames`` output frames of
        ``samples_per_frame`` samples."""
        return SPEECH_FINDERS.get(self.finder).find(waveform, samples_per_frame, num_frames, self)


def check_pause_settings(min_pause_s: float, speech_pad_s: float) -> None:
    """Refuse a pause that is not positive or a pad that is negative (``ValueError`` naming both)."""
    if min_pause_s <= 0 or speech_pad_s < 0:
        raise ValueError(f"min_pause_s must be positive and speech_pad_s not negative, got {min_pause_s} and "
                         f"{speech_pad_s}")


@dataclass(frozen=True)
class SpeechFinder:
    """One speech-region finder.

    Args:
        find: ``(waveform [S], samples_per_frame, num_frames, settings) -> (regions, boundaries)`` output frames.
        stream: ``(vad_threshold) -> detector`` over a stream, for endpointing
            (:class:`~adaptspeech.inference.streaming.vad_endpointing.VADEndpointer`), or None: it needs the whole
            recording.
        default_min_pause_s: its shortest pause when none is set.
        options: the settings of :class:`SpeechFinderSettings` that only it reads.
        require: raises (one line) when what it needs is not installed.
    """

    find: Callable[[np.ndarray, int, int, SpeechFinderSettings], FrameRegions]
    stream: Callable[[float], Any] | None
    default_min_pause_s: float
    options: tuple[str, ...] = ()
    require: Callable[[], None] = lambda: None


SPEECH_FINDERS: Registry[SpeechFinder] = Registry("speech finder")
"""The speech-region finders by name."""


def _energy(waveform: np.ndarray, samples_per_frame: int, num_frames: int,
            settings: SpeechFinderSettings) -> FrameRegions:
    seconds_per_frame = samples_per_frame / 16000
    return speech_regions(energy_cost(waveform, samples_per_frame, num_frames),
                          max(1, round(settings.min_pause("energy") / seconds_per_frame)),
                          round(settings.speech_pad_s / seconds_per_frame), settings.pause_db)


def _silero(waveform: np.ndarray, samples_per_frame: int, num_frames: int,
            settings: SpeechFinderSettings) -> FrameRegions:
    from silero_vad import get_speech_timestamps_from_probs

    spans = get_speech_timestamps_from_probs(
        speech_probabilities(waveform).tolist(), threshold=settings.vad_threshold, min_speech_duration_ms=0,
        min_silence_duration_ms=1000 * settings.min_pause("silero"), speech_pad_ms=1000 * settings.speech_pad_s,
        audio_length_samples=len(waveform))
    return samples_to_frames([(s["start"], s["end"]) for s in spans], samples_per_frame, num_frames)


def samples_to_frames(spans: list[tuple[int, int]], samples_per_frame: int, num_frames: int) -> FrameRegions:
    """Speech ``[(start, end), ...]`` samples in order -> ``(regions, boundaries)`` on ``num_frames`` output frames:
    each region every frame its samples touch, regions less than one frame apart merged, a boundary at the middle
    frame of every gap between two regions."""
    regions: list[tuple[int, int]] = []
    for start, end in spans:
        first, last = start // samples_per_frame, min(num_frames, -(-end // samples_per_frame))
        if last <= first:
            continue
        if regions and first <= regions[-1][1]:  # no frame between them: one region
            regions[-1] = (regions[-1][0], max(last, regions[-1][1]))
        else:
            regions.append((first, last))
    boundaries = [(a_end + b_first - 1) // 2 for (_, a_end), (b_first, _) in itertools.pairwise(regions)]
    return regions, boundaries


def _auto(waveform: np.ndarray, samples_per_frame: int, num_frames: int,
          settings: SpeechFinderSettings) -> FrameRegions:
    energy = _energy(waveform, samples_per_frame, num_frames, settings)
    if energy[1] or not silero_available():
        return energy
    learned = _silero(waveform, samples_per_frame, num_frames, settings)
    return learned if learned[1] else energy


SPEECH_FINDERS.register("energy")(SpeechFinder(_energy, stream=None, default_min_pause_s=DEFAULT_MIN_PAUSE_S,
                                               options=("pause_db",)))
SPEECH_FINDERS.register("silero")(SpeechFinder(_silero, stream=StreamingSileroVAD,
                                               default_min_pause_s=SILERO_MIN_PAUSE_S, options=("vad_threshold",),
                                               require=check_silero))
SPEECH_FINDERS.register("auto")(SpeechFinder(_auto, stream=None, default_min_pause_s=DEFAULT_MIN_PAUSE_S,
                                             options=("pause_db", "vad_threshold")))

ENERGY = SpeechFinderSettings("energy")
"""The energy rule with its default settings."""
