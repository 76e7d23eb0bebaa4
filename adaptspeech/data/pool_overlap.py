"""An untranscribed pool must not hold the evaluation's audio or sentences: what "held out" is, and the check.

Self-training on a pool that holds a dev or test clip (the same file under another name: the same SHA-256 of its
bytes) or a dev / test sentence (read by another speaker: Common Voice's ``other.tsv`` can hold them) would train on
the evaluation. :func:`held_out` collects the clips and the normalised sentences of the splits to protect, from a
Common Voice folder (``<root>/<lang>/{dev,test}.tsv`` and ``clips/``) or from a prepared folder (its dev / test
``text``, and the clips of the corpus it was prepared from, when that folder is still there);
:func:`overlapping` names the pool's clips that share either.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from .common_voice import find_language_dir, read_tsv
from .text import normalize_text

HELD_OUT_SPLITS: tuple[str, ...] = ("dev", "test")
"""The splits a pool may not share a clip or a sentence with."""


def file_sha256(path: str | os.PathLike[str]) -> str:
    """SHA-256 of a file's bytes (hex), read in 1-MiB blocks."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


@dataclass
class HeldOut:
    """The clips (by SHA-256 -> name) and normalised sentences a pool must not share; ``where`` names their source."""

    where: str
    hashes: dict[str, str] = field(default_factory=dict)
    sentences: set[str] = field(default_factory=set)

    def update_from_folder(self, lang_dir: Path, language: str, splits: Sequence[str]) -> None:
        """Add the clips and sentences of ``splits`` of a Common Voice language folder (missing TSVs skipped)."""
        for split in splits:
            tsv = lang_dir / f"{split}.tsv"
            if not tsv.is_file():
                continue
            columns = read_tsv(tsv)
            for name, sentence in zip(columns["path"], columns["sentence"], strict=True):
                text = normalize_text(sentence or "", language)
                if text:
                    self.sentences.add(text)
                clip = lang_dir / "clips" / name
                if clip.is_file():
                    self.hashes[file_sha256(clip)] = f"{split}/{name}"


def held_out(source: str | os.PathLike[str], language: str, splits: Sequence[str] = HELD_OUT_SPLITS) -> HeldOut:
    """The dev / test clips and sentences of ``language`` in ``source``: a Common Voice release folder (or a synthetic
    corpus) or a prepared folder (``prepare_config.json``: its splits' ``text`` and the clips of the corpus named in
    its ``source`` when that folder exists).

    Raises:
        FileNotFoundError: ``source`` is neither (naming it).
    """
    source = Path(source)
    result = HeldOut(str(source))
    config = source / "prepare_config.json"
    if config.is_file():
        from datasets import load_from_disk

        dataset = load_from_disk(str(source / "dataset"))
        for split in splits:
            if split in dataset:
                part = dataset[split].select_columns(["text", "language"])
                result.sentences.update(t for t, lang in zip(part["text"], part["language"], strict=True)
                                        if lang == language and t)
        from .prepared_data import prepared_corpus_source

        corpus = prepared_corpus_source(source)
        if corpus is not None:
            if not corpus.is_dir():
                raise FileNotFoundError(
                    f"--held-out {source}: the corpus it was prepared from ({corpus}) is not there, so its dev / "
                    "test clips cannot be compared with the pool; give the corpus folder itself as --held-out"
                )
            result.update_from_folder(find_language_dir(corpus, language), language, splits)
        return result
    if not source.is_dir():
        raise FileNotFoundError(f"--held-out {source}: no such folder (a Common Voice folder or a prepared folder)")
    result.update_from_folder(find_language_dir(source, language), language, splits)
    return result


def overlapping(held: HeldOut, clips: Iterable[tuple[str, str, str]]) -> list[str]:
    """``["name (same audio as test/x.mp3)", "name (sentence of dev/test: 'a b')", ...]`` for every pool clip
    ``(name, sha256, normalised sentence or "")`` that shares a clip or a sentence with ``held``."""
    found = []
    for name, digest, sentence in clips:
        if digest in held.hashes:
            found.append(f"{name} (same audio as {held.hashes[digest]})")
        elif sentence and sentence in held.sentences:
            found.append(f"{name} (a dev/test sentence: {sentence!r})")
    return found
