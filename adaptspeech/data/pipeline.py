"""One call from a Common Voice folder (or the synthetic corpus) to a prepared dataset and its processor."""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from datasets import DatasetDict
from transformers import Wav2Vec2Processor

from .common_voice import CV_SPLITS, load_common_voice, parse_languages, prepare_dataset
from .report import SkipReport
from .subsets import SubsetSize, low_resource_subset, speakers
from .text import build_processor, build_vocab, normalize_text


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
    feature_type: str = "waveform",
    per_language_vocab: bool = False,
    train_subset: str | int | SubsetSize | None = None,
    subset_exclude_splits: Sequence[str] = ("test",),
    seed: int = 0,
    max_seconds: float | None = 20.0,
    encoder_stride: int | None = None,
    skip_digits: bool = False,
    num_proc: int | None = None,
    save_dataset: bool = True,
) -> PreparedCorpus:
    """Load, subset, build the vocabulary from the training text, build the processor, prepare, save.

    Writes ``out_dir/processor/`` (``Wav2Vec2Processor``), ``out_dir/dataset/`` (``DatasetDict.save_to_disk``,
    unless ``save_dataset=False``), ``out_dir/skip_report.json`` and ``out_dir/prepare_config.json``.

    Args:
        splits: the Common Voice splits to prepare; the first one is the training split whose text makes
            the vocabulary (other splits' unseen characters become ``[UNK]`` and are counted).
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
    """
    langs = parse_languages(languages)
    unknown = [s for s in subset_exclude_splits if s not in CV_SPLITS]
    if unknown:
        raise ValueError(
            f"subset_exclude_splits: unknown split(s) {', '.join(unknown)}; allowed values: {', '.join(CV_SPLITS)}"
        )
    out = Path(out_dir)
    raw = load_common_voice(root_or_hub_id, langs, splits)
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
    texts: dict[str, list[str]] = {lang: [] for lang in langs}
    for sentence, lang in zip(raw[train_split]["sentence"], raw[train_split]["language"]):
        text = normalize_text(sentence or "", lang)
        if text:
            texts[lang].append(text)
    vocab = build_vocab(texts, per_language=per_language_vocab)
    processor_dir = out / "processor"
    processor = build_processor(vocab, processor_dir, feature_type=feature_type)
    prepared, report = prepare_dataset(
        raw,
        processor,
        max_seconds=max_seconds,
        encoder_stride=encoder_stride,
        skip_digits=skip_digits,
        num_proc=num_proc,
    )
    if size is not None:
        prepared[train_split] = low_resource_subset(
            prepared[train_split], size, seed=seed, exclude_speakers=held_speakers
        )
    out.mkdir(parents=True, exist_ok=True)
    report.write_json(out / "skip_report.json")
    dataset_dir = None
    if save_dataset:
        dataset_dir = out / "dataset"
        prepared.save_to_disk(str(dataset_dir))
    settings: dict[str, Any] = {
        "source": str(root_or_hub_id),
        "languages": langs,
        "splits": list(splits),
        "feature_type": feature_type,
        "per_language_vocab": per_language_vocab,
        "train_subset": None if train_subset is None else str(SubsetSize.parse(train_subset)),
        "subset_exclude_splits": list(subset_exclude_splits),
        "seed": seed,
        "max_seconds": max_seconds,
        "encoder_stride": encoder_stride,
        "skip_digits": skip_digits,
        "rows": {split: len(part) for split, part in prepared.items()},
    }
    (out / "prepare_config.json").write_text(json.dumps(settings, indent=1), encoding="utf-8")
    return PreparedCorpus(prepared, processor, report, dataset_dir, processor_dir)
