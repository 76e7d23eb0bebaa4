"""The torch-free command line: ``python -m adaptspeech.runtime --onnx DIR AUDIO...`` (and the runner of
``adaptspeech transcribe --onnx``), printing ``PATH<TAB>TEXT`` a file, fields escaped by :func:`escape_field`."""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Sequence
from typing import Any, TextIO

from .audio import BadClipError
from .folder import PRECISIONS
from .long_form import DEFAULT_CHUNK_LENGTH_S, DEFAULT_STRIDE_LENGTH_S, LONG_FORM_SPLITS
from .pauses import DEFAULT_MIN_PAUSE_S, DEFAULT_SPEECH_PAD_S
from .recognizer import DECODERS, OnnxRecognizer

_ESCAPES = str.maketrans({"\\": "\\\\", "\t": "\\t", "\n": "\\n", "\r": "\\r"})


def escape_field(text: str) -> str:
    """``text`` as one field of a ``PATH<TAB>TEXT`` line: backslash, tab, newline and carriage return written as
    ``\\\\``, ``\\t``, ``\\n``, ``\\r`` (:func:`unescape_field` reverses it)."""
    return str(text).translate(_ESCAPES)


def unescape_field(field: str) -> str:
    """The text of a field written by :func:`escape_field`."""
    return re.sub(r"\\([\\tnr])", lambda m: {"\\": "\\", "t": "\t", "n": "\n", "r": "\r"}[m.group(1)], field)


def add_onnx_options(parser: Any, beam_size: bool = True) -> None:
    """``--precision``, ``--decoder``, ``--threads`` and (``beam_size``) ``--beam-size`` of the ONNX transcription on
    ``parser`` (a parser or an argument group)."""
    parser.add_argument("--precision", choices=PRECISIONS, default=None,
                        help="the graph to run (default: int8 when exported, else fp32)")
    parser.add_argument("--decoder", choices=DECODERS, default="greedy",
                        help="greedy (best path, default), beam (CTC prefix beam search) or lm (the folder's n-gram "
                        "LM)")
    if beam_size:
        parser.add_argument("--beam-size", type=int, default=None,
                            help="beams kept by --decoder beam / lm (default 8 / 32)")
    parser.add_argument("--threads", type=int, default=1, help="onnxruntime threads (default 1)")


def add_split_options(parser: Any) -> None:
    """``--split-by``, ``--chunk-length``, ``--stride-length``, ``--min-pause``, ``--speech-pad``: how a recording
    longer than one graph call is split (``adaptspeech transcribe`` declares its own, for both of its paths)."""
    parser.add_argument("--split-by", choices=LONG_FORM_SPLITS, default="pauses",
                        help="a recording longer than --chunk-length: at pauses (default) or in overlapping chunks")
    parser.add_argument("--chunk-length", type=float, default=DEFAULT_CHUNK_LENGTH_S, metavar="SECONDS",
                        help=f"seconds of audio per graph call (default {DEFAULT_CHUNK_LENGTH_S:g})")
    parser.add_argument("--stride-length", type=float, default=DEFAULT_STRIDE_LENGTH_S, metavar="SECONDS",
                        help=f"seconds of context on each side of a chunk (default {DEFAULT_STRIDE_LENGTH_S:g})")
    parser.add_argument("--min-pause", type=float, default=DEFAULT_MIN_PAUSE_S, metavar="SECONDS",
                        help=f"shortest pause between two speech regions (default {DEFAULT_MIN_PAUSE_S:g})")
    parser.add_argument("--speech-pad", type=float, default=DEFAULT_SPEECH_PAD_S, metavar="SECONDS",
                        help=f"seconds of pause kept on each side of a region (default {DEFAULT_SPEECH_PAD_S:g})")


def split_settings(args: argparse.Namespace) -> dict[str, Any]:
    """The :class:`OnnxRecognizer` settings of the options :func:`add_split_options` declares."""
    return {"split_by": args.split_by, "chunk_length_s": args.chunk_length, "stride_length_s": args.stride_length,
            "min_pause_s": DEFAULT_MIN_PAUSE_S if args.min_pause is None else args.min_pause,
            "speech_pad_s": args.speech_pad}


def transcribe_files(folder: str, paths: Sequence[str], precision: str | None = None, decoder: str = "greedy",
                     beam_size: int | None = None, threads: int = 1, out: TextIO | None = None,
                     err: TextIO | None = None, prog: str = "adaptspeech", **split: Any) -> int:
    """Transcribe ``paths`` with the export in ``folder``: a ``PATH<TAB>TEXT`` line each on ``out``; a file that
    cannot be read gets one line on ``err`` and the others are still transcribed. ``split``: how a long recording
    is split (:class:`OnnxRecognizer`'s ``split_by``, ``chunk_length_s`` ...). Returns the exit status (1 when a
    file failed)."""
    out, err = out or sys.stdout, err or sys.stderr
    recognizer = OnnxRecognizer(folder, precision=precision, decoder=decoder, beam_size=beam_size,
                                num_threads=threads, **split)
    failures = 0
    for path in paths:
        try:
            text = recognizer.transcribe([path])[0].text
        except BadClipError as error:
            print(f"{prog}: error: {escape_field(' '.join(str(error).split()))}", file=err)
            failures += 1
            continue
        print(f"{escape_field(path)}\t{escape_field(text)}", file=out, flush=True)
    return 1 if failures else 0


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m adaptspeech.runtime``: see the module docstring."""
    parser = argparse.ArgumentParser(prog="python -m adaptspeech.runtime",
                                     description="Transcribe audio files with a folder written by `adaptspeech "
                                     "export`, on onnxruntime, without PyTorch.")
    parser.add_argument("--onnx", required=True, metavar="DIR", help="the exported folder")
    parser.add_argument("audio", nargs="+", metavar="AUDIO", help="audio files")
    add_onnx_options(parser)
    add_split_options(parser)
    args = parser.parse_args(argv)
    try:
        return transcribe_files(args.onnx, args.audio, args.precision, args.decoder, args.beam_size, args.threads,
                                prog=parser.prog, **split_settings(args))
    except (ValueError, OSError) as error:
        print(f"{parser.prog}: error: {' '.join(str(error).split())}", file=sys.stderr)
        return 1
