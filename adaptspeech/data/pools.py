"""Untranscribed audio in: a pool of utterance-sized segments with their model inputs, ready to be pseudo-labelled.

Sources:

- :func:`prepare_audio_folder`: any folder of wav / flac / mp3 / ogg files, searched recursively;
- :func:`prepare_common_voice_other`: the clips of a Common Voice release's ``other.tsv`` (clips not validated yet),
  their sentences dropped (the synthetic corpus writes its unlabelled clips there too).

Each recording is decoded (:func:`~adaptspeech.data.audio.load_audio`: mono, 16 kHz), cut into utterance-sized
segments at pauses (:mod:`~adaptspeech.data.pool_segments`) and each segment's model input computed with the pool's
feature extractor (the feature type of the model that will label it). A file that cannot be used is skipped and
counted by reason (:class:`~adaptspeech.data.report.SkipReport`: ``unreadable``, ``empty``, ``truncated``, ``nan``,
``silent`` (digital silence included), ``too_short`` (no segment of ``min_segment_s``), ``held_out_overlap``); the
others are kept. A pool sharing a clip (same SHA-256, or the same decoded audio re-encoded, trimmed a little or at
another level) or a sentence with the dev / test splits named by ``held_out`` is refused, naming the clips
(:mod:`~adaptspeech.data.pool_overlap`), unless ``drop_overlapping``.

The pool folder: ``dataset/`` (a ``DatasetDict`` with one split, :data:`POOL_SPLIT`), ``feature_extractor/``,
``pool_report.json`` (the skip report and the totals) and, written last, :data:`POOL_MARKER`; built in a hidden
sibling and swapped in (:func:`~adaptspeech.data.output_folder.atomic_output_folder`). Every row keeps its source:
``source_file`` (absolute path), ``start`` / ``end`` (seconds in it) and ``audio_sha256``, so that its waveform can
be read again (speed perturbation) and its origin checked.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from datasets import Dataset, DatasetDict, Features, Value, load_from_disk
from tqdm.auto import tqdm
from transformers import AutoFeatureExtractor

from . import features as _features  # noqa: F401  (registers the AdaptSpeechFeatureExtractor)
from .audio import BadClipError, load_audio
from .common_voice import find_language_dir, parse_languages, read_tsv
from .feature_types import DEFAULT_FEATURE_TYPE, FeatureType
from .output_folder import atomic_output_folder, check_output_folder
from .pool_overlap import HeldOut, check_pool_rows, file_sha256, held_out, overlapping, same_audio_entry
from .pool_segments import SegmentSettings, utterance_segments
from .processor import _feature_extractor
from .report import HELD_OUT_OVERLAP, TOO_SHORT, SkipReport
from .text import normalize_text

POOL_SPLIT = "pool"
"""The one split of a pool's ``DatasetDict``."""
POOL_MARKER = "pool_config.json"
"""Written last into a pool folder: a folder without it is not a pool."""
OTHER_TSV_SOURCE = " (other.tsv)"
"""How ``pool_config.json``'s ``source`` of a Common Voice ``other.tsv`` pool ends (after the release folder); an
audio folder's pool records the folder alone."""
AUDIO_EXTENSIONS: tuple[str, ...] = (".wav", ".flac", ".mp3", ".ogg")
"""The files :func:`prepare_audio_folder` reads (any case)."""
POOL_SAMPLING_RATE = 16000


@dataclass(frozen=True)
class PoolClip:
    """One recording of a pool's source: its file, its name in the pool and, where the source has one, its sentence
    (used only to refuse a dev / test sentence, never stored)."""

    path: Path
    name: str
    sentence: str = ""


@dataclass
class Pool:
    """What :func:`prepare_pool` made: the rows, the skip report, the totals and the folder."""

    dataset: Any
    report: SkipReport
    summary: dict[str, Any]
    out_dir: Path


def audio_files(root: str | os.PathLike[str]) -> list[Path]:
    """The audio files under ``root`` (recursively, :data:`AUDIO_EXTENSIONS`), sorted.

    Raises:
        FileNotFoundError, NotADirectoryError: ``root`` is missing or a file.
        ValueError: it holds no audio file (naming the extensions looked for).
    """
    root = Path(root)
    if not root.exists():
        raise FileNotFoundError(f"--root {root}: no such folder")
    if not root.is_dir():
        raise NotADirectoryError(f"--root {root}: a file, not a folder")
    files = sorted(p for p in root.rglob("*") if p.suffix.lower() in AUDIO_EXTENSIONS and p.is_file())
    if not files:
        raise ValueError(f"--root {root}: no audio file ({', '.join(AUDIO_EXTENSIONS)}) in it or below it")
    return files


