"""The token table of a model's ``Wav2Vec2CTCTokenizer`` (:class:`adaptspeech.runtime.tokens.TokenTable`), for the
exported folder's ``tokens.txt`` and settings."""

from __future__ import annotations

from typing import Any

from ..runtime.tokens import TokenTable


def token_table(tokenizer: Any) -> TokenTable:
    """The :class:`TokenTable` that decodes label ids as ``tokenizer.decode(ids, group_tokens=False,
    skip_special_tokens=True)`` does (:func:`adaptspeech.inference.long_form.stitching.label_text`).

    Raises:
        ValueError: a nested (per-language) vocabulary without a target language, or ids with gaps.
    """
    vocab = tokenizer.get_vocab()
    by_id = {index: token for token, index in vocab.items()}
    if sorted(by_id) != list(range(len(by_id))):
        raise ValueError(f"the tokenizer's ids are not 0..{len(by_id) - 1} (a nested per-language vocabulary needs "
                         "its target language set)")
    delimiter = getattr(tokenizer, "word_delimiter_token", "|") or "|"
    special = {str(t) for t in tokenizer.all_special_tokens} - {delimiter}
    return TokenTable(
        tokens=tuple(by_id[i] for i in range(len(by_id))),
        blank_id=int(tokenizer.pad_token_id),
        word_delimiter=delimiter,
        skip_tokens=frozenset(special),
        clean_up_tokenization_spaces=bool(getattr(tokenizer, "clean_up_tokenization_spaces", False)),
        do_lower_case=bool(getattr(tokenizer, "do_lower_case", False)),
        unk_token=None if tokenizer.unk_token is None else str(tokenizer.unk_token),
    )
