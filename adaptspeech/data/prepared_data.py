"""Reading a prepared folder, the output of ``adaptspeech prepare`` (:func:`~adaptspeech.data.prepared_corpus.
prepare_corpus` writes it): the ``DatasetDict`` and the processor saved beside it, and the rows of some languages.

The training stages, ``adaptspeech evaluate`` / ``lm tune``, the recipes and the scripts all read it here.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from .prepared_corpus import COMPLETE_MARKER

__all__ = ["PreparedDataError", "load_prepared", "select_languages"]


class PreparedDataError(ValueError):
    """A prepared folder that is missing or incomplete, or languages it does not hold; one line naming it."""


def load_prepared(prepared_dir: str | os.PathLike) -> tuple[Any, Any]:
    """``(DatasetDict, Wav2Vec2Processor)`` written by ``adaptspeech prepare`` into ``prepared_dir``.

    Raises:
        PreparedDataError: ``dataset/`` or ``processor/`` is missing, or ``prepare`` did not finish writing the folder
            (no ``prepare_config.json``).
    """
    from datasets import load_from_disk
    from transformers import Wav2Vec2Processor

    prepared_dir = Path(prepared_dir)
    for sub in ("dataset", "processor"):
        if not (prepared_dir / sub).is_dir():
            raise PreparedDataError(
                f"data.prepared_dir {prepared_dir} has no {sub}/ folder: run `adaptspeech prepare` first"
            )
    if not (prepared_dir / COMPLETE_MARKER).is_file():
        raise PreparedDataError(
            f"data.prepared_dir {prepared_dir} has no {COMPLETE_MARKER}: `adaptspeech prepare` did not finish "
            "writing it; run it again"
        )
    return load_from_disk(str(prepared_dir / "dataset")), Wav2Vec2Processor.from_pretrained(prepared_dir / "processor")


def select_languages(dataset: Any, languages: list[str], split: str, what: str) -> Any:
    """The rows of ``dataset`` (one split, named ``split`` in messages) whose ``language`` is among ``languages``.

    Raises:
        PreparedDataError: a language the split does not hold; the message starts with ``what`` (the setting or
            option that named the languages, e.g. ``data.train_languages``).
    """
    present = set(dataset.unique("language"))
    missing = [lang for lang in languages if lang not in present]
    if missing:
        raise PreparedDataError(
            f"{what}: language(s) {missing} are not in the {split} split (it has {sorted(present)})"
        )
    wanted = set(languages)
    return dataset.filter(lambda lang: lang in wanted, input_columns=["language"])
