"""``adaptspeech transcribe``: decode audio files with any head and decoder."""

from __future__ import annotations

import argparse
import json
import os
import stat
import sys
from typing import Any

from ..inference import (
    CUT_COSTS,
    DEFAULT_CHUNK_LENGTH_S,
    DEFAULT_NORM_WINDOW_S,
    DEFAULT_SEARCH_LENGTH_S,
    DEFAULT_STRIDE_LENGTH_S,
    LONG_FORM_SPLITS,
)
from ..inference.long_form.silero import DEFAULT_THRESHOLD
from ..inference.long_form.speech_finders import (
    DEFAULT_SPEECH_FINDER,
    SILERO_MIN_PAUSE_S,
    SPEECH_FINDERS,
    SpeechFinderSettings,
)
from ..runtime.command import add_onnx_options, escape_field, onnx_decoding, split_settings, transcribe_files
from ..runtime.pauses import DEFAULT_MIN_PAUSE_S, DEFAULT_SPEECH_PAD_S
from .common import (
    PROG,
    CommandError,
    _add_model_options,
    _check_vocabulary,
    _decoder_setup,
    _load_model,
    _non_negative_float,
    _positive_float,
    _resolve_device,
)
from .lid import add_lid_options, language_identifier, routing_options

# ---- transcribe ----------------------------------------------------------------------------------------------


