"""The text of a recording as the lines to align, each as the label ids a CTC model can emit.

A transcript file holds one segment per line (blank lines are skipped); with ``split_sentences`` a line is also cut
after each sentence end (``.``, ``!``, ``?``, ``…`` followed by a space), as MMS's ``align_and_segment.py`` aligns one
text line to one segment. Each line is normalised as the language's training text is
(:func:`~adaptspeech.data.text.normalize_text`: what ``prepare`` writes into the manifest and the model learns), then
spelled in the model's labels: a space is the word delimiter ``|``; a character outside the model's alphabet is, by
``oov``:

- ``"romanize"`` (default): its word is romanised with ``uroman`` (Hermjakob et al. 2018, the universal romaniser MMS
  aligns with) and the romanised letters the alphabet has are used; what still has no label becomes the star;
- ``"star"``: the star label :data:`STAR`, which matches whatever non-blank label the model emits on its frame
  (:func:`~adaptspeech.alignment.segmentation.with_star`: the frame's best non-blank log-probability), as the
  ``<star>`` token of torchaudio's MMS aligner does.

The manifest keeps the normalised line (the training target), not its romanisation.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import numpy as np

from ..data.text import normalize_text

OOV_MODES: tuple[str, ...] = ("romanize", "star")
STAR = -2
"""The label id of an out-of-alphabet character (``oov="star"``): one column past the model's labels once added."""
_SENTENCE_END = re.compile(r"(?<=[.!?…])\s+")


class AlignmentTextError(ValueError):
    """A transcript that cannot be aligned (empty, not UTF-8, nothing the model can spell); one line naming it."""


@dataclass(frozen=True)
class TextLine:
    """One line of a transcript.

    Attributes:
        line_no: its line number in the file (from 1).
        raw: the line as written.
        text: the normalised line (the training target).
        labels: ``[L]`` int64 label ids (:data:`STAR` for a character the model cannot spell).
    """

    line_no: int
    raw: str
    text: str
    labels: np.ndarray


def read_lines(path: str | os.PathLike[str], split_sentences: bool = False) -> list[tuple[int, str]]:
    """``[(line number, text), ...]`` of the non-blank lines of a UTF-8 transcript (cut at sentence ends with
    ``split_sentences``; the pieces keep their line's number).

    Raises:
        AlignmentTextError: the file cannot be read, is not UTF-8 (naming the line), or holds no text.
    """
    from ..data.common_voice import first_non_utf8_line

    path = Path(path)
    try:
        content = path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise AlignmentTextError(f"{path}:{first_non_utf8_line(path)}: not UTF-8 text") from None
    except OSError as err:
        raise AlignmentTextError(f"{path}: cannot read the transcript ({err.strerror or err})") from None
    lines = []
    for number, line in enumerate(content.splitlines(), start=1):
        pieces = _SENTENCE_END.split(line.strip()) if split_sentences else [line.strip()]
        lines.extend((number, piece) for piece in pieces if piece.strip())
    if not lines:
        raise AlignmentTextError(f"{path}: no text (the file is empty or holds only blank lines)")
    return lines


@lru_cache(maxsize=1)
def _uroman() -> object:
    import uroman

    return uroman.Uroman()


def romanize(word: str) -> str:
    """``word`` in Latin letters (``uroman``), lowercased."""
    return str(_uroman().romanize_string(word)).lower()  # type: ignore[attr-defined]


def spell(text: str, vocab: Mapping[str, int], word_delimiter_id: int, oov: str = "romanize") -> np.ndarray:
    """``[L]`` int64 labels of a normalised line: characters by ``vocab``, spaces as the word delimiter, other
    characters by ``oov`` (module docstring)."""
    if oov not in OOV_MODES:
        raise ValueError(f"oov {oov!r}; allowed values: {', '.join(OOV_MODES)}")
    labels: list[int] = []
    for i, word in enumerate(text.split(" ")):
        if i:
            labels.append(word_delimiter_id)
        if oov == "romanize" and any(char not in vocab for char in word):
            word = "".join(char for char in romanize(word) if char in vocab or char.isalpha())
        labels.extend(vocab.get(char, STAR) for char in word)
    return np.asarray(labels, dtype=np.int64)


def text_lines(path: str | os.PathLike[str], language: str, vocab: Mapping[str, int], word_delimiter_id: int,
               oov: str = "romanize", split_sentences: bool = False) -> list[TextLine]:
    """The lines of transcript ``path`` normalised for ``language`` and spelled in the model's labels; a line that
    normalises to nothing (punctuation only) is left out.

    Raises:
        AlignmentTextError: see :func:`read_lines`; no line keeps a character, or every character of every line is
            outside the alphabet (the model cannot spell the text: a wrong model or language).
    """
    lines = []
    for number, raw in read_lines(path, split_sentences):
        text = normalize_text(raw, language)
        if text:
            lines.append(TextLine(number, raw, text, spell(text, vocab, word_delimiter_id, oov)))
    if not lines:
        raise AlignmentTextError(f"{path}: no line keeps a letter or digit once normalised for {language!r}")
    spelled = [line for line in lines if np.any((line.labels != STAR) & (line.labels != word_delimiter_id))]
    if not spelled:
        raise AlignmentTextError(f"{path}:{lines[0].line_no}: the model's alphabet has none of the text's characters "
                                 f"(a model of another language or script?)")
    return lines


def min_frames(labels: np.ndarray) -> int:
    """The fewest CTC frames that emit ``labels`` ``[L]``: one per label plus a blank between two equal ones."""
    labels = np.asarray(labels)
    return int(len(labels) + np.count_nonzero(labels[1:] == labels[:-1]))


def first_line_past(lines: Sequence[TextLine], num_frames: int) -> TextLine | None:
    """The first line whose end cannot fit in ``num_frames`` frames even if every line before it is read at the
    fastest rate CTC allows (a blank between lines), or ``None`` when the text fits."""
    used = 0
    for line in lines:
        used += min_frames(line.labels) + (1 if used else 0)
        if used > num_frames:
            return line
    return None
