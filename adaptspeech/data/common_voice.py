"""Common Voice: a release folder or a Hub dataset id -> ``datasets.DatasetDict``, then model inputs.

:func:`load_common_voice` reads the split TSVs of a local release (``cv-corpus-*/<lang>/`` with
``clips/*.mp3``) or a Hub dataset id (``mozilla-foundation/common_voice_*``, needs the network), keeps the
audio undecoded (``Audio(decode=False)``: torchcodec does not load here) and adds a ``language`` column.
:func:`prepare_dataset` then decodes, resamples, normalises the text and tokenises, skipping bad rows and
naming each in a :class:`~adaptspeech.data.report.SkipReport`.
"""

from __future__ import annotations

import copy
import csv
import hashlib
import itertools
import json
import logging
import os
import re
from collections import Counter
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from datasets import Audio, Dataset, DatasetDict, Features, List, Value, concatenate_datasets, load_dataset

from ..settings import is_language_code
from .audio import DEFAULT_SILENCE_THRESHOLD, BadClipError, load_audio
from .feature_types import FeatureType
from .report import DIGITS, EMPTY_SENTENCE, TOO_SHORT, SkipReport
from .text import count_oov, normalize_text

logger = logging.getLogger(__name__)

CV_COLUMNS: tuple[str, ...] = (
    "client_id",
    "path",
    "sentence_id",
    "sentence",
    "sentence_domain",
    "up_votes",
    "down_votes",
    "age",
    "gender",
    "accents",
    "variant",
    "locale",
    "segment",
)
"""The columns of recent Common Voice releases (17.0 and later), in their order."""

CV_SPLITS: tuple[str, ...] = ("train", "dev", "test", "validated", "other", "invalidated")
_COLUMN_ALIASES = {"accent": "accents"}  # releases up to 9.0 call it "accent"
_REQUIRED_COLUMNS = ("path", "sentence")
_HUB_SPLITS = {"dev": "validation"}
_HUB_ID = re.compile(r"^[\w.-]+/[\w.-]+$")
OUTPUT_COLUMNS: tuple[str, ...] = (
    "audio",
    "path",
    "sentence",
    "client_id",
    "language",
    "duration",
    *(c for c in CV_COLUMNS if c not in ("path", "sentence", "client_id")),
)
"""Columns of every split :func:`load_common_voice` returns, in order."""


def _output_features() -> Features:
    spec: dict[str, Any] = {name: Value("string") for name in OUTPUT_COLUMNS}
    spec["duration"] = Value("float64")
    return Features(spec)


def parse_languages(languages: str | Iterable[str]) -> list[str]:
    """``"ro,cs"`` or ``["ro", "cs"]`` -> ``["ro", "cs"]``; refuses an empty list, repeats, and anything that is
    not a language code (``"r o"``, ``"../x"``: the codes become folder names and dataset configs)."""
    langs = [x.strip() for x in languages.split(",")] if isinstance(languages, str) else [str(x) for x in languages]
    langs = [x for x in langs if x]
    if not langs:
        raise ValueError("languages: give at least one language code (e.g. ro,cs)")
    bad = [x for x in langs if not is_language_code(x)]
    if bad:
        raise ValueError(
            f"languages: {', '.join(repr(x) for x in bad)} is not a language code "
            "(expected ISO 639 codes such as ro, cs or zh-CN, separated by commas)"
        )
    repeated = sorted({x for x in langs if langs.count(x) > 1})
    if repeated:
        raise ValueError(f"languages: {', '.join(repeated)} given more than once")
    return langs


def read_tsv(path: str | os.PathLike[str]) -> dict[str, list[str]]:
    """Read one Common Voice TSV (tab-separated, unquoted, header row) into ``{column: values}``.

    Older column sets are accepted: ``accent`` is renamed ``accents``; rows shorter than the header (trailing
    empty fields dropped) are padded with ``""``.

    Raises:
        ValueError: a row with more fields than the header, or no ``path`` / ``sentence`` column,
            naming the file and line; a file that is not UTF-8, naming the file and the byte.
    """
    path = Path(path)
    try:
        return _read_tsv(path)
    except UnicodeDecodeError:
        raise ValueError(f"{path}:{first_non_utf8_line(path)}: not UTF-8 text (Common Voice TSVs are UTF-8)") from None


