"""The aligner's core on synthetic CTC log-probabilities with a known frame path (tests/helpers/alignment.py)."""

from __future__ import annotations

from itertools import pairwise
from pathlib import Path

import numpy as np
import pytest
from helpers.alignment import BLANK, DELIMITER, synthetic_posteriors

from adaptspeech.alignment.corpus import AlignmentError, AlignSettings, check_match
from adaptspeech.alignment.lines import STAR, TextLine, first_line_past, min_frames, spell
from adaptspeech.alignment.segmentation import align_lines, window_score, with_star


def test_boundaries_on_the_true_frames_and_untranscribed_speech_left_out():
    data = synthetic_posteriors(40, seed=0, untranscribed_after=(5, 20))
    spans = align_lines(data.log_probs, data.lines, BLANK)
    errors = np.array([[a.first_frame - s[0], a.end_frame - s[1]] for a, s in zip(spans, data.spans)])
    assert np.abs(errors).max() <= 1
    assert min(a.score for a in spans) > -0.5
    for first, end in data.untranscribed:  # no line reaches into the speech that has no text
        assert all(a.end_frame <= first or a.first_frame >= end for a in spans)


def test_blocks_of_bounded_size_place_the_lines_as_one_block_does():
    data = synthetic_posteriors(30, seed=1, untranscribed_after=(10,))
    whole = align_lines(data.log_probs, data.lines, BLANK)
    blocks = align_lines(data.log_probs, data.lines, BLANK, block_labels=150)
    assert len(blocks) == len(whole)
    diffs = [abs(a.first_frame - b.first_frame) + abs(a.end_frame - b.end_frame) for a, b in zip(whole, blocks)]
    assert max(diffs) <= 2


def test_a_wrong_transcript_is_refused_by_the_score_naming_file_and_line():
    data = synthetic_posteriors(20, seed=2)
    other = synthetic_posteriors(20, seed=3)
    spans = align_lines(data.log_probs, other.lines, BLANK)
    assert np.median([a.score for a in spans]) < -2
    lines = [TextLine(i + 1, "x", "x", labels) for i, labels in enumerate(other.lines)]
    with pytest.raises(AlignmentError, match=r"REC\.txt:\d+: the text does not match the audio REC\.wav"):
        check_match(lines, spans, AlignSettings(), Path("REC.wav"), Path("REC.txt"))
    right = align_lines(data.log_probs, data.lines, BLANK)
    check_match([TextLine(1, "x", "x", labels) for labels in data.lines], right, AlignSettings(), Path("REC.wav"),
                Path("REC.txt"))


def test_star_matches_an_unknown_character():
    data = synthetic_posteriors(6, seed=4)
    lines = [line.copy() for line in data.lines]
    lines[2][1] = STAR
    assert with_star(data.log_probs, BLANK).shape == (len(data.log_probs), data.log_probs.shape[1] + 1)
    spans = align_lines(data.log_probs, lines, BLANK)
    assert abs(spans[2].first_frame - data.spans[2][0]) <= 1 and abs(spans[2].end_frame - data.spans[2][1]) <= 1
    assert spans[2].score > -1


def test_spelling_romanizes_or_stars_characters_outside_the_alphabet():
    vocab = {c: i + 5 for i, c in enumerate("abcdefghijklmnopqrstuvwxyz")}
    assert spell("ab cd", vocab, DELIMITER).tolist() == [5, 6, DELIMITER, 7, 8]
    assert spell("мир", vocab, DELIMITER).tolist() == [vocab["m"], vocab["i"], vocab["r"]]
    assert spell("aж", vocab, DELIMITER, oov="star").tolist() == [5, STAR]


def test_text_longer_than_the_audio_can_hold_names_the_line():
    assert min_frames(np.array([5, 5, 6])) == 4
    lines = [TextLine(i + 1, "x", "x", np.arange(5, 15)) for i in range(3)]
    assert first_line_past(lines, 40) is None
    assert first_line_past(lines, 25).line_no == 3


