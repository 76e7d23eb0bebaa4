"""Transcript normalisation and character vocabularies (the processor built from them: :mod:`.processor`).

Normalisation policy (:func:`normalize_text`), the same for every language unless a rule below says so:

1. Unicode NFC, so that a precomposed letter and its decomposed spelling are one character.
2. Per-language letter fixes: Romanian s/t with cedilla (``ş ţ``, common in Common Voice text) become
   the correct comma-below letters (``ș ț``).
3. Lowercase; Turkish and Azerbaijani map ``I`` to dotless ``ı`` and ``İ`` to ``i``.
4. Apostrophe look-alikes (``’ ʼ ‘ ` ´ ′``) become ``'``; an apostrophe is kept only between two letters
   (``l'uomo``, ``zo'n``); at a word's edge it is a quotation mark and is removed (``po'`` -> ``po``).
5. Letters and combining marks of every script are kept (Unicode categories L* and M*), so each
   language keeps its own letters without a per-language alphabet.
6. Digits (category Nd) are kept as characters: numbers are *not* spelled out (no offline
   number-to-words for every language). Common Voice sentences rarely contain digits; pass
   ``skip_digits=True`` to the data preparation to drop such rows (reported as ``digits``).
7. Everything else (punctuation, symbols, hyphens, whitespace, control characters) separates words:
   it becomes a space, and runs of spaces collapse (``dintr-o`` -> ``dintr o``).

Vocabulary layout (:func:`build_vocab`): ``[PAD]`` = 0 (also the CTC blank), ``[UNK]`` = 1, ``<s>`` = 2,
``</s>`` = 3 (start / end of sequence for the attention decoder), ``|`` = 4 (the word delimiter, which the
tokenizer writes for a space), then the characters of the training text in code-point order.
"""

from __future__ import annotations

import unicodedata
from collections import Counter
from collections.abc import Iterable, Mapping

PAD_TOKEN, UNK_TOKEN, BOS_TOKEN, EOS_TOKEN, WORD_DELIMITER = "[PAD]", "[UNK]", "<s>", "</s>", "|"
SPECIAL_TOKENS: tuple[str, ...] = (PAD_TOKEN, UNK_TOKEN, BOS_TOKEN, EOS_TOKEN, WORD_DELIMITER)

_APOSTROPHES = str.maketrans(dict.fromkeys("’ʼ‘`´′ʹ", "'"))
_LETTER_FIXES: dict[str, dict[str, str]] = {
    "ro": {"ş": "ș", "Ş": "Ș", "ţ": "ț", "Ţ": "Ț"},
}
_DOTTED_I_LANGUAGES = frozenset({"tr", "az"})

Vocab = dict[str, int]


def _is_letter(char: str) -> bool:
    return unicodedata.category(char)[0] in "LM"


def normalize_text(text: str, lang: str) -> str:
    """Normalise a transcript for character-level ASR (the policy is in this module's docstring).

    Args:
        text (`str`): the raw sentence.
        lang (`str`): its language code (ISO 639-1/3 as in Common Voice, e.g. ``"ro"``, ``"cs"``).

    Returns:
        `str`: lowercase words of letters, marks, digits and word-internal apostrophes separated by
        single spaces, no leading or trailing space; ``""`` when nothing is left.

    Example: ``normalize_text("Şi-a spus: „L’ora e târziu!”", "ro") == "și a spus l'ora e târziu"``.
    """
    text = unicodedata.normalize("NFC", text)
    fixes = _LETTER_FIXES.get(lang)
    if fixes:
        text = text.translate(str.maketrans(fixes))
    if lang in _DOTTED_I_LANGUAGES:
        text = text.replace("I", "ı").replace("İ", "i")
    text = unicodedata.normalize("NFC", text.lower()).translate(_APOSTROPHES)
    chars = list(text)
    out: list[str] = []
    for i, char in enumerate(chars):
        if char == "'":
            keep = 0 < i < len(chars) - 1 and _is_letter(chars[i - 1]) and _is_letter(chars[i + 1])
            out.append(char if keep else " ")
        elif _is_letter(char) or unicodedata.category(char) == "Nd":
            out.append(char)
        else:
            out.append(" ")
    return " ".join("".join(out).split())


def build_vocab(
    texts: Iterable[str] | Mapping[str, Iterable[str]],
    *,
    per_language: bool = False,
    min_count: int = 1,
) -> Vocab | dict[str, Vocab]:
    """Character vocabulary of normalised training text, in the layout of this module's docstring.

    Args:
        texts: normalised sentences, or a mapping ``language -> sentences``.
        per_language (`bool`, defaults to `False`): with a mapping, build one vocabulary per language
            (a nested ``{lang: vocab}``, which ``Wav2Vec2CTCTokenizer`` reads with ``target_lang``, as in
            MMS). Otherwise one vocabulary shared by all languages.
        min_count (`int`, defaults to 1): characters seen fewer times are left out (they map to ``[UNK]``).

    Returns:
        ``{token: id}`` or ``{lang: {token: id}}``.
    """
    if min_count < 1:
        raise ValueError(f"build_vocab: min_count must be >= 1, got {min_count}")
    if isinstance(texts, Mapping):
        if per_language:
            return {lang: _vocab_from_counts(_count_chars(t), min_count) for lang, t in texts.items()}
        counts: Counter[str] = Counter()
        for lang_texts in texts.values():
            counts.update(_count_chars(lang_texts))
        return _vocab_from_counts(counts, min_count)
    if per_language:
        raise ValueError("build_vocab: per_language=True needs a mapping {language: texts}")
    return _vocab_from_counts(_count_chars(texts), min_count)


def _count_chars(texts: Iterable[str]) -> Counter[str]:
    if isinstance(texts, str):
        raise TypeError("build_vocab expects an iterable of sentences, not one string")
    counts: Counter[str] = Counter()
    for text in texts:
        counts.update(text)
    return counts


def _vocab_from_counts(counts: Counter[str], min_count: int) -> Vocab:
    chars = sorted(c for c, n in counts.items() if n >= min_count and c != " " and c not in SPECIAL_TOKENS)
    return {token: i for i, token in enumerate((*SPECIAL_TOKENS, *chars))}


def check_vocab(vocab: Mapping[str, int], name: str = "vocab") -> None:
    """Raise ``ValueError`` unless ``vocab`` has the special tokens at ids 0-4 and contiguous ids."""
    for i, token in enumerate(SPECIAL_TOKENS):
        if vocab.get(token) != i:
            raise ValueError(
                f"{name}: {token!r} must have id {i} (layout {', '.join(SPECIAL_TOKENS)}, then characters), "
                f"got {vocab.get(token)}"
            )
    if sorted(vocab.values()) != list(range(len(vocab))):
        raise ValueError(f"{name}: ids must be 0..{len(vocab) - 1} without gaps or repeats")


def count_oov(text: str, vocab: Mapping[str, int]) -> Counter[str]:
    """Characters of ``text`` (spaces aside) that are not in ``vocab``, i.e. that encode to ``[UNK]``."""
    return Counter(c for c in text if c != " " and c not in vocab)
