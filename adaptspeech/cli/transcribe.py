"""``adaptspeech transcribe``: decode audio files with any head and decoder."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from .common import (
    PROG,
    CommandError,
    _add_decoding_options,
    _add_device_option,
    _check_vocabulary,
    _decoding_options,
    _load_model,
    _resolve_device,
)

# ---- transcribe ----------------------------------------------------------------------------------------------


def _add_transcribe(subparsers: argparse._SubParsersAction) -> None:
    transcribe = subparsers.add_parser(
        "transcribe",
        help="transcribe audio files (wav, flac, mp3, ogg) with any head and decoder",
        description="Decode audio files with a model saved by `adaptspeech train` and the processor saved beside it; "
        "prints PATH<TAB>TEXT per file. Audio is decoded with soundfile, mixed to mono and resampled with soxr. A file "
        "that cannot be read (missing, a folder, empty, undecodable, silent) is reported on stderr in one line and "
        "the others are still transcribed; the exit status is then 1.",
    )
    transcribe.add_argument("--model", required=True, metavar="DIR", help="a model folder saved by `adaptspeech train`")
    transcribe.add_argument("audio", nargs="+", metavar="AUDIO", help="audio files")
    transcribe.add_argument(
        "--language",
        default=None,
        help="the language's adapter to use (needed when the model routes several languages; ignored with fusion)",
    )
    _add_decoding_options(transcribe)
    _add_device_option(transcribe)
    transcribe.set_defaults(func=_run_transcribe)


def _transcription_rows(
    paths: list[str], processor: Any, language: str, progress: bool = True
) -> tuple[Any, list[str]]:
    """``(rows, failures)``: a ``datasets.Dataset`` of model inputs for the paths that could be read (in the layout
    of a prepared dataset, with their ``path``), and one line per path that could not (``PATH: reason (detail)``)."""
    from datasets import Dataset
    from tqdm.auto import tqdm

    from ..data import BadClipError, extract_features, load_audio

    rows: dict[str, list] = {"path": [], "language": [], "input_length": []}
    failures: list[str] = []
    for path in tqdm(paths, desc="reading audio", disable=not progress or len(paths) < 2, leave=False):
        try:
            waveform = load_audio(path, int(processor.feature_extractor.sampling_rate))
        except BadClipError as err:
            failures.append(str(err))
            continue
        key, features = extract_features(waveform, processor.feature_extractor)
        rows.setdefault(key, []).append(features)
        rows["path"].append(path)
        rows["language"].append(language)
        rows["input_length"].append(int(features.shape[0]))
    return Dataset.from_dict(rows), failures


def _run_transcribe(args: argparse.Namespace) -> int:
    from ..data import feature_type_of
    from ..evaluation import _routing_languages, feature_type_of_model, transcribe_dataset

    device = _resolve_device(args.device)
    model, processor = _load_model(args.model)
    if processor is None:
        raise CommandError(
            f"--model {args.model}: no processor saved beside the model (tokenizer_config.json, "
            "preprocessor_config.json); folders written by `adaptspeech train` have one"
        )
    _check_vocabulary(model, processor, args.model)
    if feature_type_of(processor.feature_extractor) == "fbank" and feature_type_of_model(model) == "waveform":
        raise CommandError(f"--model {args.model}: the processor makes fbank features but the model reads waveforms")
    language = args.language
    config = model.config
    if language is not None:
        if language not in model.adapter_languages:
            raise CommandError(
                f"--language {language!r}: the model has no adapter for it; languages with one: "
                f"{', '.join(model.adapter_languages) or '(none)'}"
            )
        if not config.fusion_active and not _routing_languages(model):
            model.set_active_languages([language])
    elif _routing_languages(model):
        raise CommandError(
            f"the model routes several languages ({', '.join(config.active_languages)}): pass --language"
        )
    method, options = _decoding_options(args, model)
    model.to(device)
    rows, failures = _transcription_rows(args.audio, processor, language or "", progress=not args.no_progress)
    for line in failures:
        print(f"{PROG}: error: {' '.join(line.split())}", file=sys.stderr)
    if len(rows):
        texts = transcribe_dataset(
            model, rows, processor, method=method, batch_size=args.batch_size, progress=not args.no_progress, **options
        )
        for path, text in zip(rows["path"], texts, strict=True):
            print(f"{path}\t{text}")
    return 1 if failures else 0
