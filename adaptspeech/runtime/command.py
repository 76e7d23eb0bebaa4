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


def transcribe_files(folder: str, paths: Sequence[str], precision: str | None = None, decoder: str = "greedy",
                     beam_size: int | None = None, threads: int = 1, out: TextIO | None = None,
                     err: TextIO | None = None, prog: str = "adaptspeech") -> int:
    """Transcribe ``paths`` with the export in ``folder``: a ``PATH<TAB>TEXT`` line each on ``out``; a file that
    cannot be read gets one line on ``err`` and the others are still transcribed. Returns the exit status (1 when
    a file failed)."""
    out, err = out or sys.stdout, err or sys.stderr
    recognizer = OnnxRecognizer(folder, precision=precision, decoder=decoder, beam_size=beam_size,
                                num_threads=threads)
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
    args = parser.parse_args(argv)
    try:
        return transcribe_files(args.onnx, args.audio, args.precision, args.decoder, args.beam_size, args.threads,
                                prog=parser.prog)
    except (ValueError, OSError) as error:
        print(f"{parser.prog}: error: {' '.join(str(error).split())}", file=sys.stderr)
        return 1
