"""Character and word start / end times from CTC frame labels (best path), as transformers' pipeline reports them.

A character starts at the first frame of its run of frame labels and ends after the run's last frame; a word spans
its characters (the tokenizer's word delimiter ``|`` separates words). Frame ``t`` starts at ``t x
inputs_to_logits_ratio / 16000`` seconds. The spans come from ``Wav2Vec2CTCTokenizer.decode(output_char_offsets=True)``
and its word grouping, the code the pipeline uses.
"""

from __future__ import annotations

from typing import Any

from .stitching import specials_as_blank

LEVELS = ("word", "char")


def ctc_timestamps(frame_ids: list[int], tokenizer: Any, seconds_per_frame: float, level: str) -> list[dict[str, Any]]:
    """``[{"text": ..., "start": s, "end": s}, ...]`` for the words or characters of the best path.

    Args:
        frame_ids: ``[T]`` argmax label of every real output frame.
        tokenizer: the model's ``Wav2Vec2CTCTokenizer`` (blank = its pad token).
        seconds_per_frame: ``inputs_to_logits_ratio / sampling_rate`` (0.04 for the fbank front end).
        level: ``"word"`` or ``"char"``.
    """
    if level not in LEVELS:
        raise ValueError(f"timestamps level {level!r}; allowed values: {', '.join(LEVELS)}")
    frame_ids = specials_as_blank(frame_ids, tokenizer)  # as the text drops them (<s>, </s>, [UNK])
    decoded = tokenizer.decode(frame_ids, output_char_offsets=True, skip_special_tokens=False)
    offsets = decoded["char_offsets"]
    if level == "word":
        offsets = tokenizer._get_word_offsets(offsets, tokenizer.replace_word_delimiter_char)
    return [
        {
            "text": item[level],
            "start": round(item["start_offset"] * seconds_per_frame, 6),
            "end": round(item["end_offset"] * seconds_per_frame, 6),
        }
        for item in offsets
    ]
