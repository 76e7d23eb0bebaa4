"""``adaptspeech prepare``: build corpora and prepared datasets."""

from __future__ import annotations

import argparse
import json

from ..runtime.features import NORMALIZATIONS
from .common import _float_range, _positive_float, _positive_int
from .names import FEATURE_TYPE_NAMES
from .prepare_align import add_align

# ---- prepare -------------------------------------------------------------------------------------------


_FEATURE_TYPE_NAMES = FEATURE_TYPE_NAMES
"""``--feature-type``'s values: the feature-type registry's names, from a table that imports no torch."""
_DEFAULT_HELP = "waveform, what a pretrained checkpoint's feature extractor computes"


def _add_prepare(subparsers: argparse._SubParsersAction) -> None:
    prepare = subparsers.add_parser("prepare", help="build corpora and prepared datasets")
    corpora = prepare.add_subparsers(
        dest="corpus", metavar="{synthetic,common-voice,audio-folder,common-voice-other,align}", required=True
    )

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
    synth.add_argument(
        "--unlabelled-clips", type=_non_negative_int, default=0, metavar="N",
        help="also N clips per language without a transcript (self-training's pool): new sentences, training voices "
        "and words only, in other.tsv with empty sentences; what they say goes to unlabelled_sentences.tsv, read only "
        "to measure pseudo-label error (default 0)",
    )
    synth.add_argument("--unlabelled-languages", default=None,
                       help="comma-separated languages that get the unlabelled clips (default: all)")
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
        "--feature-type", choices=_FEATURE_TYPE_NAMES, default=None, metavar="TYPE",
        help=f"model input: %(choices)s (default {_DEFAULT_HELP})",
    )
    cv.add_argument(
        "--normalization", choices=NORMALIZATIONS, default="utterance",
        help="feature normalisation: each utterance over itself (default), or global: the training split's per-bin "
             "mean and variance (fbank; computed here, saved with the processor; what a stream reproduces exactly)",
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
    _add_overwrite(cv, "prepared folder")
    cv.set_defaults(func=_run_prepare_common_voice)

    folder = corpora.add_parser(
        "audio-folder",
        help="an untranscribed pool from a folder of wav / flac / mp3 / ogg files (recursive), for pseudo-labelling",
        description="Decode every audio file under --root, cut recordings longer than --max-segment at pauses into "
        "utterance-sized segments (each row keeps its source file and offsets), compute the model inputs and write "
        "a pool folder (dataset/, feature_extractor/, pool_report.json). Unreadable, empty, silent and too-short "
        "files are skipped and counted by reason.",
    )
    folder.add_argument("--root", required=True, help="the folder of audio files")
    _add_pool_options(folder)
    folder.set_defaults(func=_run_prepare_pool)

    other = corpora.add_parser(
        "common-voice-other",
        help="an untranscribed pool from a Common Voice release's other.tsv (clips not validated; sentences dropped)",
        description="The clips of <root>/<language>/other.tsv as an untranscribed pool (their sentences are not "
        "kept); the release's own dev / test clips and sentences are held out: a pool sharing either is refused "
        "(or, with --drop-overlapping, those clips are dropped).",
    )
    other.add_argument("--root", required=True, help="a Common Voice release folder (or a synthetic corpus)")
    _add_pool_options(other)
    other.set_defaults(func=_run_prepare_pool, common_voice_other=True)
    add_align(corpora)


def _add_overwrite(parser: argparse.ArgumentParser, what: str) -> None:
    parser.add_argument("--overwrite", action="store_true",
                        help=f"replace the earlier {what} in --out (without it, one is refused; a folder of other "
                        "files always is)")


def _non_negative_int(text: str) -> int:
    return 0 if text.strip() == "0" else _positive_int(text)


def _add_pool_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--language", required=True, help="the language code of the audio")
    parser.add_argument("--out", required=True, help="the pool folder (created; an earlier pool is kept unless "
                        "--overwrite)")
    _add_overwrite(parser, "pool")
    kind = parser.add_mutually_exclusive_group()
    kind.add_argument(
        "--feature-type", choices=_FEATURE_TYPE_NAMES, default=None, metavar="TYPE",
        help=f"model input: %(choices)s (default {_DEFAULT_HELP}); it must be what the labelling model reads",
    )
    kind.add_argument("--processor", default=None, metavar="DIR",
                      help="take the feature extractor of this model or prepared processor folder")
    parser.add_argument("--max-segment", type=_positive_float, default=12.0, metavar="SECONDS",
                        help="longer recordings are cut at pauses into segments of at most this (default 12)")
    parser.add_argument("--min-segment", type=_positive_float, default=0.5, metavar="SECONDS",
                        help="shorter segments (and files) are dropped (default 0.5)")
    parser.add_argument("--held-out", default=None, metavar="DIR",
                        help="refuse clips sharing audio or a sentence with the dev / test splits of this Common Voice "
                        "or prepared folder (common-voice-other: default --root)")
    parser.add_argument("--drop-overlapping", action="store_true",
                        help="drop the clips that share audio or a sentence with dev / test instead of refusing")
    parser.add_argument("--no-progress", action="store_true", help="hide the progress bar")


def _run_prepare_synthetic(args: argparse.Namespace) -> int:
    from ..data.synthetic import DEFAULT_LANGUAGES, build_synthetic_corpus

    settings = {}
    if args.noise_snr_db is not None:
        settings["noise_snr_db"] = args.noise_snr_db
    if args.sample_rate is not None:
        settings["sample_rate"] = args.sample_rate
    if args.unlabelled_clips:
        settings["unlabelled_clips"] = args.unlabelled_clips
        if args.unlabelled_languages:
            settings["unlabelled_languages"] = [x.strip() for x in args.unlabelled_languages.split(",") if x.strip()]
    elif args.unlabelled_languages:
        raise ValueError("--unlabelled-languages needs --unlabelled-clips N")
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
    if summary.get("unlabelled_clips"):
        pools = ", ".join(f"{lang} {n}" for lang, n in summary["unlabelled_clips"].items())
        print(f"unlabelled clips (other.tsv; their sentences in unlabelled_sentences.tsv): {pools}")
    return 0


def _run_prepare_common_voice(args: argparse.Namespace) -> int:
    from ..data.feature_types import DEFAULT_FEATURE_TYPE
    from ..data.prepared_corpus import prepare_corpus

    splits = [s.strip() for s in args.splits.split(",") if s.strip()]
    result = prepare_corpus(
        args.root,
        args.languages,
        args.out,
        splits=splits,
        feature_type=args.feature_type or DEFAULT_FEATURE_TYPE,
        normalization=args.normalization,
        per_language_vocab=args.per_language_vocab,
        train_subset=args.train_subset,
        subset_exclude_splits=[x.strip() for x in args.subset_exclude_splits.split(",") if x.strip()],
        seed=args.seed,
        max_seconds=args.max_seconds,
        skip_digits=args.skip_digits,
        num_proc=args.num_proc,
        overwrite=args.overwrite,
    )
    rows = {split: len(part) for split, part in result.dataset.items()}
    print(f"prepared {json.dumps(rows)} -> {result.dataset_dir}; processor -> {result.processor_dir}")
    print(result.report.summary())
    return 0


def _run_prepare_pool(args: argparse.Namespace) -> int:
    from ..data.feature_types import DEFAULT_FEATURE_TYPE
    from ..data.pool_overlap import held_out
    from ..data.pool_segments import SegmentSettings
    from ..data.pools import feature_extractor_for, prepare_audio_folder, prepare_common_voice_other
    from ..progress import library_progress_bars

    cv_other = getattr(args, "common_voice_other", False)
    extractor = feature_extractor_for(args.feature_type or DEFAULT_FEATURE_TYPE, args.processor)
    held_source = args.held_out or (args.root if cv_other else None)
    held = held_out(held_source, args.language) if held_source else None
    build = prepare_common_voice_other if cv_other else prepare_audio_folder
    with library_progress_bars(enabled=not args.no_progress):
        pool = build(args.root, args.language, args.out, extractor,
                     segments=SegmentSettings(max_segment_s=args.max_segment, min_segment_s=args.min_segment),
                     held=held, drop_overlapping=args.drop_overlapping, progress=not args.no_progress,
                     overwrite=args.overwrite)
    summary = pool.summary
    skipped = ", ".join(f"{reason}={n}" for reason, n in sorted(summary["skipped"].items())) or "none"
    print(f"pool of {summary['segments']} segments ({summary['hours'] * 60:.1f} min) from {summary['files_used']} of "
          f"{summary['files']} files ({summary['files_split']} cut at pauses); skipped: {skipped} -> {pool.out_dir}")
    return 0
