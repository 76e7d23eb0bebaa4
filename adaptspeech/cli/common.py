"""What the subcommands share: the error type, argument types, decoding options, model loading."""

from __future__ import annotations

import argparse
import math
import os
from pathlib import Path
from typing import Any

from ..decoding.registry import DECODING_METHODS, decoders_for, method_names
from ..heads import HEADS, head_with_outputs, model_outputs
from ..runtime.decoding_methods import PYTORCH, resolve_method

PROG = "adaptspeech"


class CommandError(Exception):
    """An expected failure of a subcommand, printed as one line without a traceback."""


def torch_missing_line(command: str, err: ImportError) -> str | None:
    """The one line for an ``ImportError`` of a subcommand that needs PyTorch where PyTorch is not installed (an
    install of the ``runtime`` extra alone, which runs ``adaptspeech transcribe --onnx`` only); None where torch is
    installed (the error is another one)."""
    import importlib.util

    try:
        if importlib.util.find_spec("torch") is not None:
            return None
    except (ImportError, ValueError):  # a finder that refuses torch, or a broken torch entry
        pass
    return (f"`{PROG} {command}` needs PyTorch, which is not installed ({err}): install the full package, "
            f"`pip install {PROG}` (torch, transformers ...); the `runtime` extra alone (`pip install "
            f"{PROG}[runtime]`) runs `{PROG} transcribe --onnx` only")


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {value}")
    return value


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive number, got {text!r}") from None
    if not 0 < value < float("inf"):
        raise argparse.ArgumentTypeError(f"expected a positive number, got {text}")
    return value


def _non_negative_float(text: str) -> float:
    """A finite number of at least 0."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a non-negative number, got {text!r}") from None
    if not 0 <= value < float("inf"):
        raise argparse.ArgumentTypeError(f"expected a non-negative number, got {text}")
    return value


def _finite_float(text: str) -> float:
    """A float that is neither nan nor infinite (an LM weight of nan left pyctcdecode without a single beam)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"expected a finite number, got {text!r}")
    return value


def _output_file(text: str) -> str:
    """An output file path that can be written: not a folder, no file where a parent folder must be, a folder this
    process may write into (the nearest existing one: missing folders are created). Checked when the command
    starts, so that a long evaluation is not lost to a bad ``--output`` at its end."""
    path = Path(text)
    if path.is_dir():
        raise argparse.ArgumentTypeError(f"{text} is a folder; give a file name (e.g. {path / 'results.json'})")
    for parent in path.parents:
        if parent.exists() and not parent.is_dir():
            raise argparse.ArgumentTypeError(f"{text}: {parent} is a file, not a folder")
    if path.exists() and not os.access(path, os.W_OK):
        raise argparse.ArgumentTypeError(f"{text}: cannot overwrite it (permission denied)")
    folder = next(parent for parent in path.absolute().parents if parent.exists())
    if not path.exists() and not os.access(folder, os.W_OK | os.X_OK):
        raise argparse.ArgumentTypeError(f"{text}: cannot write into {folder} (permission denied)")
    return text


def _float_range(text: str) -> tuple[float, float]:
    parts = text.split(",")
    try:
        low, high = (float(p) for p in parts) if len(parts) == 2 else (float(text), float(text))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected MIN,MAX (e.g. 10,30), got {text!r}") from None
    return low, high


# ---- shared helpers of the model commands ----------------------------------------------------------------

DECODING_CHOICES: tuple[str, ...] = method_names()
"""The decoding methods ``--method`` accepts (:data:`~adaptspeech.decoding.registry.DECODING_METHODS`)."""


def _split_list(text: str | None) -> list[str]:
    return [part.strip() for part in (text or "").split(",") if part.strip()]


