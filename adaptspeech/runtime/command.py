"""The torch-free command line: ``python -m adaptspeech.runtime --onnx DIR AUDIO...`` (and the runner of
``adaptspeech transcribe --onnx``), printing ``PATH<TAB>TEXT`` a file, fields escaped by :func:`escape_field`."""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Sequence
from typing import Any, TextIO

from .audio import BadClipError
from .decoding_methods import LM_METHOD, METHOD_PATHS, ONNX, methods_for
from .folder import PRECISIONS
from .long_form import DEFAULT_CHUNK_LENGTH_S, DEFAULT_STRIDE_LENGTH_S, LONG_FORM_SPLITS
from .pauses import DEFAULT_MIN_PAUSE_S, DEFAULT_SPEECH_PAD_S
from .recognizer import DECODERS, OnnxRecognizer, deprecated_decoder

_ESCAPES = str.maketrans({"\\": "\\\\", "\t": "\\t", "\n": "\\n", "\r": "\\r"})


def escape_field(text: str) -> str:
    """``text`` as one field of a ``PATH<TAB>TEXT`` line: backslash, tab, newline and carriage return written as
    ``\\\\``, ``\\t``, ``\\n``, ``\\r`` (:func:`unescape_field` reverses it)."""
    return str(text).translate(_ESCAPES)


def unescape_field(field: str) -> str:
    """The text of a field written by :func:`escape_field`."""
    return re.sub(r"\\([\\tnr])", lambda m: {"\\": "\\", "t": "\t", "n": "\n", "r": "\r"}[m.group(1)], field)


def add_onnx_options(parser: Any, decoding: bool = True) -> None:
    """``--precision``, ``--threads``, the deprecated ``--decoder`` and (``decoding``) ``--method``, ``--lm`` and
    ``--beam-size`` of the ONNX transcription on ``parser`` (a parser or an argument group; ``adaptspeech
    transcribe`` declares the decoding options itself, for both of its paths)."""
    parser.add_argument("--precision", choices=PRECISIONS, default=None,
                        help="the graph to run (default: int8 when exported, else fp32)")
    if decoding:
        parser.add_argument("--method", choices=tuple(METHOD_PATHS), default=None,
                            help=f"decoder, of those this path serves: {', '.join(methods_for(ONNX))} (ctc_greedy: the "
                            "best path, default; ctc_beam: CTC prefix beam search, the default with --lm)")
        parser.add_argument("--lm", default=None, metavar="DIR",
                            help=f"decode with an n-gram LM (--method {LM_METHOD}): an `adaptspeech lm build` folder, "
                            "or a folder holding a saved one (the export folder itself, when its model had one)")
        parser.add_argument("--beam-size", type=int, default=None,
                            help="beams kept by --method ctc_beam (default 8, 32 with --lm)")
    parser.add_argument("--decoder", choices=DECODERS, default=None,
                        help="deprecated: --decoder greedy / beam / lm is --method ctc_greedy / --method ctc_beam / "
                        "--lm EXPORT_DIR")
    parser.add_argument("--threads", type=int, default=1, help="onnxruntime threads (default 1)")


def onnx_decoding(args: argparse.Namespace, err: TextIO | None = None, prog: str = "adaptspeech"
                  ) -> tuple[str | None, str | None]:
    """``(method, lm)`` of the ONNX path's options: ``--method`` and ``--lm``, or the deprecated ``--decoder`` mapped
    to them with a one-line warning on ``err``; ValueError (one line) for ``--decoder`` given with ``--method``."""
    if args.decoder is None:
        return args.method, args.lm
    method, lm = deprecated_decoder(args.decoder, args.method, args.lm, args.onnx)
    use = f"--method {method}" + (f" --lm {lm}" if lm is not None else "")
    print(f"{prog}: warning: --decoder is deprecated; use {use}", file=err or sys.stderr)
    return method, None if lm is None else str(lm)


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


def transcribe_files(folder: str, paths: Sequence[str], precision: str | None = None, method: str | None = None,
                     beam_size: int | None = None, threads: int = 1, out: TextIO | None = None,
                     err: TextIO | None = None, prog: str = "adaptspeech", lm: str | None = None, **settings: Any
                     ) -> int:
    """Transcribe ``paths`` with the export in ``folder``: a ``PATH<TAB>TEXT`` line each on ``out``; a file that
    cannot be read gets one line on ``err`` and the others are still transcribed. ``settings``: the other
    :class:`OnnxRecognizer` settings (how a long recording is split: ``split_by``, ``chunk_length_s`` ...; the LM's
    ``alpha``, ``beta``). Returns the exit status (1 when a file failed)."""
    out, err = out or sys.stdout, err or sys.stderr
    recognizer = OnnxRecognizer(folder, precision=precision, method=method, beam_size=beam_size, lm=lm,
                                num_threads=threads, **settings)
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
        method, lm = onnx_decoding(args, prog=parser.prog)
        return transcribe_files(args.onnx, args.audio, args.precision, method, args.beam_size, args.threads,
                                prog=parser.prog, lm=lm, **split_settings(args))
    except (ValueError, OSError) as error:
        print(f"{parser.prog}: error: {' '.join(str(error).split())}", file=sys.stderr)
        return 1