def first_non_utf8_line(path: str | os.PathLike[str]) -> int:
    """The number (from 1) of the first line of ``path`` that is not UTF-8 (1 when every line is), for the
    ``FILE:LINE: not UTF-8 text`` messages of the commands that read text files."""
    path = Path(path)
    with path.open("rb") as handle:
        for line_no, line in enumerate(handle, start=1):
            try:
                line.decode("utf-8")
            except UnicodeDecodeError:
                return line_no
    return 1


def _read_tsv(path: Path) -> dict[str, list[str]]:
    with path.open(encoding="utf-8", newline="") as handle:
        reader = csv.reader(handle, delimiter="\t", quoting=csv.QUOTE_NONE)
        header = next(reader, None)
        if header is None:
            raise ValueError(f"{path}: empty file, expected a header row with {', '.join(_REQUIRED_COLUMNS)}")
        header = [_COLUMN_ALIASES.get(h.strip(), h.strip()) for h in header]
        missing = [c for c in _REQUIRED_COLUMNS if c not in header]
        if missing:
            raise ValueError(f"{path}: no {', '.join(missing)} column; columns found: {', '.join(header)}")
        columns: dict[str, list[str]] = {h: [] for h in header}
        for line_no, row in enumerate(reader, start=2):
            if not row:
                continue
            if len(row) > len(header):
                raise ValueError(f"{path}:{line_no}: {len(row)} tab-separated fields, the header has {len(header)}")
            row = row + [""] * (len(header) - len(row))
            for name, value in zip(header, row):
                columns[name].append(value)
    return columns


def read_clip_durations(lang_dir: str | os.PathLike[str]) -> dict[str, float]:
    """``{clip: seconds}`` from ``clip_durations.tsv`` (``clip``, ``duration[ms]``), ``{}`` when absent."""
    path = Path(lang_dir) / "clip_durations.tsv"
    if not path.is_file():
        return {}
    with path.open(encoding="utf-8", newline="") as handle:
        reader = csv.reader(handle, delimiter="\t", quoting=csv.QUOTE_NONE)
        header = next(reader, [])
        if len(header) < 2:
            raise ValueError(f"{path}: expected columns clip, duration[ms]; got {header}")
        return {row[0]: float(row[1]) / 1000.0 for row in reader if len(row) >= 2 and row[1]}


def find_language_dir(root: str | os.PathLike[str], language: str) -> Path:
    """The folder holding ``language``'s split TSVs: ``root/<lang>``, ``root/cv-corpus-*/<lang>`` or ``root``.

    Raises:
        FileNotFoundError: naming the places looked at and listing the languages found under ``root``.
        ValueError: when several ``cv-corpus-*`` releases under ``root`` hold the language.
    """
    root = Path(root)
    if root.name == language and any(root.glob("*.tsv")):
        return root
    if (root / language).is_dir():
        return root / language
    releases = sorted(p for p in root.glob(f"cv-corpus-*/{language}") if p.is_dir())
    if len(releases) > 1:
        raise ValueError(
            f"several Common Voice releases under {root} hold {language!r}: "
            f"{', '.join(str(p.parent.name) for p in releases)}; pass the release folder itself"
        )
    if releases:
        return releases[0]
    found = sorted({p.parent.name for p in [*root.glob("*/*.tsv"), *root.glob("cv-corpus-*/*/*.tsv")]})
    raise FileNotFoundError(
        f"no Common Voice folder for language {language!r}: looked for {root / language} and "
        f"{root}/cv-corpus-*/{language}; languages found: {', '.join(found) or 'none'}"
    )


