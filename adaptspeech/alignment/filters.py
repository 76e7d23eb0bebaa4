"""Which aligned lines become training clips: NeMo's CTC-segmentation filters, thresholds as settings.

NeMo's segmentation tool keeps a segment whose alignment score is above -2, then drops those whose CER (the model's
own transcription of the clip against the line) is above 30 %, and those shorter than 1 s or longer than 20 s; a
clip whose characters per second lie outside a speech rate (the length ratio) is also dropped. The first failed test
names a dropped line's reason, in the order of :data:`DROP_REASONS`.
"""

from __future__ import annotations

import unicodedata
from dataclasses import dataclass

_FOLD_LETTERS = str.maketrans({"ł": "l", "đ": "d", "ø": "o", "ß": "ss", "ı": "i"})
"""Letters with a stroke or other mark that Unicode does not decompose (NFKD keeps them whole)."""


def fold_text(text: str) -> str:
    """``text`` lowercased, without diacritics (NFKD, combining marks dropped; ł -> l, ø -> o, ...): what a CER
    after folding compares, so that a model of a neighbouring language that writes ě for e or ł for l is not counted
    wrong for it."""
    decomposed = unicodedata.normalize("NFKD", text.lower().translate(_FOLD_LETTERS))
    return "".join(char for char in decomposed if not unicodedata.combining(char))

SCORE, CER, TOO_SHORT, TOO_LONG, LENGTH_RATIO = "score", "cer", "too_short", "too_long", "length_ratio"
DROP_REASONS: tuple[str, ...] = (SCORE, CER, TOO_SHORT, TOO_LONG, LENGTH_RATIO)


@dataclass(frozen=True)
class AlignmentFilters:
    """Thresholds of the filters (module docstring).

    Attributes:
        min_score: lowest alignment score kept (ctc-segmentation's confidence, log-probability; NeMo: -2).
        max_cer: highest CER, in percent, of the model's decoding of the clip against its line (NeMo: 30).
        min_seconds, max_seconds: clip duration bounds (NeMo: 1 and 20).
        min_chars_per_s, max_chars_per_s: bounds of the line's characters per second of clip.
        fold_cer: compare the decoding with the line after folding both (:func:`fold_text`: no diacritics, no
            case), for an aligner of a neighbouring language that misreads the language's diacritics.
    """

    min_score: float = -2.0
    max_cer: float = 30.0
    min_seconds: float = 1.0
    max_seconds: float = 20.0
    min_chars_per_s: float = 2.0
    max_chars_per_s: float = 40.0
    fold_cer: bool = False

    def __post_init__(self) -> None:
        if not 0 < self.min_seconds < self.max_seconds:
            raise ValueError(f"clip duration bounds {self.min_seconds}, {self.max_seconds}: need 0 < min < max")
        if not 0 <= self.min_chars_per_s < self.max_chars_per_s:
            raise ValueError(f"characters per second bounds {self.min_chars_per_s}, {self.max_chars_per_s}: need "
                             "0 <= min < max")
        if self.max_cer < 0:
            raise ValueError(f"max_cer {self.max_cer}: must not be negative")


    def drop_reason(self, score: float, cer_percent: float, seconds: float, chars: int) -> str | None:
        """The first filter a clip fails (:data:`DROP_REASONS`), or ``None`` when it is kept; ``cer_percent`` is the
        folded CER with ``fold_cer``."""
        if not score >= self.min_score:
            return SCORE
        if not cer_percent <= self.max_cer:
            return CER
        if seconds < self.min_seconds:
            return TOO_SHORT
        if seconds > self.max_seconds:
            return TOO_LONG
        rate = chars / seconds
        if not self.min_chars_per_s <= rate <= self.max_chars_per_s:
            return LENGTH_RATIO
        return None