def feature_extractor_for(feature_type: str = DEFAULT_FEATURE_TYPE, processor_dir: str | None = None,
                          n_mels: int = 80) -> Any:
    """The pool's feature extractor: that of a saved processor / model folder (``processor_dir``), or a new one of
    ``feature_type``."""
    if processor_dir is not None:
        return AutoFeatureExtractor.from_pretrained(processor_dir)
    return _feature_extractor(feature_type, POOL_SAMPLING_RATE, n_mels)


def _clip_rows(clip: PoolClip, digest: str, waveform: np.ndarray, segments: list[tuple[int, int]],
               features: FeatureType, language: str) -> Iterator[dict[str, Any]]:
    """The pool rows of one recording's segments."""
    rate = POOL_SAMPLING_RATE
    whole = len(segments) == 1 and segments[0] == (0, len(waveform))
    for first, last in segments:
        values = features.extract(waveform[first:last])
        name = clip.name if whole else f"{clip.name}@{first / rate:.2f}-{last / rate:.2f}"
        yield {
            features.input_name: values,
            "input_length": len(values),
            "duration": (last - first) / rate,
            "path": name,
            "source_file": str(clip.path.absolute()),
            "start": first / rate,
            "end": last / rate,
            "audio_sha256": digest,
            "language": language,
            "client_id": "",
            "sentence": "",
            "text": "",
        }


def _dataset_features(features: FeatureType) -> Any:
    spec: dict[str, Any] = {features.input_name: features.dataset_feature(), "input_length": Value("int32"),
                            "duration": Value("float32")}
    for name in ("path", "source_file", "audio_sha256", "language", "client_id", "sentence", "text"):
        spec[name] = Value("string")
    spec.update(start=Value("float64"), end=Value("float64"))
    return Features(spec)


