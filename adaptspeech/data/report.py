"""The skip report: which rows the data preparation dropped, by name and reason, and the OOV characters."""

from __future__ import annotations

import json
import os
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from .audio import EMPTY, MISSING, NAN, SILENT, TOO_LONG, TRUNCATED, UNREADABLE

EMPTY_SENTENCE = "empty_sentence"
TOO_SHORT = "too_short"
DIGITS = "digits"
HELD_OUT_OVERLAP = "held_out_overlap"

SKIP_REASONS: dict[str, str] = {
    MISSING: "the clip file does not exist (or the path names a folder)",
    EMPTY: "the clip has zero bytes or no audio frames",
    UNREADABLE: "soundfile cannot decode the clip (the detail gives the decoder's reason)",
    TRUNCATED: "the clip file ends before the length its header declares",
    NAN: "the decoded audio holds NaN or infinite samples",
    SILENT: "the clip's peak amplitude is below the silence threshold",
    TOO_LONG: "the clip is longer than max_seconds",
    TOO_SHORT: "the clip has fewer encoder frames than CTC needs for its transcript",
    EMPTY_SENTENCE: "the sentence is empty after normalisation",
    DIGITS: "the sentence holds digits and skip_digits=True",
    HELD_OUT_OVERLAP: "an untranscribed pool's clip shares its audio or its sentence with a dev / test clip",
}
"""Every reason a row can be skipped for, with its meaning."""


@dataclass
class SkippedClip:
    """One skipped row: the clip's file name (the Common Voice ``path``), the reason and its detail."""

    path: str
    reason: str
    detail: str = ""
    language: str = ""
    split: str = ""


@dataclass
class SkipReport:
    """What the data preparation dropped and why.

    Attributes:
        skipped (`list[SkippedClip]`): every skipped row.
        kept (`dict[str, int]`): rows kept per split.
        oov_chars (`Counter[str]`): characters of kept transcripts outside the vocabulary (they map to
            ``[UNK]``), with their counts.
    """

    skipped: list[SkippedClip] = field(default_factory=list)
    kept: dict[str, int] = field(default_factory=dict)
    oov_chars: Counter[str] = field(default_factory=Counter)

    def add(self, path: str, reason: str, detail: str = "", language: str = "", split: str = "") -> None:
        if reason not in SKIP_REASONS:
            raise ValueError(f"unknown skip reason {reason!r}; allowed values: {', '.join(SKIP_REASONS)}")
        self.skipped.append(SkippedClip(path, reason, detail, language, split))

    @property
    def counts(self) -> dict[str, int]:
        """Number of skipped rows per reason (only reasons that occurred)."""
        return dict(Counter(s.reason for s in self.skipped))

    @property
    def num_oov(self) -> int:
        """Total number of out-of-vocabulary characters in kept transcripts."""
        return sum(self.oov_chars.values())

    def reasons_by_path(self) -> dict[str, str]:
        """``{clip file name: reason}`` for every skipped row."""
        return {s.path: s.reason for s in self.skipped}

    def merge(self, other: SkipReport) -> SkipReport:
        """Add ``other``'s entries to this report (in place) and return it."""
        self.skipped.extend(other.skipped)
        for split, n in other.kept.items():
            self.kept[split] = self.kept.get(split, 0) + n
        self.oov_chars.update(other.oov_chars)
        return self

    def to_dict(self) -> dict[str, Any]:
        return {
            "kept": dict(self.kept),
            "skipped_total": len(self.skipped),
            "counts": self.counts,
            "oov_chars": dict(self.oov_chars.most_common()),
            "skipped": [asdict(s) for s in self.skipped],
        }

    def write_json(self, path: str | os.PathLike[str]) -> None:
        """Write :meth:`to_dict` as UTF-8 JSON."""
        Path(path).write_text(json.dumps(self.to_dict(), ensure_ascii=False, indent=1), encoding="utf-8")

    @classmethod
    def from_json(cls, path: str | os.PathLike[str]) -> SkipReport:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
        return cls(
            skipped=[SkippedClip(**s) for s in data["skipped"]],
            kept=dict(data["kept"]),
            oov_chars=Counter(data["oov_chars"]),
        )

    def summary(self) -> str:
        """One line: rows kept, rows skipped per reason, OOV characters."""
        counts = ", ".join(f"{reason}={n}" for reason, n in sorted(self.counts.items())) or "none"
        oov = "".join(c for c, _ in self.oov_chars.most_common(20))
        return (
            f"kept {sum(self.kept.values())} rows, skipped {len(self.skipped)} ({counts}); "
            f"{self.num_oov} out-of-vocabulary characters" + (f" ({oov})" if oov else "")
        )