def _add_transcribe(subparsers: argparse._SubParsersAction) -> None:
    transcribe = subparsers.add_parser(
        "transcribe",
        help="transcribe audio files (wav, flac, mp3, ogg) of any length with any head and decoder",
        description="Decode audio files with a model saved by `adaptspeech train` and the processor saved beside it; "
        "prints PATH<TAB>TEXT per file (one JSON object per file with --timestamps); a backslash, tab, newline or "
        "carriage return in PATH or TEXT is written as \\\\, \\t, \\n or \\r, so that each file is one line of two "
        "fields. AUDIO '-' (or /dev/stdin, or another pipe) reads the audio from standard input. Audio is decoded "
        "with soundfile, mixed to mono and resampled with soxr. CTC decoding of a recording longer than "
        "--chunk-length runs the encoder on one speech region at a time, cut at pauses (--split-by pauses, "
        "--min-pause), or on overlapping chunks (--split-by chunks, --stride-length), so a long recording takes "
        "bounded memory. A file that cannot be read (missing, a folder, empty, undecodable, non-finite, silent) or "
        "has nothing to decode (fewer samples than one output frame needs: the clips `prepare` calls too short) is "
        "reported on stderr in one line and gets no output line, and the others are still transcribed; the exit "
        "status is then 1. Attention and joint decoding cut a recording longer than --chunk-length into segments at "
        "pauses (--cut-by, --search-length) and decode them one by one.",
    )
    transcribe.add_argument("--model", default=None, metavar="DIR", help="a model folder saved by `adaptspeech train`")
    transcribe.add_argument("--onnx", default=None, metavar="DIR",
                            help="instead of --model: a folder written by `adaptspeech export`, run on onnxruntime "
                            "without PyTorch (CTC decoding: --method ctc_greedy | ctc_beam, --lm, --precision, "
                            "--beam-size, --threads; a long recording split as --split-by, --chunk-length, "
                            "--stride-length, --min-pause, --speech-pad say)")
    transcribe.add_argument("audio", nargs="+", metavar="AUDIO",
                            help="audio files; '-' (or /dev/stdin) reads one from standard input")
    transcribe.add_argument(
        "--language",
        default=None,
        help="the language's adapter to use (needed when the model routes several languages; ignored with fusion); "
        "auto: identify each file's language and route it to its adapter (JSON output with the language and its "
        "probability; docs/lid.md)",
    )
    transcribe.add_argument(
        "--chunk-length", type=_positive_float, default=DEFAULT_CHUNK_LENGTH_S, metavar="SECONDS",
        help=f"seconds of audio per encoder call (default {DEFAULT_CHUNK_LENGTH_S:g}); attention and joint decoding "
        "cut longer recordings into segments of at most this length",
    )
    transcribe.add_argument(
        "--stride-length", type=_non_negative_float, default=DEFAULT_STRIDE_LENGTH_S, metavar="SECONDS",
        help=f"seconds of context on each side of a chunk (default {DEFAULT_STRIDE_LENGTH_S:g})",
    )
    transcribe.add_argument(
        "--split-by", choices=LONG_FORM_SPLITS, default="pauses",
        help="a recording longer than --chunk-length: one speech region at a time, cut at pauses (pauses, default; "
        "speech without a pause longer than --chunk-length is cut inside it), or CTC chunks overlapping by "
        "--stride-length / attention segments cut at the quietest frame (chunks)",
    )
    transcribe.add_argument(
        "--min-pause", type=_positive_float, default=None, metavar="SECONDS",
        help=f"--split-by pauses: shortest pause between two speech regions (default {DEFAULT_MIN_PAUSE_S:g} for the "
        f"energy rule, {SILERO_MIN_PAUSE_S:g} for silero)",
    )
    transcribe.add_argument(
        "--speech-finder", choices=SPEECH_FINDERS.names(), default=None,
        help=f"where the speech is: the energy rule (energy), silero-vad (silero; pip install 'adaptspeech[vad]') or "
        "the energy rule unless it finds no pause and silero does (auto); for --split-by pauses (default "
        f"{DEFAULT_SPEECH_FINDER}) and, with --stream --endpoint-silence, for endpointing (silero; default: the best "
        "path's blanks)",
    )
    transcribe.add_argument(
        "--vad-threshold", type=float, default=None, metavar="P",
        help=f"--speech-finder silero: the speech probability that starts speech (default {DEFAULT_THRESHOLD:g}; "
        f"speech ends below P - 0.15)",
    )
    transcribe.add_argument(
        "--speech-pad", type=_non_negative_float, default=DEFAULT_SPEECH_PAD_S, metavar="SECONDS",
        help=f"--split-by pauses: seconds of pause kept on each side of a speech region (default "
        f"{DEFAULT_SPEECH_PAD_S:g})",
    )
    transcribe.add_argument(
        "--cut-by", choices=CUT_COSTS, default="energy",
        help="attention / joint decoding: cut a long recording at its quietest frame (energy, default) or where the "
        "CTC head is most sure of a blank (ctc_blank, models with a CTC head)",
    )
    transcribe.add_argument(
        "--search-length", type=_positive_float, default=DEFAULT_SEARCH_LENGTH_S, metavar="SECONDS",
        help=f"attention / joint decoding: seconds before a segment's longest end searched for the cut (default "
        f"{DEFAULT_SEARCH_LENGTH_S:g})",
    )
    transcribe.add_argument(
        "--norm-window", type=_positive_float, default=DEFAULT_NORM_WINDOW_S, metavar="SECONDS",
        help="a recording longer than one encoder call: each chunk / segment is normalised with a sliding window of "
        f"this many seconds inside it (default {DEFAULT_NORM_WINDOW_S:g}; see docs/inference.md)",
    )
    transcribe.add_argument(
        "--timestamps", choices=("word", "char"), default=None,
        help="word or character start / end times (CTC greedy, or --lm for words); output: one JSON object per file",
    )
    transcribe.add_argument(
        "--confidence", action="store_true",
        help="score every word and the file (CTC posteriors; with --lm the N-best of the LM beam search): output one "
        "JSON object per file with \"confidence\" and \"words\" [{text, start, end, confidence}] (--method ctc_greedy "
        "or --lm)",
    )
    _add_model_options(transcribe)
    add_onnx_options(transcribe.add_argument_group("--onnx"), decoding=False)
    add_lid_options(transcribe)
    transcribe.set_defaults(func=_run_transcribe, option_defaults={
        action.dest: action.default for action in transcribe._actions
        if action.option_strings and action.dest not in _EITHER_PATH
    })


STDIN_NAMES = ("-", "/dev/stdin")
"""AUDIO names that read standard input."""