def _load_folder_split(lang_dir: Path, language: str, split: str, durations: dict[str, float]) -> Dataset:
    tsv = lang_dir / f"{split}.tsv"
    if not tsv.is_file():
        raise FileNotFoundError(f"{tsv}: no such file (split {split!r} of language {language!r})")
    columns = read_tsv(tsv)
    n = len(columns["path"])
    clips = lang_dir / "clips"
    names = [_clip_name(clips, p) for p in columns["path"]]
    data: dict[str, list[Any]] = {
        name: columns.get(name, [""] * n) for name in OUTPUT_COLUMNS if name not in ("audio", "duration")
    }
    data["path"] = names
    data["audio"] = [str(clips / p) for p in names]
    data["language"] = [language] * n
    data["duration"] = [durations.get(p) for p in names]
    dataset = Dataset.from_dict({name: data[name] for name in OUTPUT_COLUMNS}, features=_output_features())
    return dataset.cast_column("audio", Audio(decode=False))


def _clip_name(clips: Path, name: str) -> str:
    # the first releases wrote the clip name without its ".mp3"
    if name and not Path(name).suffix and not (clips / name).exists() and (clips / f"{name}.mp3").exists():
        return f"{name}.mp3"
    return name


def _load_hub_split(hub_id: str, language: str, split: str, hub_kwargs: dict[str, Any]) -> Dataset:
    dataset = load_dataset(hub_id, language, split=_HUB_SPLITS.get(split, split), **hub_kwargs)
    return standardize_columns(dataset, language)


def standardize_columns(dataset: Dataset, language: str) -> Dataset:
    """Give a Hub Common Voice split the columns of :data:`OUTPUT_COLUMNS` (missing ones ``""``/``None``).

    ``audio`` becomes ``Audio(decode=False)``, ``path`` the clip's file name, ``language`` is added.
    """
    dataset = dataset.rename_columns({k: v for k, v in _COLUMN_ALIASES.items() if k in dataset.column_names})
    if "audio" not in dataset.column_names or "sentence" not in dataset.column_names:
        raise ValueError(
            f"a Common Voice split needs audio and sentence columns; got {', '.join(dataset.column_names)}"
        )
    dataset = dataset.cast_column("audio", Audio(decode=False))
    n = len(dataset)
    if "path" in dataset.column_names:
        names = [os.path.basename(p or "") for p in dataset["path"]]
        dataset = dataset.remove_columns("path")
    else:
        names = [os.path.basename(a["path"] or f"row{i}") for i, a in enumerate(dataset["audio"])]
    dataset = dataset.add_column("path", names)
    for name in OUTPUT_COLUMNS:
        if name not in dataset.column_names:
            values: list[Any] = [language] * n if name == "language" else [None if name == "duration" else ""] * n
            dataset = dataset.add_column(name, values)
    dataset = dataset.select_columns(list(OUTPUT_COLUMNS))
    features = _output_features()
    features["audio"] = Audio(decode=False)
    return dataset.cast(features)


