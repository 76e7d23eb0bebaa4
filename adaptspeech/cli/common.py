"""What the subcommands share: the error type, argument types, decoding options, model loading."""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import Any

PROG = "adaptspeech"


class CommandError(Exception):
    """An expected failure of a subcommand, printed as one line without a traceback."""


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {value}")
    return value


def _float_range(text: str) -> tuple[float, float]:
    parts = text.split(",")
    try:
        low, high = (float(p) for p in parts) if len(parts) == 2 else (float(text), float(text))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected MIN,MAX (e.g. 10,30), got {text!r}") from None
    return low, high


# ---- shared helpers of the model commands ----------------------------------------------------------------

DECODING_CHOICES = ("ctc_greedy", "ctc_beam", "attention_greedy", "attention_beam", "joint")
"""``adaptspeech.decoding.DECODING_METHODS.names()``, spelled out so that ``--help`` does not import torch."""
_NEEDS_LAS = ("attention_greedy", "attention_beam")
_NEEDS_CTC = ("ctc_greedy", "ctc_beam", "joint")
_BEAM_METHODS = ("ctc_beam", "attention_beam", "joint")


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


def _decoding_options(args: argparse.Namespace, model: Any) -> tuple[str, dict[str, float | int]]:
    """``(method, options)`` for :func:`adaptspeech.decoding.transcribe_batch`, checked against the model's heads."""
    has_ctc = getattr(model, "ctc_head", None) is not None
    has_las = getattr(model, "las_head", None) is not None
    method = args.method or ("ctc_greedy" if has_ctc else "attention_beam")
    head = getattr(getattr(model, "config", None), "head", "?")
    if method in _NEEDS_LAS and not has_las:
        raise CommandError(
            f"--method {method} needs an attention (LAS) head; this model has head={head!r} "
            "(use ctc_greedy or ctc_beam)"
        )
    if method in _NEEDS_CTC and not has_ctc:
        raise CommandError(
            f"--method {method} needs a CTC head; this model has head={head!r} (use attention_greedy or attention_beam)"
        )
    options: dict[str, float | int] = {}
    if args.beam_size is not None:
        if method not in _BEAM_METHODS:
            raise CommandError(f"--beam-size applies to {', '.join(_BEAM_METHODS)}, not to --method {method}")
        options["beam_size"] = args.beam_size
    if args.ctc_weight is not None:
        if method != "joint":
            raise CommandError(f"--ctc-weight applies to --method joint, not to --method {method}")
        if not 0.0 <= args.ctc_weight <= 1.0:
            raise CommandError(f"--ctc-weight must be between 0 and 1, got {args.ctc_weight}")
        options["ctc_weight"] = args.ctc_weight
    return method, options


def _load_model(model_dir: str) -> tuple[Any, Any | None]:
    """``(model in eval mode, the processor saved beside it or None)`` from a folder written by ``train``."""
    from transformers import Wav2Vec2Processor
    from transformers.utils import logging as hf_logging

    from ..configuration import AdaptSpeechConfig
    from ..heads import get_head

    path = Path(model_dir)
    if not (path / "config.json").is_file():
        raise CommandError(
            f"--model {path}: no config.json there (pass a folder saved by `adaptspeech train`, i.e. OUTPUT_DIR/model)"
        )
    config = AdaptSpeechConfig.from_pretrained(path)
    cls = get_head(config.head).model_class
    bars = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()  # a local folder loads in a blink: no "Loading weights" bar on stderr
    try:
        model = cls.from_pretrained(path)
    finally:
        if bars:
            hf_logging.enable_progress_bar()
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
