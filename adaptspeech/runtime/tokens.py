"""The token table of an exported model: ``tokens.txt`` (sherpa-onnx's format, ``SYMBOL ID`` a line, the word delimiter
written ``▁``) read and written, and label ids turned into text the way the model's ``Wav2Vec2CTCTokenizer`` decodes
them (``adaptspeech.inference.long_form.stitching.label_text``), without transformers or torch."""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

SHERPA_SPACE = "\u2581"
"""``▁``: sherpa-onnx turns a token that starts with it into a space (its BPE convention); the word delimiter is
written so in ``tokens.txt``."""


def clean_up_tokenization(text: str) -> str:
    """transformers' ``PreTrainedTokenizerBase.clean_up_tokenization`` (a tokenizer saved with
    ``clean_up_tokenization_spaces`` applies it to decoded text)."""
    for old, new in ((" .", "."), (" ?", "?"), (" !", "!"), (" ,", ","), (" ' ", "'"), (" n't", "n't"),
                     (" 'm", "'m"), (" 's", "'s"), (" 've", "'ve"), (" 're", "'re")):
        text = text.replace(old, new)
    return text


@dataclass(frozen=True)
class TokenTable:
    """Label id -> token, and how decoded labels become text.

    Args:
        tokens: the token of each id (``tokens[i]`` for id ``i``), as the tokenizer spells them.
        blank_id: the CTC blank (the tokenizer's pad token).
        word_delimiter: the token written as a space (``|``).
        skip_tokens: tokens dropped from text (the tokenizer's special tokens other than the delimiter).
        clean_up_tokenization_spaces: apply :func:`clean_up_tokenization`, as the tokenizer does.
        do_lower_case: lower-case the text, as the tokenizer does.
        unk_token: the unknown token (pyctcdecode's ``⁇``), or None.
    """

    tokens: tuple[str, ...]
    blank_id: int
    word_delimiter: str
    skip_tokens: frozenset[str]
    clean_up_tokenization_spaces: bool = False
    do_lower_case: bool = False
    unk_token: str | None = None

    def __post_init__(self) -> None:
        if not 0 <= self.blank_id < len(self.tokens):
            raise ValueError(f"blank id {self.blank_id} is outside the {len(self.tokens)} tokens")
        duplicates = sorted({t for t in self.tokens if self.tokens.count(t) > 1})
        if duplicates:
            raise ValueError(f"tokens {duplicates} appear more than once")

    def __len__(self) -> int:
        return len(self.tokens)

    def text(self, ids: Sequence[int]) -> str:
        """CTC-collapsed label ids -> text: special tokens dropped, the delimiter a space, runs of spaces one (as
        ``label_text`` decodes with the tokenizer)."""
        kept = [self.tokens[i] for i in ids]
        kept = [t for t in kept if t not in self.skip_tokens and t != self.tokens[self.blank_id]]
        text = "".join(" " if t == self.word_delimiter else t for t in kept).strip()
        if self.do_lower_case:
            text = text.lower()
        if self.clean_up_tokenization_spaces:
            text = clean_up_tokenization(text)
        return " ".join(text.split())

    # --- the duck-typed tokenizer pyctcdecode's label builder reads (adaptspeech.lm.decoder.ctc_labels) ---------
    def get_vocab(self) -> dict[str, int]:
        return {token: i for i, token in enumerate(self.tokens)}

    @property
    def pad_token_id(self) -> int:
        return self.blank_id

    @property
    def word_delimiter_token(self) -> str:
        return self.word_delimiter

    @property
    def unk_token_id(self) -> int | None:
        return None if self.unk_token is None else self.tokens.index(self.unk_token)

    # --- tokens.txt ----------------------------------------------------------------------------------------------
    def sherpa_symbols(self) -> list[str]:
        """The symbol of each id in ``tokens.txt``: the delimiter as ``▁``, every other token as it is."""
        return [SHERPA_SPACE if t == self.word_delimiter else t for t in self.tokens]

    def write(self, path: str | os.PathLike) -> Path:
        """Write ``tokens.txt`` (``SYMBOL ID`` a line, ids in order).

        Raises:
            ValueError: a token with whitespace in it, or ``▁`` used by another token (neither has a
                ``tokens.txt`` spelling).
        """
        symbols = self.sherpa_symbols()
        bad = [t for t in self.tokens if not t or any(c.isspace() for c in t)]
        if bad:
            raise ValueError(f"tokens {bad!r} are empty or hold whitespace: tokens.txt cannot spell them")
        if symbols.count(SHERPA_SPACE) > 1:
            raise ValueError(f"the vocabulary holds {SHERPA_SPACE!r} besides the word delimiter: tokens.txt writes the "
                             "delimiter so")
        path = Path(path)
        path.write_text("".join(f"{symbol} {i}\n" for i, symbol in enumerate(symbols)), encoding="utf-8")
        return path


def read_symbols(path: str | os.PathLike) -> list[str]:
    """The symbols of a ``tokens.txt``, index = id (ids ``0 .. N-1`` each once).

    Raises:
        ValueError: a line that is not ``SYMBOL ID``, or ids that are not ``0 .. N-1`` (naming the file and line).
    """
    path = Path(path)
    by_id: dict[int, str] = {}
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        fields = line.split()
        if not fields:
            continue
        if len(fields) != 2 or not fields[1].lstrip("-").isdigit():
            raise ValueError(f"{path}:{number}: expected 'SYMBOL ID', got {line!r}")
        index = int(fields[1])
        if index in by_id:
            raise ValueError(f"{path}:{number}: id {index} appears twice")
        by_id[index] = fields[0]
    if sorted(by_id) != list(range(len(by_id))):
        raise ValueError(f"{path}: ids must be 0..{len(by_id) - 1}, each once")
    return [by_id[i] for i in range(len(by_id))]


def table_from_symbols(symbols: Iterable[str], blank_id: int, word_delimiter: str, skip_tokens: Iterable[str],
                       **settings: object) -> TokenTable:
    """A :class:`TokenTable` from ``tokens.txt`` symbols (``▁`` read back as ``word_delimiter``)."""
    tokens = tuple(word_delimiter if s == SHERPA_SPACE else s for s in symbols)
    return TokenTable(tokens, blank_id, word_delimiter, frozenset(skip_tokens), **settings)  # type: ignore[arg-type]
