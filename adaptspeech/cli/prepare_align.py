"""``adaptspeech prepare align``: long recordings + their transcripts -> training clips in the Common Voice layout.

The parser imports nothing heavy; the run imports torch, the model and the aligner (:mod:`adaptspeech.alignment`).
"""

from __future__ import annotations

import argparse

from .common import CommandError, _finite_float, _non_negative_float, _positive_float, _positive_int


def add_align(corpora: argparse._SubParsersAction) -> None:
    """Register ``prepare align`` under ``prepare``'s subcommands."""
    align = corpora.add_parser(
        "align",
        help="cut long recordings into training clips by aligning their transcripts (CTC segmentation)",
        description="Align each line of a transcript to its recording with a CTC model's posteriors "
        "(ctc-segmentation), write the kept lines as 16 kHz clips in the Common Voice layout (OUT/<language>/clips, "
        "train.tsv: `prepare common-voice --root OUT --splits train` reads it) with alignments.tsv (source, "
        "start, end, score, CER of the model's decoding) and align_report.json (kept / dropped by reason). "
        "A folder of recordings is resumed where an interrupted run stopped.",
    )
    source = align.add_mutually_exclusive_group(required=True)
    source.add_argument("--audio", metavar="REC", help="one recording (wav, flac, mp3, ogg)")
    source.add_argument("--audio-dir", metavar="DIR", help="a folder of recordings, each with DIR/REC.txt (or "
                        "--text-dir)")
    align.add_argument("--text", metavar="REC.txt", help="the transcript of --audio: one segment per line")
    align.add_argument("--text-dir", metavar="DIR", help="the transcripts of --audio-dir (default: --audio-dir)")
    align.add_argument("--model", required=True, metavar="DIR",
                       help="a CTC model folder of `adaptspeech train` (with the language's adapter) or a transformers "
                       "CTC checkpoint folder")
    align.add_argument("--language", required=True, help="the language code of the recordings")
    align.add_argument("--out", required=True, help="output folder (an earlier output is kept unless --overwrite)")
    align.add_argument("--overwrite", action="store_true", help="replace an earlier output in --out")
    align.add_argument("--oov", choices=("romanize", "star"), default="romanize",
                       help="characters outside the model's alphabet: romanised with uroman (default), or a star that "
                       "matches any character")
    align.add_argument("--split-sentences", action="store_true", help="also cut lines at sentence ends (. ! ?)")
    align.add_argument("--min-score", type=_finite_float, default=-2.0,
                       help="drop lines with a lower alignment score (default -2, NeMo's)")
    align.add_argument("--max-cer", type=_finite_float, default=30.0,
                       help="drop lines whose CER (%%) of the model's decoding is higher (default 30)")
    align.add_argument("--fold-cer", action="store_true",
                       help="compare the decoding with the line without diacritics and case (an aligner of a "
                       "neighbouring language that writes e for ě, l for ľ)")
    align.add_argument("--edge-pad", type=_non_negative_float, default=0.02, metavar="SECONDS",
                       help="seconds of pause kept on each side of a line's speech, at most half the pause to its "
                       "neighbour (default 0.02)")
    align.add_argument("--min-seconds", type=_positive_float, default=1.0, help="drop shorter clips (default 1)")
    align.add_argument("--max-seconds", type=_positive_float, default=20.0, help="drop longer clips (default 20)")
    align.add_argument("--chars-per-second", type=_rate_range, default=(2.0, 40.0), metavar="MIN,MAX",
                       help="drop clips whose characters per second lie outside (default 2,40)")
    align.add_argument("--min-matched", type=_fraction, default=0.5,
                       help="refuse a recording whose lines reach --min-score in a smaller fraction (a transcript of "
                       "another recording; default 0.5)")
    align.add_argument("--block-labels", type=_positive_int, default=4000,
                       help="labels aligned at once (memory: 8000 x this x 4 bytes; default 4000)")
    align.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    align.set_defaults(func=run_prepare_align)


def _fraction(text: str) -> float:
    value = _finite_float(text)
    if not 0.0 <= value <= 1.0:
        raise argparse.ArgumentTypeError(f"{text}: a fraction between 0 and 1")
    return value


def _rate_range(text: str) -> tuple[float, float]:
    parts = text.split(",")
    try:
        low, high = (float(p) for p in parts)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text}: expected MIN,MAX characters per second") from None
    if not 0 <= low < high:
        raise argparse.ArgumentTypeError(f"{text}: need 0 <= MIN < MAX")
    return low, high


def run_prepare_align(args: argparse.Namespace) -> int:
    from pathlib import Path

    from ..alignment.corpus import AlignSettings, align_corpus, recording_pairs, report_summary
    from ..alignment.filters import AlignmentFilters
    from ..alignment.posteriors import load_alignment_model
    from ..progress import library_progress_bars

    if args.audio is not None:
        if args.text is None:
            raise CommandError("--audio needs --text (its transcript)")
        if args.text_dir is not None:
            raise CommandError("--text-dir goes with --audio-dir; give --audio its --text")
        pairs = [(Path(args.audio), Path(args.text))]
    else:
        if args.text is not None:
            raise CommandError("--text goes with --audio; a folder's transcripts are in --text-dir (or --audio-dir)")
        pairs = recording_pairs(args.audio_dir, args.text_dir)
    filters = AlignmentFilters(args.min_score, args.max_cer, args.min_seconds, args.max_seconds,
                               *args.chars_per_second, fold_cer=args.fold_cer)
    settings = AlignSettings(filters, args.oov, args.split_sentences, args.min_matched, args.edge_pad,
                             args.block_labels)
    with library_progress_bars(enabled=not args.no_progress):
        model = load_alignment_model(args.model, args.language)
        report = align_corpus(model, pairs, args.out, settings, overwrite=args.overwrite,
                              progress=not args.no_progress, stop_on_error=args.audio is not None)
    print(f"{report_summary(report)} -> {Path(args.out) / args.language}")
    for name, reason in report["recordings_refused"].items():
        print(f"refused {name}: {reason}")
    return 1 if report["recordings_refused"] else 0
