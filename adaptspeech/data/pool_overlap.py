"""An untranscribed pool must not hold the evaluation's audio or sentences: what "held out" is, and the check.

Self-training on a pool that holds a dev or test clip (the same file under another name: the same SHA-256 of its
bytes; or the same audio re-encoded, trimmed a little or at another level: the same
:mod:`~adaptspeech.data.audio_fingerprint`) or a dev / test sentence (read by another speaker: Common Voice's
``other.tsv`` can hold them) would train on the evaluation. :func:`held_out` collects the clips (their hashes and
fingerprints) and the normalised sentences of the splits to protect, from a Common Voice folder
(``<root>/<lang>/{dev,test}.tsv`` and ``clips/``) or from a prepared folder (its dev / test ``text``, and the clips of
the corpus it was prepared from; refused when that corpus is gone); :func:`overlapping` names the pool's clips that
share a hash or a sentence, :meth:`HeldOut.same_audio` the held-out clip a decoded recording is a copy of, and
:func:`check_pool_rows` refuses the rows of a pool or a pseudo-labelled folder that share any (``pseudo-label
--target``, ``data.pseudo_labelled_dir``, a recipe's ``self_training.pool``).
"""

from __future__ import annotations

import bisect
import hashlib
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from datasets import load_from_disk

from .audio import BadClipError, load_audio
from .audio_fingerprint import HOP, MAX_SHIFT_S, SAME_AUDIO, SAMPLING_RATE, WINDOW, fingerprint, similarity
from .common_voice import find_language_dir, read_tsv
from .prepared_data import prepared_corpus_source
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
    """The clips (by SHA-256 -> name, and their fingerprints) and normalised sentences a pool must not share;
    ``where`` names their source."""

    where: str
    hashes: dict[str, str] = field(default_factory=dict)
    sentences: set[str] = field(default_factory=set)
    fingerprints: list[tuple[int, str, np.ndarray]] = field(default_factory=list)
    """``(frames, name, [frames, bands] fingerprint)`` of each decodable clip, sorted by length."""

    def add_clip(self, path: Path, name: str) -> None:
        """Hash and fingerprint one held-out clip (one that cannot be decoded is hashed only)."""
        self.hashes[file_sha256(path)] = name
        try:
            mark = fingerprint(load_audio(path, SAMPLING_RATE))
        except BadClipError:
            return
        bisect.insort(self.fingerprints, (len(mark), name, mark), key=lambda item: item[0])

    def same_audio(self, waveform: np.ndarray) -> tuple[str, float] | None:
        """``(name, correlation)`` of the held-out clip a 16-kHz waveform ``[S]`` is a copy of (re-encoded, trimmed
        by at most :data:`~adaptspeech.data.audio_fingerprint.MAX_SHIFT_S` at each end, another gain), or None."""
        mark = fingerprint(waveform)
        slack = 2 * round(MAX_SHIFT_S * SAMPLING_RATE / HOP) + WINDOW // HOP
        lengths = [item[0] for item in self.fingerprints]
        first = bisect.bisect_left(lengths, len(mark) - slack)
        last = bisect.bisect_right(lengths, len(mark) + slack)
        best: tuple[str, float] | None = None
        for _, name, other in self.fingerprints[first:last]:
            value = similarity(mark, other)
            if value >= SAME_AUDIO and (best is None or value > best[1]):
                best = (name, value)
        return best

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
                    self.add_clip(clip, f"{split}/{name}")


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
        dataset = load_from_disk(str(source / "dataset"))
        for split in splits:
            if split in dataset:
                part = dataset[split].select_columns(["text", "language"])
                result.sentences.update(t for t, lang in zip(part["text"], part["language"], strict=True)
                                        if lang == language and t)

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


def same_audio_entry(name: str, match: tuple[str, float]) -> str:
    """How :func:`check_pool_rows` and the pool name a recording that is a held-out clip re-encoded."""
    return f"{name} (the audio of {match[0]} re-encoded: correlation {match[1]:.3f})"


def check_pool_rows(rows: Any, held: HeldOut, where: str) -> None:
    """Refuse pool rows (a pool's or a pseudo-labelled folder's: ``path``, ``audio_sha256``, ``sentence``,
    ``source_file``) that share a clip, the audio of one (each source file still on disk is decoded and compared) or
    a sentence with ``held``.

    Raises:
        ValueError: one line starting with ``where``, naming up to five such clips.
    """
    columns = set(rows.column_names)
    paths = list(rows["path"])
    digests = list(rows["audio_sha256"]) if "audio_sha256" in columns else [""] * len(paths)
    sentences = list(rows["sentence"]) if "sentence" in columns else [""] * len(paths)
    shared = overlapping(held, zip(paths, digests, sentences, strict=True))
    named = {entry.split(" (", 1)[0] for entry in shared}
    if held.fingerprints and "source_file" in columns:
        seen: set[str] = set()
        for path, source in zip(paths, rows["source_file"], strict=True):
            if not source or source in seen or path in named or not Path(source).is_file():
                continue
            seen.add(source)
            try:
                match = held.same_audio(load_audio(source, SAMPLING_RATE))
            except BadClipError:
                continue
            if match is not None:
                shared.append(same_audio_entry(source, match))
    if shared:
        raise ValueError(f"{where} shares {len(shared)} clip(s) with the dev/test splits of {held.where}: "
                         f"{'; '.join(shared[:5])}{' ...' if len(shared) > 5 else ''}")