def load_common_voice(
    root_or_hub_id: str | os.PathLike[str],
    languages: str | Iterable[str],
    splits: Sequence[str] = ("train", "dev", "test"),
    *,
    hub_kwargs: dict[str, Any] | None = None,
) -> DatasetDict:
    """Load Common Voice splits of several languages, audio undecoded.

    Args:
        root_or_hub_id: a local folder (a ``cv-corpus-*`` release, a folder of releases, a folder of language
            folders, or one language folder) or a Hub dataset id such as ``mozilla-foundation/common_voice_17_0``
            (read with ``datasets.load_dataset(id, lang, split=...)``; ``dev`` is the Hub's ``validation``).
        languages: language codes, a list or ``"ro,cs"``.
        splits: any of ``train, dev, test, validated, other, invalidated``.
        hub_kwargs: extra keyword arguments for ``datasets.load_dataset`` (e.g. ``token``, ``revision``).

    Returns:
        `DatasetDict` ``{split: Dataset}`` with the columns of :data:`OUTPUT_COLUMNS`: ``audio``
        (``Audio(decode=False)``: ``{"path": absolute path, "bytes": None}``), ``path`` (the clip's file
        name), ``sentence``, ``client_id``, ``language``, ``duration`` (seconds from ``clip_durations.tsv``
        or ``None``) and the other Common Voice columns as strings (``""`` where a release lacks them).
        Languages are concatenated in the order given.
    """
    langs = parse_languages(languages)
    bad = [s for s in splits if s not in CV_SPLITS]
    if bad or not splits:
        raise ValueError(
            f"splits: unknown value(s) {', '.join(bad) or '(none given)'}; allowed values: {', '.join(CV_SPLITS)}"
        )
    repeated = sorted({s for s in splits if list(splits).count(s) > 1})
    if repeated:
        raise ValueError(f"splits: {', '.join(repeated)} given more than once (its rows would be read twice)")
    root = Path(root_or_hub_id)
    per_split: dict[str, list[Dataset]] = {s: [] for s in splits}
    if root.exists():
        if not root.is_dir():
            raise NotADirectoryError(f"{root}: not a folder (expected a Common Voice release folder)")
        for lang in langs:
            lang_dir = find_language_dir(root, lang)
            durations = read_clip_durations(lang_dir)
            for split in splits:
                per_split[split].append(_load_folder_split(lang_dir, lang, split, durations))
    elif _HUB_ID.match(str(root_or_hub_id)) and not str(root_or_hub_id).startswith((".", "/")):
        for lang in langs:
            for split in splits:
                per_split[split].append(_load_hub_split(str(root_or_hub_id), lang, split, dict(hub_kwargs or {})))
    else:
        raise FileNotFoundError(f"{root_or_hub_id}: no such folder, and not a Hub dataset id (owner/name)")
    return DatasetDict(
        {s: concatenate_datasets(parts) if len(parts) > 1 else parts[0] for s, parts in per_split.items()}
    )


class _Preparer:
    """The batched ``map`` function of :func:`prepare_dataset` (a class so that ``num_proc`` can pickle it)."""

    def __init__(
        self,
        processor: Any,
        max_seconds: float | None,
        encoder_stride: int,
        skip_digits: bool,
        silence_threshold: float,
    ) -> None:
        self.processor = processor
        self.max_seconds = max_seconds
        self.encoder_stride = encoder_stride
        self.skip_digits = skip_digits
        self.silence_threshold = silence_threshold
        self.sampling_rate = int(processor.feature_extractor.sampling_rate)
        self._tokenizers: dict[str, Any] = {}

    def tokenizer(self, language: str) -> Any:
        base = self.processor.tokenizer
        if getattr(base, "target_lang", None) is None:
            return base
        if language not in self._tokenizers:
            tokenizer = copy.deepcopy(base)
            tokenizer.set_target_lang(language)
            self._tokenizers[language] = tokenizer
        return self._tokenizers[language]

    def __call__(self, batch: dict[str, list[Any]]) -> dict[str, list[Any]]:
        # one clip's features are small tensors: torch's intra-op threads only add synchronisation, which on a
        # busy machine made log_mel 25x slower (56 ms instead of 2 ms for 3 s of audio on 2 shared cores)
        threads = torch.get_num_threads()
        torch.set_num_threads(1)
        try:
            return self._prepare(batch)
        finally:
            torch.set_num_threads(threads)

    def _prepare(self, batch: dict[str, list[Any]]) -> dict[str, list[Any]]:
        features_of = FeatureType.of(self.processor.feature_extractor)
        input_key = features_of.input_name
        out: dict[str, list[Any]] = {
            k: []
            for k in (input_key, "labels", "input_length", "duration", "text", "_skip_reason", "_skip_detail", "_oov")
        }
        for i, name in enumerate(batch["path"]):
            language = batch["language"][i]
            text = normalize_text(batch["sentence"][i] or "", language)
            reason, detail, features, labels, oov = "", "", None, [], ""
            wave = np.zeros(0, dtype=np.float32)
            if not text:
                reason, detail = EMPTY_SENTENCE, f"sentence {batch['sentence'][i]!r}"
            elif self.skip_digits and any(c.isdigit() for c in text):
                reason, detail = DIGITS, f"sentence {text!r}"
            else:
                audio = batch["audio"][i]
                try:
                    wave = load_audio(
                        audio["path"] or name,
                        self.sampling_rate,
                        self.max_seconds,
                        data=audio.get("bytes"),
                        silence_threshold=self.silence_threshold,
                    )
                except BadClipError as err:
                    reason, detail = err.reason, err.detail
            if not reason:
                tokenizer = self.tokenizer(language)
                labels = tokenizer(text).input_ids
                repeats = sum(a == b for a, b in itertools.pairwise(labels))
                frames = len(wave) // self.encoder_stride
                if frames < len(labels) + repeats:
                    reason = TOO_SHORT
                    detail = f"{frames} encoder frames for {len(labels)} labels with {repeats} repeats"
                else:
                    oov = "".join(c * n for c, n in count_oov(text, tokenizer.encoder).items())
                    features = features_of.extract(wave)
            if reason:
                labels, wave = [], wave[:0]
                features = features_of.empty()
            out[input_key].append(features)
            out["labels"].append(labels)
            out["input_length"].append(len(features))
            out["duration"].append(len(wave) / self.sampling_rate)
            out["text"].append(text)
            out["_skip_reason"].append(reason)
            out["_skip_detail"].append(detail)
            out["_oov"].append(oov)
        return out


