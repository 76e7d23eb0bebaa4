"""Lines of text placed on a recording's CTC log-probabilities with CTC segmentation (Kürzinger et al. 2020).

**Why ctc-segmentation.** ``torchaudio.functional.forced_align`` (MMS's aligner) needs a torchaudio built for the
installed torch: the registry's torchaudio (2.11) does not match torch 2.13, so it cannot be installed beside it.
``ctc-segmentation`` (the registry's 1.7.5, NeMo's and ESPnet's segmentation tool) is numpy and a small Cython kernel,
independent of torch, and is made for this task: its trellis lets the text start anywhere in the audio and lets
audio between two lines go to a blank state, so that stretches with no text (music, announcements) are not forced
onto a line, and it gives each line a confidence (the lowest mean log-probability of the path over ``score_frames``
consecutive frames), which NeMo thresholds at -2. Between two lines the text here has a *gap* label instead of
ctc-segmentation's blank: its log-probability on a frame is the frame's best label's, so audio that no line
says (speech without text, music, noise the model hears as letters) costs nothing there, rather than stretching the
neighbouring line over it (with a blank between lines, measured on synthetic posteriors, the line next to an
untranscribed stretch took some of it at a score above -2).

**Bounded memory.** Its dynamic-programming table is ``window x labels`` float32 (the window is 8,000 frames and
grows only when the backtracking leaves it), so an hour of text (about 50,000 labels) at once would take 1.6 GB.
:func:`align_lines` therefore aligns blocks of lines of at most ``block_labels`` labels (at 4,000, 128 MB), each
against the frames from the middle of the gap before its first line on: a block's last line is aligned again as
the next block's first, so that no line is placed by a block that ended inside it. A block is aligned on the frames
up to those the lines after it need at the least (:func:`~adaptspeech.alignment.lines.min_frames` and a gap each),
so that it cannot take the audio of the text after it.

Frames are output frames of the model (``seconds_per_frame`` apart). A line's frames are those from its first label's
first frame to the frame its last label's state is left (:class:`LineAlignment`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from .lines import STAR, min_frames

DEFAULT_BLOCK_LABELS = 4000
"""Labels per alignment block (the table is ``8000 x block_labels`` float32)."""
DEFAULT_SCORE_FRAMES = 30
"""Frames of the sliding window whose lowest mean log-probability is a line's score (ctc-segmentation's
``score_min_mean_over_L``)."""


@dataclass(frozen=True)
class LineAlignment:
    """Where one line lies on the frame grid.

    Attributes:
        first_frame: the frame its first label is emitted.
        end_frame: one past the last frame of its last label (the next line's blank state starts there).
        score: the lowest mean log-probability of the path over ``score_frames`` consecutive frames of the line (the
            mean over all of them when fewer); near 0 for a line the model reads as written, below -2 for one it
            does not.
        margin: the same lowest window mean of the path's log-probability minus the frame's best label's (the
            model's own free reading of the frame): 0 where the path takes the label the model hears, whatever the
            model's confidence; it sets a line the model reads with little confidence apart from one it misreads
            (or that is misplaced).
    """

    first_frame: int
    end_frame: int
    score: float
    margin: float = 0.0


def with_star(log_probs: np.ndarray, blank_id: int) -> np.ndarray:
    """``[T, V + 1]``: ``log_probs`` ``[T, V]`` with a star column, each frame's best non-blank log-probability (the
    label :data:`~adaptspeech.alignment.lines.STAR` matches whatever character the model hears)."""
    others = np.delete(log_probs, blank_id, axis=1)
    return np.concatenate([log_probs, others.max(axis=1, keepdims=True)], axis=1)


def window_score(frame_log_probs: np.ndarray, score_frames: int = DEFAULT_SCORE_FRAMES) -> float:
    """The lowest mean of ``frame_log_probs`` ``[n]`` over ``score_frames`` consecutive frames (the mean when fewer;
    -inf when empty)."""
    n = len(frame_log_probs)
    if n == 0:
        return float("-inf")
    if n <= score_frames:
        return float(np.mean(frame_log_probs))
    sums = np.convolve(frame_log_probs, np.ones(score_frames), mode="valid")
    return float(sums.min() / score_frames)


MAX_LABEL_GAP_S = 0.32
"""Seconds (8 frames at 40 ms) between a line's first (last) label and the next (previous) one past which that label
is taken for a stray (:func:`_stray_edges`)."""
MAX_STRAY_LABELS = 2
"""Labels at most left out at each end of a line by :func:`_stray_edges` (a one-letter word and its delimiter)."""


def label_gap_frames(seconds_per_frame: float) -> int:
    """:data:`MAX_LABEL_GAP_S` in output frames of ``seconds_per_frame`` (at least 2)."""
    return max(2, round(MAX_LABEL_GAP_S / seconds_per_frame))


def _stray_edges(frames: np.ndarray, max_label_gap: int) -> tuple[int, int]:
    """``(first, end)`` frames of a line from its labels' emission frames ``[L]``, leaving out up to
    :data:`MAX_STRAY_LABELS` labels at each end that lie more than ``max_label_gap`` frames from the next one.

    A label costs a frame no more than the gap label does (both take the frame's best), so the path may emit a line's
    first label on a like-sounding letter of the speech before it (speech with no text, measured on the demo's sk dev
    fixture: 0.76 s before the line's second label, over the pause between them) and stay in it, or emit a letter the
    model never hears (sk's ť, for a base that reads cs/pl/sl) far after the line; the clip then held that speech or
    pause. Inside a line two labels are a few frames apart (a pause inside a line is between words, and more than one
    label).
    """
    head, tail = 0, len(frames) - 1
    while head < min(MAX_STRAY_LABELS, tail) and frames[head + 1] - frames[head] > max_label_gap:
        head += 1
    while len(frames) - 1 - tail < MAX_STRAY_LABELS and tail > head and frames[tail] - frames[tail - 1] > max_label_gap:
        tail -= 1
    first = int(frames[head]) if head == 0 else int(frames[head]) - 1
    return first, int(frames[tail]) + 1


def _align_block(log_probs: np.ndarray, lines: Sequence[np.ndarray], blank_id: int,
                 score_frames: int, max_label_gap: int | None = None) -> list[LineAlignment]:
    """One block: ``lines`` (label ids, no star left) on ``log_probs`` ``[T, V]`` from frame 0; between two lines
    (and before the first, after the last) a gap label whose log-probability is each frame's best (module
    docstring); stray labels at a line's ends left out (:func:`_stray_edges`; ``max_label_gap`` None: kept)."""
    from ctc_segmentation import CtcSegmentationParameters, ctc_segmentation

    gap = log_probs.shape[1]
    log_probs = np.concatenate([log_probs, log_probs.max(axis=1, keepdims=True)], axis=1)
    config = CtcSegmentationParameters(blank=blank_id, index_duration=1.0, score_min_mean_over_L=score_frames)
    config.char_list = [str(i) for i in range(log_probs.shape[1])]
    labels, begins = [-1], []
    for line in lines:
        begins.append(len(labels))
        labels.append(gap)
        labels.extend(int(x) for x in line)
    begins.append(len(labels))
    labels.append(gap)
    ground_truth = np.asarray(labels, dtype=np.int64).reshape(-1, 1)
    timings, char_probs, _ = ctc_segmentation(config, log_probs, ground_truth)
    frames = np.rint(timings).astype(np.int64)  # index_duration 1: timings are frames
    below_best = char_probs - log_probs[:, gap]  # the gap column is each frame's best label
    out = []
    for i in range(len(lines)):
        first, end = int(frames[begins[i] + 1]), int(frames[begins[i + 1]])
        if max_label_gap is not None:
            stray_first, stray_end = _stray_edges(frames[begins[i] + 1 : begins[i + 1]], max_label_gap)
            first, end = stray_first, (end if stray_end > int(frames[begins[i + 1] - 1]) else stray_end)
        end = max(end, first + 1)
        out.append(LineAlignment(first, end, window_score(char_probs[first:end], score_frames),
                                 window_score(below_best[first:end], score_frames)))
    return out


def align_lines(log_probs: np.ndarray, lines: Sequence[np.ndarray], blank_id: int,
                block_labels: int = DEFAULT_BLOCK_LABELS,
                score_frames: int = DEFAULT_SCORE_FRAMES, max_label_gap: int | None = None) -> list[LineAlignment]:
    """Align lines of labels to a recording's CTC log-probabilities, in order.

    Args:
        log_probs: ``[T, V]`` float32 log-probabilities on the recording's frame grid.
        lines: ``[L_i]`` int64 label ids of each line (:data:`~adaptspeech.alignment.lines.STAR` for a character
            the model cannot spell), none empty.
        blank_id: the CTC blank.
        block_labels: labels aligned at once (module docstring); a longer line is one block.
        score_frames: see :data:`DEFAULT_SCORE_FRAMES`.
        max_label_gap: frames past which a label at a line's end is a stray (:func:`_stray_edges`; ``prepare
            align``: :data:`MAX_LABEL_GAP_S`); None keeps every label's frames.

    Returns:
        One :class:`LineAlignment` per line, frames non-decreasing.
    """
    if any(len(line) == 0 for line in lines):
        raise ValueError("align_lines: a line without labels")
    log_probs = np.asarray(log_probs, dtype=np.float32)
    if any(np.any(line == STAR) for line in lines):
        star = log_probs.shape[1]
        log_probs = with_star(log_probs, blank_id)
        lines = [np.where(line == STAR, star, line) for line in lines]
    # frames the lines from i on need at the least (each line's CTC minimum and its gap): a block is aligned on the
    # frames up to those its later lines need, else it may place its lines up to the end of the recording where the
    # gap label costs what a line does (audio the model cannot read), leaving the next block no audio
    needed = np.concatenate([np.cumsum([min_frames(line) + 1 for line in lines][::-1])[::-1], [0]])
    results: list[LineAlignment] = []
    start, cursor = 0, 0
    while start < len(lines):
        stop, labels = start, 0
        while stop < len(lines) and (stop == start or labels + len(lines[stop]) <= block_labels):
            labels += len(lines[stop])
            stop += 1
        frames = max(len(log_probs) - int(needed[stop]), cursor + 1)
        block = _align_block(log_probs[cursor:frames], lines[start:stop], blank_id, score_frames, max_label_gap)
        keep = len(block) if stop == len(lines) or len(block) == 1 else len(block) - 1
        results.extend(LineAlignment(a.first_frame + cursor, a.end_frame + cursor, a.score, a.margin)
                       for a in block[:keep])
        if keep < len(block):  # the next block starts in the gap before the line aligned again (its gap needs frames)
            cursor = (results[-1].end_frame + block[keep].first_frame + cursor) // 2
        start += keep
    return extend_over_speech(results, log_probs, blank_id)


DEFAULT_EXTEND_FRAMES = 12
"""Frames a line's edge is moved at most by :func:`extend_over_speech` (0.48 s at 40 ms)."""


def extend_over_speech(spans: Sequence[LineAlignment], log_probs: np.ndarray, blank_id: int,
                       max_frames: int = DEFAULT_EXTEND_FRAMES) -> list[LineAlignment]:
    """Each line's edges moved outwards over the frames next to them where a label other than blank is the likeliest
    (across single blank frames: CTC's blanks inside a word; at most ``max_frames``, never past a neighbouring line).

    The gap label costs a frame what the frame's best label does, so the best path leaves a line on its last label's
    first frame and enters it on its first label's last (any other frame of theirs costs the same as gap): without
    this a line lost the rest of its last letter (measured on synthetic posteriors with 3-6 frames a label: ends 2-9
    frames early). Two blank frames (a pause) end the move, so speech with no text after a pause stays out.

    Args:
        spans: the lines placed (frames non-decreasing).
        log_probs: ``[T, V]`` the log-probabilities they were placed on.
        blank_id: the CTC blank.
    """
    speech = np.asarray(log_probs).argmax(axis=1) != blank_id
    out: list[LineAlignment] = []
    for i, span in enumerate(spans):
        low = out[-1].end_frame if out else 0
        high = spans[i + 1].first_frame if i + 1 < len(spans) else len(speech)
        first, end = span.first_frame, span.end_frame
        while first > low and span.first_frame - first < max_frames:
            if speech[first - 1]:
                first -= 1
            elif first - 1 > low and speech[first - 2]:  # one blank frame inside a word
                first -= 2
            else:
                break
        while end < high and end - span.end_frame < max_frames:
            if speech[end]:
                end += 1
            elif end + 1 < high and speech[end + 1]:
                end += 2
            else:
                break
        out.append(LineAlignment(first, end, span.score, span.margin))
    return out