def test_window_score_is_the_lowest_window_mean():
    values = np.array([0.0] * 40 + [-3.0] * 30 + [0.0] * 10)
    assert window_score(values, 30) == pytest.approx(-3.0)
    assert window_score(np.array([-1.0, -2.0]), 30) == pytest.approx(-1.5)


def test_a_block_leaves_the_frames_the_later_lines_need():
    # a model that reads nothing (noise posteriors): the gap label is as cheap as any line, so a block alone would
    # put its lines anywhere, up to the recording's end, leaving the next block no audio
    rng = np.random.default_rng(4)
    lines = [rng.integers(5, 30, size=40) for _ in range(20)]
    log_probs = rng.standard_normal((1800, 30)).astype(np.float32)
    log_probs -= np.log(np.exp(log_probs).sum(axis=1, keepdims=True))
    spans = align_lines(log_probs, lines, BLANK, block_labels=200)
    assert len(spans) == len(lines)
    assert all(a.first_frame < a.end_frame <= b.first_frame for a, b in pairwise(spans))
    assert spans[-1].end_frame <= len(log_probs)


def test_a_line_keeps_the_frames_of_its_first_and_last_labels():
    # the gap label costs a frame what its best label does, so the path leaves a line on its last label's first
    # frame: the line's edges are then moved over the speech frames next to them (blank not the likeliest)
    data = synthetic_posteriors(30, seed=5, untranscribed_after=(8, 20), label_frames=(3, 6))
    spans = align_lines(data.log_probs, data.lines, BLANK)
    errors = np.array([[a.first_frame - s[0], a.end_frame - s[1]] for a, s in zip(spans, data.spans)])
    assert np.mean(np.abs(errors) <= 1) >= 0.95  # without the move: ends 2-9 frames early
    assert errors[:, 1].max() <= 0  # never past the line's own frames
    # the rest: a line that starts with the label the line before ends with (the path may give it those frames)
    for first, end in data.untranscribed:
        assert all(a.end_frame <= first or a.first_frame >= end for a in spans)


def test_margin_sets_a_line_read_without_confidence_apart_from_a_misread_one():
    data = synthetic_posteriors(10, seed=6)
    log_probs = data.log_probs.copy()
    first, end = data.spans[3]
    flat = log_probs[first:end] * 0.2  # the model hears line 3's labels, with little confidence
    log_probs[first:end] = flat - np.logaddexp.reduce(flat, axis=1, keepdims=True)
    lines = [line.copy() for line in data.lines]
    lines[6] = np.where(lines[6] == DELIMITER, DELIMITER, (lines[6] - 5 + 7) % 25 + 5)  # the text says other letters
    spans = align_lines(log_probs, lines, BLANK)
    assert spans[3].score < -2 < spans[3].margin  # placed right: the path takes the label the model hears
    assert spans[6].score < -2 and spans[6].margin < -2
    assert all(a.margin > -0.5 for i, a in enumerate(spans) if i != 6)
    assert all(a.margin <= 1e-6 for a in spans)


@pytest.mark.parametrize("seed", [0, 1, 3, 4])
def test_a_stray_first_label_on_the_untranscribed_speech_before_is_left_out(seed: int):
    # the model hears blank on line 5's first letter and that letter at the end of the untranscribed speech before
    # it: the path emits it there and stays in it over the pause; the line's frames start at its second label
    data = synthetic_posteriors(10, seed=seed, untranscribed_after=(4,))
    log_probs = data.log_probs.copy()
    end_untranscribed = data.untranscribed[0][1]
    first, _ = data.spans[5]
    label = data.lines[5][0]
    top = log_probs.argmax(axis=1)
    for t in range(first, first + 3):
        if top[t] == label:
            log_probs[t, [label, BLANK]] = log_probs[t, [BLANK, label]]
    t = end_untranscribed - 2
    log_probs[t, [label, top[t]]] = log_probs[t, [top[t], label]]
    stray = align_lines(log_probs, data.lines, BLANK)[5]
    assert stray.first_frame <= first - 9  # the line takes the pause before it (and the speech's last letter)
    span = align_lines(log_probs, data.lines, BLANK, max_label_gap=8)[5]
    assert abs(span.first_frame - first) <= 1
    assert span.end_frame == stray.end_frame and span.score > stray.score