def prepare_pool(
    clips: Sequence[PoolClip],
    language: str,
    out_dir: str | os.PathLike[str],
    feature_extractor: Any,
    *,
    segments: SegmentSettings | None = None,
    held: HeldOut | None = None,
    drop_overlapping: bool = False,
    source: str = "",
    progress: bool = True,
    overwrite: bool = False,
) -> Pool:
    """Decode, segment and featurise ``clips`` into a pool folder (module docstring).

    Args:
        clips: the recordings.
        language: their language code (the pool's ``language`` column).
        out_dir: the pool folder (empty, or with ``overwrite`` an earlier pool, replaced once the new one is
            complete).
        feature_extractor: computes each segment's model input (the labelling model's kind).
        segments: how long recordings are cut (default :class:`~adaptspeech.data.pool_segments.SegmentSettings`).
        held: dev / test clips and sentences the pool may not share (:func:`~adaptspeech.data.pool_overlap.
            held_out`); None: not checked.
        drop_overlapping: skip such clips (``held_out_overlap``) instead of refusing the pool.
        source: what the pool was read from (recorded).
        overwrite: replace an earlier pool in ``out_dir`` (without it, one is refused before any file is read).

    Raises:
        ValueError: the pool shares clips or sentences with ``held`` (naming them), or no file is usable (naming the
            counts by reason and an example).
    """
    language = parse_languages([language])[0]
    segments = segments or SegmentSettings()
    out = Path(out_dir)
    check_output_folder(out.absolute(), POOL_MARKER, "adaptspeech prepare (pool)", overwrite=overwrite)
    features = FeatureType.of(feature_extractor)
    report = SkipReport()
    hashes = {clip.name: file_sha256(clip.path) for clip in clips if clip.path.is_file()}
    if held is not None:
        shared = overlapping(held, ((c.name, hashes.get(c.name, ""), normalize_text(c.sentence, language))
                                    for c in clips))
        if shared and not drop_overlapping:
            raise ValueError(
                f"the pool shares {len(shared)} clip(s) with the dev/test splits of {held.where}: "
                f"{'; '.join(shared[:5])}{' ...' if len(shared) > 5 else ''}; remove them or pass --drop-overlapping"
            )
        dropped = {entry.split(" (", 1)[0] for entry in shared}
        for name in sorted(dropped):
            report.add(name, HELD_OUT_OVERLAP, next(s for s in shared if s.startswith(f"{name} (")), language,
                       POOL_SPLIT)
        clips = [c for c in clips if c.name not in dropped]
    counts = {"files": len(clips) + len(report.skipped), "segments": 0, "files_used": 0, "seconds": 0.0,
              "files_split": 0}
    copies: list[str] = []  # clips that are a held-out clip re-encoded (found as they are decoded)

    def rows() -> Iterator[dict[str, Any]]:
        threads = torch.get_num_threads()
        torch.set_num_threads(1)  # one clip's features are small: see the data preparation's note
        try:
            for clip in tqdm(clips, desc="pool", unit="file", disable=not progress):
                try:
                    waveform = load_audio(clip.path, POOL_SAMPLING_RATE)
                except BadClipError as err:
                    report.add(clip.name, err.reason, err.detail, language, POOL_SPLIT)
                    continue
                match = held.same_audio(waveform) if held is not None else None
                if match is not None:
                    copies.append(same_audio_entry(clip.name, match))
                    report.add(clip.name, HELD_OUT_OVERLAP, copies[-1], language, POOL_SPLIT)
                    continue
                found = utterance_segments(waveform, segments, POOL_SAMPLING_RATE)
                if not found:
                    seconds = len(waveform) / POOL_SAMPLING_RATE
                    report.add(clip.name, TOO_SHORT, f"{seconds:.2f} s of audio, no speech segment of at least "
                               f"{segments.min_segment_s:g} s", language, POOL_SPLIT)
                    continue
                counts["files_used"] += 1
                counts["files_split"] += len(found) > 1
                counts["segments"] += len(found)
                counts["seconds"] += sum(b - a for a, b in found) / POOL_SAMPLING_RATE
                yield from _clip_rows(clip, hashes[clip.name], waveform, found, features, language)
        finally:
            torch.set_num_threads(threads)

    with atomic_output_folder(out, POOL_MARKER, "adaptspeech prepare (pool)", overwrite=overwrite) as staging:
        cache = staging / ".cache"
        try:
            dataset = Dataset.from_generator(rows, features=_dataset_features(features), cache_dir=str(cache))
        except Exception as err:  # datasets refuses a generator that yields nothing
            if counts["segments"]:
                raise
            dataset = None
            error = err
        if copies and not drop_overlapping:
            raise ValueError(
                f"the pool shares {len(copies)} clip(s) with the dev/test splits of {held.where}: "
                f"{'; '.join(copies[:5])}{' ...' if len(copies) > 5 else ''}; remove them or pass --drop-overlapping"
            )
        if dataset is None or len(dataset) == 0:
            by_reason = ", ".join(f"{r}={n}" for r, n in sorted(report.counts.items())) or "no file"
            example = f"; e.g. {report.skipped[0].path}: {report.skipped[0].reason} ({report.skipped[0].detail})" \
                if report.skipped else ""
            raise ValueError(f"no usable audio in the pool: all {counts['files']} files skipped ({by_reason})"
                             f"{example}") from (None if dataset is not None else error)
        report.kept[POOL_SPLIT] = len(dataset)
        DatasetDict({POOL_SPLIT: dataset}).save_to_disk(str(staging / "dataset"))
        feature_extractor.save_pretrained(str(staging / "feature_extractor"))
        summary = {"source": source, "language": language, **counts, "hours": counts["seconds"] / 3600,
                   "skipped": report.counts, "segments_settings": asdict(segments),
                   "feature_type": features.name}
        (staging / "pool_report.json").write_text(json.dumps({**summary, "report": report.to_dict()},
                                                             ensure_ascii=False, indent=1), encoding="utf-8")
        (staging / POOL_MARKER).write_text(json.dumps(summary, indent=1), encoding="utf-8")
        del dataset
        shutil.rmtree(cache, ignore_errors=True)
    dataset, _ = load_pool(out)
    return Pool(dataset, report, summary, out)


def prepare_audio_folder(root: str | os.PathLike[str], language: str, out_dir: str | os.PathLike[str],
                         feature_extractor: Any, **settings: Any) -> Pool:
    """A pool of every audio file under ``root`` (:func:`audio_files`); ``settings`` as :func:`prepare_pool`'s.
    Each row's ``path`` is the file's path relative to ``root`` (``@start-end`` added for a segment of a long one)."""
    root = Path(root)
    clips = [PoolClip(path, path.relative_to(root).as_posix()) for path in audio_files(root)]
    return prepare_pool(clips, language, out_dir, feature_extractor, source=str(root.absolute()), **settings)