def _stream_bytes(path: str) -> bytes | None:
    """The bytes of an AUDIO that is a stream rather than a file (``-``: standard input; a pipe or socket, such as
    ``/dev/stdin`` under ``cat x.wav |``; ``/dev/stdin`` on a terminal), read once; ``None`` for a file, which
    :func:`~adaptspeech.data.load_audio` opens itself (soundfile cannot seek in a pipe). Other character devices
    (``/dev/zero``) are left to it: they have no end."""
    if path == "-":
        return sys.stdin.buffer.read()
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return None
    if stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode) or (stat.S_ISCHR(mode) and path in STDIN_NAMES):
        with open(path, "rb") as stream:
            return stream.read()
    return None


def speech_finder_settings(args: argparse.Namespace) -> SpeechFinderSettings:
    """``--speech-finder`` and its settings, checked once: a setting the finder does not read, a threshold outside
    (0.15, 1) or silero without the silero-vad package is one line (CommandError)."""
    name = args.speech_finder or DEFAULT_SPEECH_FINDER
    if args.vad_threshold is not None and "vad_threshold" not in SPEECH_FINDERS.get(name).options:
        readers = [finder for finder in SPEECH_FINDERS if "vad_threshold" in SPEECH_FINDERS.get(finder).options]
        raise CommandError(f"--vad-threshold: read by --speech-finder {', '.join(readers)} only, not {name}")
    try:
        return SpeechFinderSettings(name, args.min_pause, args.speech_pad,
                                    vad_threshold=DEFAULT_THRESHOLD if args.vad_threshold is None else
                                    args.vad_threshold)
    except (ValueError, ImportError) as error:
        raise CommandError(f"--speech-finder {name}: {error}") from None


def _model_language(model: Any, language: str | None, where: str) -> Any:
    """``lang_ids`` ``[1]`` for a model routing several languages (``--language`` required), else None; a single-
    language choice is made active."""
    import torch

    from ..data.collator import routes_languages

    config = model.config
    if language is not None:
        if language not in model.adapter_languages:
            raise CommandError(
                f"--language {language!r}: the model has no adapter for it; languages with one: "
                f"{', '.join(model.adapter_languages) or '(none)'}"
            )
        if not config.fusion_active and not routes_languages(model):
            model.set_active_languages([language])
    elif routes_languages(model):
        routed = ", ".join(config.active_languages)
        raise CommandError(f"the model routes several languages ({routed}): pass --language")
    if language is not None and routes_languages(model):
        return torch.tensor([model.language_to_id[language]])
    return None


_EITHER_PATH = ("help", "model", "onnx", "beam_size")
_ONNX_ONLY = ("precision", "decoder", "threads")
_BOTH_PATHS = ("chunk_length", "stride_length", "split_by", "min_pause", "speech_pad", "method", "lm", "alpha", "beta")
"""How a long recording is split (the ONNX runtime splits it as the PyTorch path does, CTC decoding) and decoded (the
one vocabulary of :mod:`adaptspeech.runtime.decoding_methods`: ``--method``, ``--lm`` and its weights)."""


def _check_path_options(args: argparse.Namespace) -> None:
    """Refuse an option that the chosen path (``--model`` or ``--onnx``) would ignore, naming it."""
    given = [dest for dest, default in args.option_defaults.items() if getattr(args, dest) != default]
    chosen, wrong = ("--onnx", [d for d in given if d not in _ONNX_ONLY + _BOTH_PATHS]) if args.onnx is not None else \
        ("--model", [d for d in given if d in _ONNX_ONLY])
    if wrong:
        names = ", ".join("--" + dest.replace("_", "-") for dest in wrong)
        raise CommandError(f"{names}: not used with {chosen} (the other path's option); drop it or use the other path")


