"""One call from a Common Voice folder (or the synthetic corpus) to a prepared dataset and its processor."""

from __future__ import annotations

import json
import os
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from datasets import DatasetDict, is_progress_bar_enabled
from transformers import Wav2Vec2Processor

from .common_voice import CV_SPLITS, load_common_voice, parse_languages, prepare_dataset
from .feature_types import DEFAULT_FEATURE_TYPE, FEATURE_TYPES, FeatureType
from .global_cmvn import compute_global_cmvn, normalize_splits
from .output_folder import atomic_output_folder, check_output_folder
from .processor import build_processor
from .relabel import relabel
from .report import SkipReport
from .subsets import SubsetSize, low_resource_subset, speakers
from .text import build_vocab, normalize_text

COMPLETE_MARKER = "prepare_config.json"
"""The file :func:`prepare_corpus` writes last: a folder without it is not a prepared corpus."""


@dataclass
class PreparedCorpus:
    """What :func:`prepare_corpus` made: the prepared splits, the processor, the skip report and the folders."""

    dataset: DatasetDict
    processor: Wav2Vec2Processor
    report: SkipReport
    dataset_dir: Path | None
    processor_dir: Path


def prepare_corpus(
    root_or_hub_id: str | os.PathLike[str],
    languages: str | Iterable[str],
    out_dir: str | os.PathLike[str],
    *,
    splits: Sequence[str] = ("train", "dev", "test"),
    feature_type: str = DEFAULT_FEATURE_TYPE,
    per_language_vocab: bool = False,
    train_subset: str | int | SubsetSize | None = None,
    subset_exclude_splits: Sequence[str] = ("test",),
    seed: int = 0,
    max_seconds: float | None = 20.0,
    encoder_stride: int | None = None,
    skip_digits: bool = False,
    num_proc: int | None = None,
    save_dataset: bool = True,
    overwrite: bool = False,
    normalization: str = "utterance",
) -> PreparedCorpus:
    """Load, subset, prepare, build the vocabulary from the kept training rows, build the processor, save.

    Writes ``out_dir/processor/`` (``Wav2Vec2Processor``), ``out_dir/dataset/`` (``DatasetDict.save_to_disk``,
    unless ``save_dataset=False``), ``out_dir/skip_report.json`` and, last, ``out_dir/prepare_config.json``. All of
    it is built in a hidden sibling folder and renamed into place at the end (see
    :mod:`~adaptspeech.data.output_folder`): an interrupted run leaves ``out_dir`` as it was, and the next run
    starts afresh. An existing ``out_dir`` must be empty or, with ``overwrite``, an earlier complete output (it is
    then replaced once the new one is complete).

    Args:
        splits: the Common Voice splits to prepare; the first one is the training split whose kept rows' text
            makes the vocabulary (the text of skipped rows does not count; other splits' unseen characters become
            ``[UNK]`` and are counted in the report).
        train_subset: a low-resource budget for the training split (``"30min"``, ``"1h"``, ``"200utt"``) per
            language, drawn with ``seed``. Applied before decoding when the release has ``clip_durations.tsv``,
            after it otherwise.
        subset_exclude_splits (defaults to ``("test",)``): the subset avoids the speakers of these splits
            (those among ``splits``). Common Voice's official splits are speaker-disjoint already; this
            matters when the training split is a pool such as ``validated`` (then pass ``("dev", "test")``).
            ``dev`` is not excluded by default because the synthetic corpus's dev split shares the
            training voices by design (only its test voices are held out).
        feature_type, per_language_vocab: see :func:`~adaptspeech.data.text.build_processor` and
            :func:`~adaptspeech.data.text.build_vocab`.
        max_seconds, encoder_stride, skip_digits, num_proc: see
            :func:`~adaptspeech.data.common_voice.prepare_dataset`.
        overwrite: replace an earlier complete output in ``out_dir`` (without it, one is refused before anything is
            read).
        normalization: ``"utterance"`` (each row normalised over itself) or ``"global"`` (fbank: every row
            normalised with the per-bin mean and variance of the training split's kept rows, computed here and saved
            in the feature extractor; :mod:`~adaptspeech.data.global_cmvn`).

    Raises:
        ValueError: a language code that is not one; a requested split, or a language within it, with no rows in
            its TSV or none left after skipping (the message names the split, the language and the skip counts
            by reason).
        FileExistsError, NotADirectoryError: ``out_dir`` holds something else than an earlier output, or an earlier
            output and ``overwrite`` is off (:func:`~adaptspeech.data.output_folder.check_output_folder`).
    """
    langs = parse_languages(languages)
    FEATURE_TYPES.get(feature_type)(normalization=normalization)  # refuses a value / feature type before any work
    unknown = [s for s in subset_exclude_splits if s not in CV_SPLITS]
    if unknown:
        raise ValueError(
            f"subset_exclude_splits: unknown split(s) {', '.join(unknown)}; allowed values: {', '.join(CV_SPLITS)}"
        )
    out = Path(out_dir)
    check_output_folder(out.absolute(), COMPLETE_MARKER, "adaptspeech prepare", overwrite=overwrite)
    raw = load_common_voice(root_or_hub_id, langs, splits)
    _check_rows(raw, langs, root_or_hub_id)
    train_split = splits[0]
    size = SubsetSize.parse(train_subset) if train_subset is not None else None
    held_speakers: set[str] = set()
    for split in splits[1:]:
        if split in subset_exclude_splits:
            held_speakers |= speakers(raw[split])
    durations_known = all(d is not None for d in raw[train_split]["duration"])
    if size is not None and (not size.is_duration or durations_known):
        raw[train_split] = low_resource_subset(raw[train_split], size, seed=seed, exclude_speakers=held_speakers)
        size = None
    with atomic_output_folder(out, COMPLETE_MARKER, "adaptspeech prepare", overwrite=overwrite) as staging:
        # a first vocabulary from every training sentence tokenises the rows; the final one comes from the rows kept
        vocab = _vocab(raw[train_split], langs, per_language_vocab)
        processor = build_processor(vocab, staging / "processor", feature_type=feature_type)
        global_rows = normalization == "global"
        processor.feature_extractor.do_normalize = not global_rows  # global: raw rows first, the statistics of them
        prepared, report = prepare_dataset(
            raw,
            processor,
            max_seconds=max_seconds,
            encoder_stride=encoder_stride,
            skip_digits=skip_digits,
            num_proc=num_proc,
        )
        _check_kept(prepared, report, langs)
        if size is not None:
            prepared[train_split] = low_resource_subset(
                prepared[train_split], size, seed=seed, exclude_speakers=held_speakers
            )
        kept_vocab = _vocab(prepared[train_split], langs, per_language_vocab)
        if kept_vocab != vocab:
            processor = build_processor(kept_vocab, staging / "processor", feature_type=feature_type)
            prepared = relabel(prepared, processor, report, num_proc=num_proc)
        if global_rows:
            stats = compute_global_cmvn(prepared[train_split], FEATURE_TYPES.get(feature_type).input_name,
                                        progress=is_progress_bar_enabled())
            processor = build_processor(kept_vocab, staging / "processor", feature_type=feature_type,
                                        normalization=normalization, global_cmvn=stats.to_dict())
            prepared = normalize_splits(prepared, FeatureType.of(processor.feature_extractor), num_proc=num_proc)
        report.write_json(staging / "skip_report.json")
        if save_dataset:
            prepared.save_to_disk(str(staging / "dataset"))
        settings: dict[str, Any] = {
            **corpus_source_record(root_or_hub_id),
            "languages": langs,
            "splits": list(splits),
            "feature_type": feature_type,
            "normalization": normalization,
            "per_language_vocab": per_language_vocab,
            "train_subset": None if train_subset is None else str(SubsetSize.parse(train_subset)),
            "subset_exclude_splits": list(subset_exclude_splits),
            "seed": seed,
            "max_seconds": max_seconds,
            "encoder_stride": encoder_stride,
            "skip_digits": skip_digits,
            "rows": {split: len(part) for split, part in prepared.items()},
        }
        (staging / COMPLETE_MARKER).write_text(json.dumps(settings, indent=1), encoding="utf-8")
    processor_dir = out / "processor"
    dataset_dir = out / "dataset" if save_dataset else None
    processor = Wav2Vec2Processor.from_pretrained(processor_dir)  # the one in memory names files of the staging folder
    return PreparedCorpus(prepared, processor, report, dataset_dir, processor_dir)