_KEPT_COLUMNS = ("path", "sentence", "client_id", "language")


def prepare_dataset(
    dataset: Dataset | DatasetDict,
    processor: Any,
    *,
    max_seconds: float | None = 20.0,
    encoder_stride: int | None = None,
    skip_digits: bool = False,
    silence_threshold: float = DEFAULT_SILENCE_THRESHOLD,
    num_proc: int | None = None,
    batch_size: int = 16,
    cache_dir: str | os.PathLike[str] | None = None,
    report_path: str | os.PathLike[str] | None = None,
) -> tuple[Dataset | DatasetDict, SkipReport]:
    """Decode, resample, featurise, normalise and tokenise; drop bad rows and report them.

    A row is skipped (never crashing the map, hence never an epoch) when its normalised sentence is empty
    (``empty_sentence``), holds digits and ``skip_digits`` (``digits``), its clip is missing, empty,
    unreadable, NaN, silent or longer than ``max_seconds`` (see :func:`~adaptspeech.data.audio.load_audio`), or
    it is too short for its transcript (``too_short``: fewer encoder frames, ``samples // encoder_stride``,
    than CTC needs, i.e. the number of labels plus the number of adjacent repeated labels).

    Args:
        dataset: the output of :func:`load_common_voice` (or one of its splits); needs ``audio``, ``path``,
            ``sentence``, ``language``.
        processor: a ``Wav2Vec2Processor`` from :func:`~adaptspeech.data.text.build_processor`; with a
            per-language (nested) vocabulary each row is tokenised with its language's vocabulary.
        max_seconds (`float`, *optional*, defaults to 20.0): longest clip kept.
        encoder_stride (`int`, *optional*): samples per encoder output frame; default 320 (wav2vec2's
            20 ms) for ``waveform`` and 640 (10 ms fbank hop, two stride-2 convolutions) for ``fbank``: the feature
            type's ``encoder_stride``.
        num_proc, batch_size: passed to ``Dataset.map``.
        cache_dir: write the prepared arrays under this folder instead of keeping them in memory.
        report_path: also write the :class:`SkipReport` there as JSON.

    Returns:
        ``(prepared, report)``. ``prepared`` has ``input_values`` ``[S]`` (waveform) or ``input_features``
        ``[T, n_mels]`` (fbank), ``labels`` (token ids), ``input_length`` (S or T), ``duration`` (seconds),
        ``text`` (normalised sentence), plus ``path``, ``sentence``, ``client_id``, ``language``.
    """
    if encoder_stride is None:
        encoder_stride = FeatureType.of(processor.feature_extractor).encoder_stride
    if encoder_stride < 1:
        raise ValueError(f"encoder_stride must be >= 1, got {encoder_stride}")
    if max_seconds is not None and not max_seconds > 0:
        raise ValueError(f"max_seconds must be a positive number of seconds (or None), got {max_seconds}")
    splits = dataset if isinstance(dataset, DatasetDict) else {"": dataset}
    _check_languages(splits, processor.tokenizer)
    preparer = _Preparer(processor, max_seconds, encoder_stride, skip_digits, silence_threshold)
    features = _prepared_features(processor.feature_extractor)
    settings = json.dumps(
        [
            processor.tokenizer.vocab,
            processor.feature_extractor.to_dict(),
            max_seconds,
            encoder_stride,
            skip_digits,
            silence_threshold,
        ],
        sort_keys=True,
        default=str,
    )
    report = SkipReport()
    prepared: dict[str, Dataset] = {}
    for split, part in splits.items():
        missing = [c for c in ("audio", *_KEPT_COLUMNS) if c not in part.column_names]
        if missing:
            raise ValueError(f"prepare_dataset: split {split or 'dataset'!r} lacks column(s) {', '.join(missing)}")
        if len(part) == 0:
            raise ValueError(f"prepare_dataset: split {split or 'dataset'!r} has no rows")
        fingerprint = hashlib.sha256(f"{part._fingerprint}{settings}".encode()).hexdigest()[:16]
        cache_file = None
        if cache_dir is not None:
            Path(cache_dir).mkdir(parents=True, exist_ok=True)
            cache_file = str(Path(cache_dir) / f"prepared-{split or 'dataset'}-{fingerprint}.arrow")
        mapped = part.map(
            preparer,
            batched=True,
            batch_size=batch_size,
            num_proc=num_proc,
            features=features,
            remove_columns=[c for c in part.column_names if c not in _KEPT_COLUMNS],
            new_fingerprint=fingerprint,
            cache_file_name=cache_file,
            desc=f"prepare {split}".strip(),
        )
        info = mapped.select_columns(["path", "language", "_skip_reason", "_skip_detail", "_oov"]).to_dict()
        for name, language, reason, detail in zip(
            info["path"], info["language"], info["_skip_reason"], info["_skip_detail"]
        ):
            if reason:
                report.add(name, reason, detail, language, split)
        report.oov_chars.update(Counter("".join(info["_oov"])))
        kept = mapped.filter(lambda reasons: [not r for r in reasons], input_columns="_skip_reason", batched=True)
        prepared[split] = kept.remove_columns(["_skip_reason", "_skip_detail", "_oov"])
        report.kept[split or "dataset"] = len(prepared[split])
    for skipped in report.skipped:
        logger.warning(
            "skipped %s (%s%s)", skipped.path, skipped.reason, f": {skipped.detail}" if skipped.detail else ""
        )
    if report_path is not None:
        report.write_json(report_path)
    result = DatasetDict(prepared) if isinstance(dataset, DatasetDict) else prepared[""]
    return result, report


def _check_languages(splits: dict[str, Dataset] | DatasetDict, tokenizer: Any) -> None:
    if getattr(tokenizer, "target_lang", None) is None:
        return
    languages = set()
    for part in splits.values():
        languages.update(part.unique("language"))
    unknown = sorted(languages - set(tokenizer.vocab))
    if unknown:
        raise ValueError(
            f"language(s) {', '.join(unknown)} have no vocabulary in the processor; "
            f"allowed values: {', '.join(sorted(tokenizer.vocab))}"
        )


def _prepared_features(feature_extractor: Any) -> Features:
    features = FeatureType.of(feature_extractor)
    spec: dict[str, Any] = {name: Value("string") for name in _KEPT_COLUMNS}
    spec[features.input_name] = features.dataset_feature()
    spec.update(
        labels=List(Value("int32")),
        input_length=Value("int32"),
        duration=Value("float32"),
        text=Value("string"),
        _skip_reason=Value("string"),
        _skip_detail=Value("string"),
        _oov=Value("string"),
    )
    return Features(spec)