def _process_rank() -> int:
    """This process's rank under torchrun / accelerate launch (0 when not distributed)."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        return dist.get_rank()
    return int(os.environ.get("RANK", "0"))


def _add_decoding_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--method",
        choices=DECODING_CHOICES,
        default=None,
        help="decoder (default: ctc_greedy, or attention_beam for a model without a CTC head)",
    )
    parser.add_argument("--beam-size", type=_positive_int, default=None, help="beam size of the beam methods")
    parser.add_argument("--ctc-weight", type=float, default=None, help="CTC weight of the joint method (0..1)")
    parser.add_argument("--batch-size", type=_positive_int, default=16, help="utterances per batch (default 16)")
    parser.add_argument("--no-progress", action="store_true", help="hide the progress bar")


def _supported_methods(model: Any) -> tuple[str | None, tuple[str, ...]]:
    """``(default method, methods the model can decode with)``: from the head registry for a registered head, else
    from the output layers the model has (the default: that of the registered head with the same layers)."""
    head = getattr(getattr(model, "config", None), "head", None)
    spec = HEADS.get(head) if isinstance(head, str) and head in HEADS else None
    outputs = spec.outputs if spec is not None else model_outputs(model)
    default = spec or head_with_outputs(outputs)
    return (default.default_decoder if default is not None else None), decoders_for(outputs)


def _decoding_options(args: argparse.Namespace, model: Any) -> tuple[str, dict[str, float | int]]:
    """``(method, options)`` for :func:`adaptspeech.decoding.transcribe_batch`, checked against the vocabulary
    (:func:`~adaptspeech.runtime.decoding_methods.resolve_method`: with ``--lm`` the method is ``ctc_beam``) and the
    model's head.

    A method the head cannot run is one line naming what the method needs, the head and the methods it supports,
    e.g. ``--method joint needs a CTC head and an attention (LAS) head; this model has head='ctc', which supports:
    ctc_greedy, ctc_beam``.
    """
    default, supported = _supported_methods(model)
    method = resolve_method(args.method, PYTORCH, lm=getattr(args, "lm", None) is not None,
                            default=default or "ctc_greedy")
    if method not in supported:
        head = getattr(getattr(model, "config", None), "head", "?")
        needs = DECODING_METHODS.get(method).needs if method in DECODING_METHODS else ""
        raise CommandError(
            f"--method {method} needs {needs or 'a decoder this model lacks'}; this model has head={head!r}, "
            f"which supports: {', '.join(supported) or '(no decoding method)'}"
        )
    decoder = DECODING_METHODS.get(method)
    options: dict[str, float | int] = {}
    if args.beam_size is not None:
        if not decoder.beam:
            beams = [name for name in method_names() if DECODING_METHODS.get(name).beam]
            raise CommandError(f"--beam-size applies to {', '.join(beams)}, not to --method {method}")
        options["beam_size"] = args.beam_size
    if args.ctc_weight is not None:
        if "ctc_weight" not in decoder.options:
            weighted = [name for name in method_names() if "ctc_weight" in DECODING_METHODS.get(name).options]
            raise CommandError(f"--ctc-weight applies to --method {', '.join(weighted)}, not to --method {method}")
        if not 0.0 <= args.ctc_weight <= 1.0:
            raise CommandError(f"--ctc-weight must be between 0 and 1, got {args.ctc_weight}")
        options["ctc_weight"] = args.ctc_weight
    return method, options


def _add_device_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--device",
        default=None,
        help="where the model runs: cpu, cuda, cuda:N or mps (default: cuda if available, else mps, else cpu)",
    )


def _resolve_device(name: str | None) -> Any:
    """The ``torch.device`` of ``--device`` (``None``: CUDA if available, else MPS, else the CPU;
    :func:`adaptspeech.devices.choose_device`).

    Raises:
        CommandError: a name torch does not know, or a device this machine does not have (one line naming it).
    """
    from ..devices import DeviceError, choose_device

    try:
        return choose_device(name, "--device")
    except DeviceError as err:
        raise CommandError(str(err)) from None


def _load_model(model_dir: str) -> tuple[Any, Any | None]:
    """``(model in eval mode, the processor saved beside it or None)`` from a folder written by ``train``."""
    from transformers import Wav2Vec2Processor

    from ..saved_model import CONFIG_FILE, load_saved_model

    path = Path(model_dir)
    if not (path / CONFIG_FILE).is_file():
        raise CommandError(
            f"--model {path}: no config.json there (pass a folder saved by `adaptspeech train`, i.e. OUTPUT_DIR/model)"
        )
    model = load_saved_model(path, progress_bar=False)  # a local folder loads in a blink: no "Loading weights" bar
    model.eval()
    processor = None
    if (path / "tokenizer_config.json").is_file() or (path / "processor_config.json").is_file():
        processor = Wav2Vec2Processor.from_pretrained(path)
    return model, processor


def _check_vocabulary(model: Any, processor: Any, where: str) -> None:
    size = len(processor.tokenizer)
    if model.config.vocab_size != size:
        raise CommandError(
            f"the model's vocabulary ({model.config.vocab_size} tokens) does not match the "
            f"processor's in {where} ({size} tokens)"
        )


def _add_lm_options(parser: argparse.ArgumentParser) -> None:
    """``--lm DIR --alpha A --beta B --hotwords W,W``: CTC beam search with an n-gram LM (pyctcdecode + KenLM)."""
    parser.add_argument("--lm", default=None, metavar="DIR",
                        help="decode with an n-gram LM (CTC beam search through pyctcdecode; --beam-size sets its "
                        "beam width, default 32): an `adaptspeech lm build` folder, or a model folder into which "
                        "`adaptspeech lm tune --save` saved one (then its tuned --alpha / --beta are the defaults)")
    parser.add_argument("--alpha", type=_finite_float, default=None,
                        help="LM weight (default: the tuned one of a saved LM, else 0.5; `adaptspeech lm tune`)")
    parser.add_argument("--beta", type=_finite_float, default=None,
                        help="word insertion bonus (default: the tuned one of a saved LM, else 1.0)")
    parser.add_argument("--hotwords", default=None, help="comma-separated words to favour (may be outside the LM)")
    parser.add_argument("--hotword-weight", type=_finite_float, default=10.0, help="weight of --hotwords (default 10)")


def _lm_decoder(
    args: argparse.Namespace, model: Any, processor: Any, method: str, options: dict[str, float | int]
) -> tuple[Any | None, dict[str, float | int]]:
    """``(LMDecoder or None, the options left for the decoder)`` from ``--lm`` and its settings."""
    lm = getattr(args, "lm", None)
    if lm is None:
        for name in ("alpha", "beta", "hotwords"):
            if getattr(args, name, None) is not None:
                raise CommandError(f"--{name} applies with --lm")
        return None, options
    from ..lm.decoder import LMDecoder, build_decoder

    # the method is ctc_beam on a head with CTC (_decoding_options); weights left out: the tuned ones of an LM saved
    # by `lm tune --save`, else the defaults
    decoder = build_decoder(processor.tokenizer, lm, alpha=args.alpha, beta=args.beta)
    beam = int(options.pop("beam_size", 32))
    return LMDecoder(decoder, beam_width=beam, hotwords=_split_list(args.hotwords) or None,
                     hotword_weight=args.hotword_weight), options


def _add_model_options(parser: argparse.ArgumentParser) -> None:
    """The options of the commands that decode with a saved model (``evaluate``, ``transcribe``): the decoder and its
    settings, the n-gram LM, the device."""
    _add_decoding_options(parser)
    _add_lm_options(parser)
    _add_device_option(parser)


def _decoder_setup(
    args: argparse.Namespace, model: Any, processor: Any
) -> tuple[str, dict[str, float | int], Any | None]:
    """``(method, options, LMDecoder or None)`` from the options :func:`_add_model_options` added, checked against the
    model (:func:`_decoding_options`, :func:`_lm_decoder`)."""
    method, options = _decoding_options(args, model)
    lm_decoder, options = _lm_decoder(args, model, processor, method, options)
    return method, options, lm_decoder
