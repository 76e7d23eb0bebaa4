"""``adaptspeech transcribe --stream``: decode audio as a live stream, printing partial and final results as they come.

Output: one JSON object per line, ``{"path", "partial", "seconds"}`` each time the partial text changes, ``{"path",
"segment", "start", "end"}`` for each utterance the endpointer ends (``--endpoint-silence``) and ``{"path", "text",
"seconds", "final": true, "compute_rtf", "final_ms"}`` at the end of each AUDIO. ``--lm DIR`` fuses a word n-gram LM
into the prefix beam search (the folders and tuned weights of ``transcribe --lm``); ``--rescore`` rescores each
utterance's final n-best with the attention (LAS) decoder of a ``ctc_las`` model. ``-`` reads raw 16-bit PCM
(``--sample-rate``, default 16000) or a WAV stream from standard input as it arrives, so a microphone can be piped in
(``arecord -f S16_LE -r 16000 -t raw | adaptspeech transcribe --stream --model DIR -``).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import warnings
from collections.abc import Iterator
from typing import Any

import numpy as np

from .common import PROG, CommandError, _check_vocabulary, _load_model, _positive_float, _positive_int, _resolve_device
from .transcribe import STDIN_NAMES, _model_language, escape_field

#: the default chunk of ``--stream``: 640 ms (16 frames of the fbank Conformer's 40 ms)
DEFAULT_CHUNK_MS = 640.0


def _left_chunks(text: str) -> int:
    value = int(text)
    if value < -1:
        raise argparse.ArgumentTypeError(f"must be -1 (all) or >= 0, got {text}")
    return value


def _add_transcribe_stream(subparsers: argparse._SubParsersAction) -> None:
    """``--stream`` and its settings on the ``transcribe`` parser (added before), whose runner then takes the
    streaming branch when ``--stream`` is given."""
    parser = subparsers.choices["transcribe"]
    group = add_stream_options(parser)
    offline = parser.get_default("func")
    settings = {action.dest: action.default for action in group._group_actions if action.dest != "stream"}

    def run(args: argparse.Namespace) -> int:
        if args.stream:
            if args.onnx is not None:
                raise CommandError("--stream: decodes a --model DIR (PyTorch) as a stream, not an --onnx export")
            return run_stream(args)
        given = [dest for dest, default in settings.items() if getattr(args, dest) != default]
        if given:  # a streaming setting without --stream would be ignored without a word
            names = ", ".join("--" + dest.replace("_", "-") for dest in given)
            raise CommandError(f"{names}: used with --stream only")
        return offline(args)

    parser.set_defaults(func=run)


def add_stream_options(parser: argparse.ArgumentParser) -> Any:
    """``--stream`` and its settings on ``parser``, as one argument group (returned)."""
    group = parser.add_argument_group("streaming (--stream)")
    group.add_argument(
        "--stream", action="store_true",
        help="decode as a live stream (a model with streaming attention and causal convolution, see docs/streaming.md):"
        " JSON lines with the partial text as it changes and the final text; '-' reads raw 16-bit PCM or a WAV stream"
        " from standard input as it arrives",
    )
    group.add_argument(
        "--chunk-ms", type=_positive_float, default=DEFAULT_CHUNK_MS, metavar="MS",
        help=f"--stream: milliseconds of audio per encoder chunk, a multiple of the model's frame (default "
        f"{DEFAULT_CHUNK_MS:g})",
    )
    group.add_argument(
        "--num-left-chunks", type=_left_chunks, default=-1, metavar="N",
        help="--stream: previous chunks each chunk attends to (default -1: all; a bound keeps memory flat)",
    )
    group.add_argument("--realtime", action="store_true", help="--stream: pace file input as a live source")
    group.add_argument(
        "--endpoint-silence", type=_positive_float, default=None, metavar="SECONDS",
        help="--stream: end an utterance after this much blank following some text, print it as a segment "
        "({\"segment\", \"start\", \"end\"}) and start the next (default: the whole stream is one utterance)",
    )
    group.add_argument(
        "--rescore", action="store_true",
        help="--stream: at the end of each utterance, rescore the prefix beam's n-best with the attention (LAS) "
        "decoder on the whole utterance (a ctc_las model; --ctc-weight, default 0.5, weighs the CTC score)",
    )
    group.add_argument(
        "--sample-rate", type=_positive_int, default=None, metavar="HZ",
        help="--stream: the rate of raw PCM on standard input (default 16000; resampled to 16000); a WAV stream gives "
        "its own",
    )
    return group


def _file_blocks(path: str, block_seconds: float = 0.1) -> Iterator[np.ndarray]:
    from ..data import load_audio

    waveform = load_audio(path, 16000)
    step = int(16000 * block_seconds)
    for start in range(0, len(waveform), step):
        yield waveform[start : start + step]


def _paced(blocks: Iterator[np.ndarray]) -> Iterator[np.ndarray]:
    """``blocks`` released no faster than real time (16 kHz)."""
    start, heard = time.perf_counter(), 0
    for block in blocks:
        delay = heard / 16000 - (time.perf_counter() - start)
        if delay > 0:
            time.sleep(delay)
        heard += len(block)
        yield block


def run_stream(args: argparse.Namespace) -> int:
    """The ``--stream`` branch of ``transcribe``."""
    from ..data import BadClipError
    from ..inference.streaming.pcm import PCMStreamError, pcm_blocks
    from ..inference.streaming.recognizer import StreamingRecognizer

    unsupported = [flag for flag, on in (("--timestamps", args.timestamps), ("--confidence", args.confidence),
                                         ("--hotwords", getattr(args, "hotwords", None))) if on]
    if unsupported:
        raise CommandError(f"{', '.join(unsupported)} cannot be combined with --stream (live decoding gives the text: "
                           "CTC greedy, or prefix beam search with --lm and --rescore)")
    if args.sample_rate is not None and not any(path in STDIN_NAMES for path in args.audio):
        raise CommandError("--sample-rate applies to raw PCM on standard input ('-'); files give their own rate")
    vad_threshold = stream_finder_threshold(args)
    model, processor = _load_model(args.model)
    if processor is None:
        raise CommandError(f"--model {args.model}: no processor saved beside the model")
    _check_vocabulary(model, processor, args.model)
    lang_ids = _model_language(model, args.language, args.model)
    model.to(_resolve_device(args.device))
    try:  # the recognizer checks its settings (method, LM, rescoring) and builds the LM fusion itself
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", UserWarning)
            recognizer = StreamingRecognizer(
                model, processor, chunk_ms=args.chunk_ms, num_left_chunks=args.num_left_chunks, method=args.method,
                beam_size=args.beam_size, lang_ids=lang_ids, norm_window_s=args.norm_window,
                endpoint_silence_s=args.endpoint_silence, speech_finder=args.speech_finder,
                vad_threshold=vad_threshold, lm=getattr(args, "lm", None), alpha=getattr(args, "alpha", None),
                beta=getattr(args, "beta", None), rescore=args.rescore, ctc_weight=args.ctc_weight,
            )
    except ValueError as error:
        raise CommandError(f"--model {args.model}: {error}") from None
    for warning in caught:
        print(f"{PROG}: warning: {warning.message}", file=sys.stderr)
    failures = 0
    for path in args.audio:
        problems: list[str] = []
        if path in STDIN_NAMES:
            blocks: Iterator[np.ndarray] = pcm_blocks(sys.stdin.buffer, args.sample_rate, "standard input", problems)
        else:
            blocks = _file_blocks(path)
        if args.realtime:
            blocks = _paced(blocks)
        shown = ""
        try:
            for block in blocks:
                text = recognizer.accept_waveform(block)
                for segment in recognizer.pop_segments():
                    _print({"path": str(path), "segment": segment["text"], "start": segment["start"],
                            "end": segment["end"]})
                if text != shown:
                    shown = text
                    _print({"path": str(path), "partial": text, "seconds": round(recognizer.seconds, 3)})
        except (BadClipError, PCMStreamError) as error:
            print(f"{PROG}: error: {escape_field(str(error))}", file=sys.stderr)
            failures += 1
            recognizer.reset()
            continue
        started = time.perf_counter()
        recognizer.finalize()
        for segment in recognizer.pop_segments():
            _print({"path": str(path), "segment": segment["text"], "start": segment["start"], "end": segment["end"]})
        text = recognizer.text()
        final_ms = (time.perf_counter() - started) * 1000
        seconds = recognizer.seconds
        compute = sum(recognizer.chunk_seconds) + recognizer.vad_seconds
        _print({"path": str(path), "text": text, "seconds": round(seconds, 3), "final": True,
                "compute_rtf": round(compute / seconds, 4) if seconds else 0.0, "final_ms": round(final_ms, 1)})
        for problem in problems:
            print(f"{PROG}: error: {escape_field(problem)}", file=sys.stderr)
            failures += 1
        recognizer.reset()
    return 1 if failures else 0


def stream_finder_threshold(args: argparse.Namespace) -> float:
    """Check ``--speech-finder`` / ``--vad-threshold`` for streaming once, before the model loads (the library's
    :func:`~adaptspeech.inference.streaming.recognizer.check_stream_finder`: a finder that cannot stream, one without
    ``--endpoint-silence``, silero without its package, a threshold out of range; and a threshold without silero:
    one line) -> the threshold."""
    from ..inference.long_form.silero import DEFAULT_THRESHOLD
    from ..inference.streaming.recognizer import check_stream_finder

    threshold = DEFAULT_THRESHOLD if args.vad_threshold is None else args.vad_threshold
    if args.speech_finder is None:
        if args.vad_threshold is not None:
            raise CommandError("--vad-threshold: read by --speech-finder silero only; --stream endpoints on the best "
                               "path's blanks without --speech-finder")
        return threshold
    try:
        check_stream_finder(args.speech_finder, threshold, args.endpoint_silence)
    except (ValueError, ImportError) as error:
        raise CommandError(f"--speech-finder {args.speech_finder}: {error}") from None
    return threshold


def _print(line: dict[str, Any]) -> None:
    print(json.dumps(line, ensure_ascii=False), flush=True)