def common_voice_other(root: str | os.PathLike[str], language: str) -> list[PoolClip]:
    """The clips of ``other.tsv`` of ``language`` under a Common Voice release folder (or a synthetic corpus), with
    their sentences (kept only for the dev / test check).

    Raises:
        FileNotFoundError: no ``other.tsv``.
        ValueError: it lists no clip.
    """
    lang_dir = find_language_dir(root, language)
    tsv = lang_dir / "other.tsv"
    if not tsv.is_file():
        raise FileNotFoundError(f"{tsv}: no such file (the release's clips without a validated transcript)")
    columns = read_tsv(tsv)
    if not columns["path"]:
        raise ValueError(f"{tsv}: lists no clip")
    return [PoolClip(lang_dir / "clips" / name, name, sentence)
            for name, sentence in zip(columns["path"], columns["sentence"], strict=True)]


def prepare_common_voice_other(root: str | os.PathLike[str], language: str, out_dir: str | os.PathLike[str],
                               feature_extractor: Any, **settings: Any) -> Pool:
    """A pool of the release's ``other.tsv`` clips of ``language`` (sentences dropped); ``settings`` as
    :func:`prepare_pool`'s. A clip listed but missing on disk is skipped as ``missing``."""
    clips = common_voice_other(root, language)
    return prepare_pool(clips, language, out_dir, feature_extractor,
                        source=f"{Path(root).absolute()}{OTHER_TSV_SOURCE}", **settings)


def load_pool(pool_dir: str | os.PathLike[str]) -> tuple[Any, Any]:
    """``(rows of the pool, its feature extractor)`` of a folder written by :func:`prepare_pool`.

    Raises:
        FileNotFoundError: not a complete pool folder (naming what is missing).
    """
    pool_dir = Path(pool_dir)
    if not (pool_dir / POOL_MARKER).is_file():
        raise FileNotFoundError(
            f"--data {pool_dir}: no {POOL_MARKER}, not a pool written by `adaptspeech prepare audio-folder` / "
            "`common-voice-other`"
        )
    dataset = load_from_disk(str(pool_dir / "dataset"))[POOL_SPLIT]
    return dataset, feature_extractor_for(processor_dir=str(pool_dir / "feature_extractor"))


def language_pool_rows(pool_dir: str | os.PathLike[str], language: str, feature_extractor: Any,
                       prepared_dir: str | os.PathLike[str], where: str) -> Any:
    """The rows of the pool in ``pool_dir`` as rows of ``language`` (known, untranscribed: a language-ID head's
    training rows), checked: a pool of ``language``, of the inputs ``feature_extractor`` computes, sharing no clip
    (nor the audio of one, re-encoded) and no sentence with the dev / test splits of ``language`` in
    ``prepared_dir`` (:func:`~adaptspeech.data.pool_overlap.check_pool_rows`).

    Raises:
        FileNotFoundError: no such folder, or not a pool (one line starting with ``where``).
        ValueError: a pool of another language or other inputs, or one sharing clips with dev / test (one line
            starting with ``where``).
    """
    pool_dir = Path(pool_dir)
    if not pool_dir.is_dir():
        raise FileNotFoundError(f"{where} {pool_dir}: no such folder")
    if not (pool_dir / POOL_MARKER).is_file():
        raise FileNotFoundError(f"{where} {pool_dir}: no {POOL_MARKER}, not a pool written by `adaptspeech prepare "
                                "audio-folder` / `common-voice-other`")
    pooled = json.loads((pool_dir / POOL_MARKER).read_text(encoding="utf-8")).get("language")
    if pooled != language:
        raise ValueError(f"{where} {pool_dir}: a pool of {pooled!r}, given for {language!r}")
    rows, extractor = load_pool(pool_dir)
    made, read = FeatureType.of(extractor), FeatureType.of(feature_extractor)
    if made != read:
        raise ValueError(f"{where} {pool_dir}: the pool holds {made} inputs, the prepared data {read}; prepare the "
                         "pool with --processor the prepared folder's processor")
    check_pool_rows(rows, held_out(prepared_dir, language), f"{where} {pool_dir}")
    return rows


def pool_fingerprint(pool_dir: str | os.PathLike[str]) -> str:
    """SHA-256 over a pool folder's ``pool_config.json`` and its dataset's data files: what a cached result records
    as the pool it came from. The ``cache-*.arrow`` files ``datasets`` writes beside the data when the pool is read
    (a ``filter`` / ``map``) are left out, so reading a pool does not change its fingerprint."""
    pool_dir = Path(pool_dir)
    digest = hashlib.sha256((pool_dir / POOL_MARKER).read_bytes())
    for path in sorted((pool_dir / "dataset").rglob("*")):
        if path.is_file() and not path.name.startswith("cache-"):
            digest.update(str(path.relative_to(pool_dir)).encode())
            digest.update(path.read_bytes())
    return digest.hexdigest()
