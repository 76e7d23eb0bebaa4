"""Reading a prepared folder, the output of ``adaptspeech prepare`` (:func:`~adaptspeech.data.prepared_corpus.
prepare_corpus` writes it): the ``DatasetDict`` and the processor saved beside it, and the rows of some languages.

The training stages, ``adaptspeech evaluate`` / ``lm tune``, the recipes and the scripts all read it here.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from datasets import load_from_disk
from transformers import Wav2Vec2Processor

from .prepared_corpus import COMPLETE_MARKER

__all__ = ["PreparedDataError", "load_prepared", "prepared_corpus_source", "select_languages"]


class PreparedDataError(ValueError):
    """A prepared folder that is missing or incomplete, or languages it does not hold; one line naming it."""


def load_prepared(prepared_dir: str | os.PathLike) -> tuple[Any, Any]:
    """``(DatasetDict, Wav2Vec2Processor)`` written by ``adaptspeech prepare`` into ``prepared_dir``.

    Raises:
        PreparedDataError: ``dataset/`` or ``processor/`` is missing, or ``prepare`` did not finish writing the folder
            (no ``prepare_config.json``).
    """
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


def prepared_corpus_source(prepared_dir: str | os.PathLike) -> Path | None:
    """The corpus folder a prepared folder was made from (``prepare_config.json``'s ``source``), as an absolute path
    (it may since have been removed: the caller checks), or None when there is no such record or the corpus was a
    Hub dataset. A relative ``source`` (written by older versions, relative to where ``prepare`` ran) is looked for
    under the prepared folder's parent folders, nearest first.

    Raises:
        FileNotFoundError: a relative ``source`` that is under none of them (naming it and what to do).
    """
    config_path = Path(prepared_dir) / COMPLETE_MARKER
    if not config_path.is_file():
        return None
    config = json.loads(config_path.read_text(encoding="utf-8"))
    source = config.get("source")
    if not source or config.get("source_is_folder") is False:
        return None
    path = Path(source)
    if path.is_absolute():
        return path
    for parent in Path(prepared_dir).absolute().parents:
        if (parent / path).is_dir():
            return parent / path
    raise FileNotFoundError(
        f"{config_path}: the corpus it was prepared from, {source!r}, is recorded relative to the folder "
        f"`adaptspeech prepare` ran in and is under none of {Path(prepared_dir).absolute()}'s parent folders; run "
        "`adaptspeech prepare` again (it records absolute paths) or move the corpus beside the prepared folder"
    )