def corpus_source_record(root_or_hub_id: str | os.PathLike[str]) -> dict[str, Any]:
    """What ``prepare_config.json`` records of the corpus: ``source`` (a local folder as an absolute path, so that
    the folder is found again from any working directory; a Hub id as given) and ``source_is_folder``."""
    root = Path(root_or_hub_id)
    if root.is_dir():
        return {"source": str(root.absolute()), "source_is_folder": True}
    return {"source": str(root_or_hub_id), "source_is_folder": False}


def _vocab(rows: Any, langs: Sequence[str], per_language: bool) -> dict[str, Any]:
    """The character vocabulary of ``rows``' normalised sentences (``text`` when prepared, else ``sentence``)."""
    prepared = "text" in rows.column_names
    texts: dict[str, list[str]] = {lang: [] for lang in langs}
    for sentence, lang in zip(rows["text" if prepared else "sentence"], rows["language"]):
        text = sentence if prepared else normalize_text(sentence or "", lang)
        if text:
            texts[lang].append(text)
    return build_vocab(texts, per_language=per_language)


def _check_rows(raw: DatasetDict, langs: Sequence[str], source: Any) -> None:
    """Refuse a requested split that has no rows at all for one of ``langs`` (an empty TSV)."""
    for split, part in raw.items():
        counts = Counter(part["language"])
        empty = [lang for lang in langs if not counts.get(lang)]
        if empty:
            raise ValueError(
                f"split {split!r} has no rows for language(s) {', '.join(empty)} in {source} (empty {split}.tsv); "
                "leave the split out with --splits or add rows"
            )


def _check_kept(prepared: DatasetDict, report: SkipReport, langs: Sequence[str]) -> None:
    """Refuse a split (or a language within it) whose rows were all skipped, naming the skip counts by reason."""
    for split, part in prepared.items():
        counts = Counter(part["language"])
        for lang in langs:
            if counts.get(lang):
                continue
            skipped = [s for s in report.skipped if s.split == split and s.language == lang]
            reasons = Counter(s.reason for s in skipped)
            by_reason = ", ".join(f"{reason}={n}" for reason, n in sorted(reasons.items()))
            example = f"; e.g. {skipped[0].path}: {skipped[0].reason} ({skipped[0].detail})" if skipped else ""
            raise ValueError(
                f"split {split!r} has no usable rows for language {lang!r}: all {len(skipped)} skipped "
                f"({by_reason}){example}"
            )
