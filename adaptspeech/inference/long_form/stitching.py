"""Stage 6 of inference: decoded labels -> one recording's text, with timestamps and what the earlier stages found.

CTC decoders decode the recording's whole frame grid at once (stage 4 stitched it), so their text is one label
sequence; word or character times come from the best path's frame labels
(:mod:`~adaptspeech.inference.long_form.timestamps`), and ``extra["speech"]`` holds the speech regions' times. Attention
and joint decoders decode each segment alone: their texts are joined with one space, and ``extra["segments"]`` holds
each segment's text and times.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from .segmenting import Segment


@dataclass
class Transcription:
    """One recording's result: ``text``, and with timestamps ``chunks`` = ``[{"text", "start", "end"}, ...]``."""

    text: str
    chunks: list[dict[str, Any]] | None = None
    seconds: float = 0.0
    extra: dict[str, Any] = field(default_factory=dict)


def specials_as_blank(frame_ids: Sequence[int], tokenizer: Any) -> list[int]:
    """CTC frame labels ``[T]`` with every special token but the word delimiter (``<s>``, ``</s>``, ``[UNK]``) made
    the blank: the text drops them, and what they separate stays separate (``l [UNK] l`` is ``ll``, as the collapsed
    labels ``l [UNK] l`` without their special token)."""
    blank = tokenizer.pad_token_id
    specials = set(tokenizer.all_special_ids) - {tokenizer.convert_tokens_to_ids(tokenizer.word_delimiter_token)}
    return [blank if int(t) in specials else int(t) for t in frame_ids]


def decoded_text(tokenizer: Any, ids: Any, group_tokens: bool) -> str:
    """Token ids -> the text adaptspeech writes: the special tokens (``<s>``, ``</s>``, ``[UNK]``, padding) dropped,
    runs of spaces made one (two word delimiters around a blank, as at a pause's forced word boundary, or around a
    dropped token, decode to two spaces). ``group_tokens``: ``ids`` are CTC frame labels, merged first (the special
    tokens made blanks: :func:`specials_as_blank`), else label ids."""
    if group_tokens:  # the tokenizer would drop the blanks before merging (l [PAD] l read as l): merged first
        return " ".join(tokenizer.decode(specials_as_blank(ids, tokenizer), group_tokens=True,
                                         skip_special_tokens=False).split())
    return " ".join(tokenizer.decode(ids, group_tokens=False, skip_special_tokens=True).split())


def label_text(tokenizer: Any, ids: list[int]) -> str:
    """Label ids (already CTC-collapsed) -> text, as ``transcribe_dataset`` writes it (:func:`decoded_text`)."""
    return decoded_text(tokenizer, ids, group_tokens=False)


def frame_spans(filled: list[tuple[int, int]], seconds_per_frame: float, seconds: float) -> list[dict[str, float]]:
    """``[{"start", "end"}, ...]`` seconds of output-frame spans ``[(first, end), ...]`` (ends capped at the
    recording's length)."""
    return [{"start": round(a * seconds_per_frame, 6), "end": round(min(b * seconds_per_frame, seconds), 6)}
            for a, b in filled]


def join_segments(tokenizer: Any, segments: list[Segment], ids: list[list[int]], seconds_per_frame: float,
                  seconds: float) -> Transcription:
    """The text of a recording decoded segment by segment: the segments' texts joined with a space (the one
    segment's text as it is), ``extra["segments"]`` the per-segment ``{"text", "start", "end"}`` (seconds).

    Args:
        tokenizer: the model's tokenizer.
        segments: the segments (stage 2), in order.
        ids: the label ids each segment decoded to.
        seconds_per_frame: the output frame period.
        seconds: the recording's length.
    """
    times = frame_spans([(s.first_frame, s.last_frame) for s in segments], seconds_per_frame, seconds)
    spans = [{"text": label_text(tokenizer, row).strip(), **time} for row, time in zip(ids, times, strict=True)]
    text = label_text(tokenizer, ids[0]) if len(ids) == 1 else " ".join(span["text"] for span in spans if span["text"])
    return Transcription(text, seconds=seconds, extra={"segments": spans})
