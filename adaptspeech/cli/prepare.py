"""``adaptspeech prepare``: build corpora and prepared datasets."""

from __future__ import annotations

import argparse
import json

from ..data.feature_types import DEFAULT_FEATURE_TYPE, FEATURE_TYPES
from .common import _float_range, _positive_float, _positive_int

# ---- prepare -------------------------------------------------------------------------------------------


def _add_prepare(subparsers: argparse._SubParsersAction) -> None:
    prepare = subparsers.add_parser("prepare", help="build corpora and prepared datasets")
    corpora = prepare.add_subparsers(dest="corpus", metavar="{synthetic,common-voice}", required=True)

    synth = corpora.add_parser(
        "synthetic",
        help="synthesise an offline multilingual corpus (wordfreq + espeak-ng) in the Common Voice layout",
        description="Synthesise sentences from wordfreq word lists with espeak-ng; write clips/*.mp3 and "
        "train/dev/test.tsv per language. Test voices and test words are held out of train and dev. "
        "Resumable: clips already written are kept.",
    )
    synth.add_argument("--out", required=True, help="corpus folder (created; resumed if it exists)")
    synth.add_argument(
        "--languages", default=None, help="comma-separated codes (default: ro,cs,pl,sl,sk,it,es,pt,nl,de)"
    )
    synth.add_argument(
        "--clips-per-language", type=_positive_int, default=1000, help="clips per language (default 1000)"
    )
    synth.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    synth.add_argument("--workers", type=_positive_int, default=2, help="synthesis processes (default 2)")
    synth.add_argument(
        "--noise-snr-db", type=_float_range, default=None, help="add white noise at an SNR in MIN,MAX dB"
    )
    synth.add_argument(
        "--sample-rate",
        type=_positive_int,
        default=None,
        help="sampling rate of the clips (default 16000; 22050 keeps espeak-ng's)",
    )
    synth.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    synth.set_defaults(func=_run_prepare_synthetic)

    cv = corpora.add_parser(
        "common-voice",
        help="prepare a Common Voice folder (or Hub id): decode, normalise, vocabulary, processor, skip report",
        description="Load Common Voice splits, build the character vocabulary from the training text, save a "
        "Wav2Vec2Processor and the prepared DatasetDict under --out, and report skipped clips.",
    )
    cv.add_argument(
        "--root", required=True, help="Common Voice release folder, synthetic corpus folder or Hub dataset id"
    )
    cv.add_argument("--languages", required=True, help="comma-separated language codes")
    cv.add_argument("--out", required=True, help="output folder (processor/, dataset/, skip_report.json)")
    cv.add_argument(
        "--splits", default="train,dev,test", help="comma-separated splits; the first builds the vocabulary"
    )
    cv.add_argument(
        "--feature-type", choices=FEATURE_TYPES.names(), default=DEFAULT_FEATURE_TYPE,
        help=f"model input (default {DEFAULT_FEATURE_TYPE})",
    )
    cv.add_argument("--per-language-vocab", action="store_true", help="one vocabulary per language (nested, MMS-style)")
    cv.add_argument("--train-subset", default=None, help="low-resource budget per language, e.g. 30min, 1h, 200utt")
    cv.add_argument(
        "--subset-exclude-splits",
        default="test",
        help="the training subset avoids the speakers of these splits (default test; dev,test for a validated pool)",
    )
    cv.add_argument("--seed", type=int, default=0, help="seed of the subset (default 0)")
    cv.add_argument("--max-seconds", type=_positive_float, default=20.0, help="skip longer clips (default 20)")
    cv.add_argument("--skip-digits", action="store_true", help="skip sentences containing digits")
    cv.add_argument("--num-proc", type=_positive_int, default=None, help="processes for datasets.map")
    cv.set_defaults(func=_run_prepare_common_voice)


def _run_prepare_synthetic(args: argparse.Namespace) -> int:
    from ..data.synthetic import DEFAULT_LANGUAGES, build_synthetic_corpus

    settings = {}
    if args.noise_snr_db is not None:
        settings["noise_snr_db"] = args.noise_snr_db
    if args.sample_rate is not None:
        settings["sample_rate"] = args.sample_rate
    summary = build_synthetic_corpus(
        args.out,
        args.languages or DEFAULT_LANGUAGES,
        args.clips_per_language,
        seed=args.seed,
        num_workers=args.workers,
        progress=not args.no_progress,
        **settings,
    )
    print(
        f"wrote {summary['clips_written']} clips (kept {summary['clips_kept']} already on disk) for "
        f"{len(summary['languages'])} languages in {summary['synthesis_seconds']:.1f} s: "
        f"{summary['clips_per_second']:.1f} clips/s with {summary['num_workers']} workers; "
        f"{summary['audio_hours']:.2f} h of audio; total {summary['seconds']:.1f} s -> {summary['out_dir']}"
    )
    print(f"test voices (not in train/dev): {', '.join(summary['test_voices'])}")
    return 0


def _run_prepare_common_voice(args: argparse.Namespace) -> int:
    from ..data.prepared_corpus import prepare_corpus

    splits = [s.strip() for s in args.splits.split(",") if s.strip()]
    result = prepare_corpus(
        args.root,
        args.languages,
        args.out,
        splits=splits,
        feature_type=args.feature_type,
        per_language_vocab=args.per_language_vocab,
        train_subset=args.train_subset,
        subset_exclude_splits=[x.strip() for x in args.subset_exclude_splits.split(",") if x.strip()],
        seed=args.seed,
        max_seconds=args.max_seconds,
        skip_digits=args.skip_digits,
        num_proc=args.num_proc,
    )
    rows = {split: len(part) for split, part in result.dataset.items()}
    print(f"prepared {json.dumps(rows)} -> {result.dataset_dir}; processor -> {result.processor_dir}")
    print(result.report.summary())
    return 0
