"""Re-tokenise prepared rows with another processor's vocabulary, without decoding the audio again."""

from __future__ import annotations

import copy
from typing import Any

from datasets import DatasetDict

from .report import SkipReport
from .text import count_oov


class _Relabeler:
    """The batched ``map`` function of :func:`relabel`: ``labels`` from ``text`` with each row's language's
    tokenizer (a class so that ``num_proc`` can pickle it)."""

    def __init__(self, tokenizer: Any) -> None:
        self.base = tokenizer
        self.tokenizers: dict[str, Any] = {}

    def tokenizer(self, language: str) -> Any:
        if getattr(self.base, "target_lang", None) is None:
            return self.base
        if language not in self.tokenizers:
            tokenizer = copy.deepcopy(self.base)
            tokenizer.set_target_lang(language)
            self.tokenizers[language] = tokenizer
        return self.tokenizers[language]

    def __call__(self, texts: list[str], languages: list[str]) -> dict[str, list[list[int]]]:
        return {"labels": [self.tokenizer(lang)(text).input_ids for text, lang in zip(texts, languages)]}


def relabel(prepared: DatasetDict, processor: Any, report: SkipReport, *, num_proc: int | None = None) -> DatasetDict:
    """``prepared`` with ``labels`` re-encoded from ``text`` by ``processor``'s tokenizer(s); ``report.oov_chars``
    recounted against the new vocabulary (in place).

    A character-level tokenizer turns each character into one label whatever the vocabulary, so the number of
    labels, and thus which rows CTC can align (``too_short``), does not change.
    """
    relabeler = _Relabeler(processor.tokenizer)
    report.oov_chars.clear()
    for part in prepared.values():
        for text, lang in zip(part["text"], part["language"]):
            report.oov_chars.update(count_oov(text, relabeler.tokenizer(lang).encoder))
    return DatasetDict(
        {
            split: part.map(
                relabeler,
                input_columns=["text", "language"],
                batched=True,
                num_proc=num_proc,
                features=part.features,
                desc=f"labels {split}",
            )
            for split, part in prepared.items()
        }
    )


__all__ = ["relabel"]