def _run_transcribe(args: argparse.Namespace) -> int:
    if (args.model is None) == (args.onnx is None):
        raise CommandError("pass --model DIR (a trained model) or --onnx DIR (an export), one of them")
    _check_path_options(args)
    if args.onnx is not None:  # onnxruntime and numpy alone: nothing below this line is imported
        method, lm = onnx_decoding(args, prog=PROG)
        return transcribe_files(args.onnx, args.audio, args.precision, method, args.beam_size, args.threads,
                                prog=PROG, lm=lm, alpha=args.alpha, beta=args.beta, **split_settings(args))
    from tqdm.auto import tqdm

    from ..data import BadClipError, feature_type_of, feature_type_of_model, load_audio
    from ..inference.language_id.routing import transcribe_auto
    from ..inference.transcriber import LongFormSettings, check_transcription, transcribe

    finder = speech_finder_settings(args)
    device = _resolve_device(args.device)
    model, processor = _load_model(args.model)
    if processor is None:
        raise CommandError(
            f"--model {args.model}: no processor saved beside the model (tokenizer_config.json, "
            "preprocessor_config.json); folders written by `adaptspeech train` have one"
        )
    _check_vocabulary(model, processor, args.model)
    made, read = feature_type_of(processor.feature_extractor), feature_type_of_model(model)
    if made != read:
        raise CommandError(f"--model {args.model}: the processor makes {made} features but the model reads {read} ones")
    identifier = language_identifier(args, model, processor)
    routing = routing_options(args, identifier)
    lang_ids = None if identifier is not None else _model_language(model, args.language, args.model)
    method, options, lm_decoder = _decoder_setup(args, model, processor)
    long_form = LongFormSettings(args.chunk_length, args.stride_length, split_by=args.split_by, cut_by=args.cut_by,
                                 search_length_s=args.search_length, norm_window_s=args.norm_window,
                                 min_pause_s=finder.min_pause_s, speech_pad_s=args.speech_pad,
                                 speech_finder=finder.finder, vad_threshold=finder.vad_threshold)
    check_transcription(model, method, long_form, args.timestamps, lm_decoder, args.confidence)  # before any file
    stdin = [path for path in args.audio if path in STDIN_NAMES]
    if len(stdin) > 1:
        raise CommandError(f"AUDIO {' and '.join(map(repr, stdin))}: standard input can be read once; give it once")
    model.to(device)
    failures = 0
    for path in tqdm(args.audio, desc="transcribing", disable=args.no_progress or len(args.audio) < 2, leave=False):
        try:
            waveform = load_audio(path, int(processor.feature_extractor.sampling_rate), data=_stream_bytes(path))
        except BadClipError as err:
            print(f"{PROG}: error: {escape_field(path)}: {' '.join(str(err)[len(err.path) + 2:].split())}",
                  file=sys.stderr)
            failures += 1
            continue
        result = (transcribe if identifier is None else transcribe_auto)(
            model, processor, [waveform], **routing, method=method, chunk_length_s=args.chunk_length,
            stride_length_s=args.stride_length, timestamps=args.timestamps, lm_decoder=lm_decoder,
            lang_ids=lang_ids, cut_by=args.cut_by, search_length_s=args.search_length,
            norm_window_s=args.norm_window, split_by=args.split_by, min_pause_s=finder.min_pause_s,
            speech_pad_s=args.speech_pad, confidence=args.confidence, speech_finder=finder.finder,
            vad_threshold=finder.vad_threshold, **options,
        )[0]
        if "skipped" in result.extra:
            print(f"{PROG}: error: {escape_field(path)}: no text: {result.extra['skipped']}", file=sys.stderr)
            failures += 1
            continue
        if args.timestamps is None and not args.confidence and identifier is None:
            print(f"{escape_field(path)}\t{escape_field(result.text)}", flush=True)
        else:
            line: dict[str, Any] = {"path": str(path), "text": result.text, "seconds": round(result.seconds, 3)}
            if args.timestamps is not None:
                line["chunks"] = result.chunks
            if args.confidence:
                line.update(confidence=round(result.extra["confidence"], 6), words=result.extra["words"])
            line.update({k: v for k, v in result.extra.items() if k.startswith("language")})
            print(json.dumps(line, ensure_ascii=False), flush=True)
    return 1 if failures else 0
