"""``adaptspeech pseudo-label``: label an untranscribed pool with a model (and an n-gram LM), keep the confident
labels, write a prepared folder a training stage reads (``data.pseudo_labelled_dir``)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from .common import (
    PROG,
    CommandError,
    _add_lm_options,
    _check_vocabulary,
    _lm_decoder,
    _load_model,
    _positive_int,
    _resolve_device,
)
from .transcribe import _model_language

# ---- pseudo-label --------------------------------------------------------------------------------------------


def _in_unit_interval(text: str, zero_allowed: bool) -> float:
    """``text`` as a number in ``[0, 1]`` (``zero_allowed``) or ``(0, 1]``, else an argparse error naming it."""
    interval = "[0, 1]" if zero_allowed else "(0, 1]"
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number in {interval}, got {text!r}") from None
    low_ok = value >= 0.0 if zero_allowed else value > 0.0
    if not low_ok or not value <= 1.0:
        raise argparse.ArgumentTypeError(f"expected a number in {interval}, got {text}")
    return value


def _fraction(text: str) -> float:
    return _in_unit_interval(text, zero_allowed=False)


def _unit_interval(text: str) -> float:
    return _in_unit_interval(text, zero_allowed=True)


def _confidence_method(text: str) -> Any:
    """``text`` as a :class:`~adaptspeech.decoding.confidence.ConfidenceMethod`, else an argparse error naming it."""
    from ..decoding.confidence import ConfidenceMethod

    try:
        return ConfidenceMethod.parse(text)
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err)) from None


def _add_pseudo_label(subparsers: argparse._SubParsersAction) -> None:
    command = subparsers.add_parser(
        "pseudo-label",
        help="label an untranscribed pool with a model (+ LM), keep the confident labels (self-training)",
        description="Decode every segment of a pool (`adaptspeech prepare audio-folder` / `common-voice-other`) with "
        "a model's CTC head (the best path, or with --lm the LM beam search), score each with its confidence, keep "
        "those passing --min-confidence or the --keep-fraction most confident ones, and write a prepared folder "
        "(dataset/ with text, labels, confidence, labelled_by; processor/; pseudo_label.json; labels.jsonl with "
        "every label). Resumable: a run killed half-way continues where it stopped, nothing is decoded twice. Prints "
        "the throughput.",
    )
    command.add_argument("--model", required=True, metavar="DIR", help="the labelling model (a model/ folder)")
    command.add_argument("--data", required=True, metavar="POOL_DIR", help="the untranscribed pool")
    command.add_argument("--out", required=True, metavar="DIR", help="the pseudo-labelled folder")
    command.add_argument("--overwrite", action="store_true",
                         help="replace an earlier pseudo-labelled folder in --out (without it, one is refused before "
                         "anything is decoded)")
    kept = command.add_mutually_exclusive_group()
    kept.add_argument("--min-confidence", type=_unit_interval, default=None, metavar="C",
                      help="keep the labels whose utterance confidence is at least C")
    kept.add_argument("--keep-fraction", type=_fraction, default=None, metavar="F",
                      help="keep the F most confident share of the labels")
    command.add_argument("--max-lm-disagreement", type=_fraction, default=None, metavar="CER",
                         help="with --lm, keep only the labels whose best-path hypothesis lies below this CER from the "
                         "LM's (WeNet NST's agreement filter; its threshold: 0.1)")
    command.add_argument("--confidence-method", type=_confidence_method, default=None, metavar="METHOD",
                         help="how words are scored: MEASURE[@ALPHA][/AGGREGATION], e.g. tsallis_exp@0.33/product "
                         "(default max_prob/min), or learned[:FILE]: the word confidence estimator fitted by "
                         "scripts/confidence_calibration.py --save-estimator (without FILE: "
                         "confidence_estimator.json in the --model folder); docs/self_training.md")
    command.add_argument("--target", default=None, metavar="PREPARED_DIR",
                         help="the target's labelled data: its vocabulary writes the labels (the model's must cover "
                         "it) and its dev split is the confidence reference of the pool check")
    command.add_argument("--language", default=None,
                         help="the adapter to use when the model routes several languages (it then labels with that "
                         "language's adapter alone)")
    command.add_argument("--beam-size", type=_positive_int, default=None,
                         help="beam width of the LM beam search (default 32)")
    command.add_argument("--batch-size", type=_positive_int, default=16, help="segments per batch (default 16)")
    command.add_argument("--device", default=None, help="cpu, cuda, cuda:N or mps (default: the best available)")
    command.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    _add_lm_options(command)
    command.set_defaults(func=_run_pseudo_label)


def _run_pseudo_label(args: argparse.Namespace) -> int:
    from ..data.pseudo_labelled import ConfidenceFilter
    from ..inference.pseudo_labels.labelling import pseudo_label
    from ..progress import library_progress_bars
    from ..saved_model import model_fingerprint

    method = args.confidence_method
    if method is not None:
        try:
            method = method.beside_model(args.model)
            if method.estimator is not None:  # fitted on the words of the decoder used (before the model loads)
                method.estimator_model("lm_beam" if args.lm else "best_path")
        except ValueError as err:
            raise CommandError(f"--confidence-method {method.name}: {err}") from None
    device = _resolve_device(args.device)
    model, processor = _load_model(args.model)
    if processor is None:
        raise CommandError(f"--model {args.model}: no processor saved beside the model")
    if getattr(model, "ctc_head", None) is None:
        raise CommandError(f"--model {args.model}: pseudo-labelling reads a CTC head; this model has "
                           f"head={model.config.head!r}")
    _check_vocabulary(model, processor, args.model)
    if _model_language(model, args.language, args.model) is not None:  # a routed model: that language's adapter
        model.set_target_language(args.language, processor)
    options: dict[str, float | int] = {} if args.beam_size is None else {"beam_size": args.beam_size}
    lm_decoder, _ = _lm_decoder(args, model, processor, "ctc_beam", dict(options))
    lm_key = None
    if lm_decoder is not None:
        lm_key = {"lm": str(Path(args.lm).resolve()), "alpha": lm_decoder.alpha, "beta": lm_decoder.beta,
                  "beam_size": lm_decoder.beam_width}
    model_id = f"{Path(args.model).resolve()}@{model_fingerprint(args.model)[:12]}"
    model.to(device)
    with library_progress_bars(enabled=not args.no_progress):
        result = pseudo_label(model, processor, args.data, args.out, model_id=model_id, lm_decoder=lm_decoder,
                              lm_key=lm_key, target=args.target,
                              confidence_filter=ConfidenceFilter(args.min_confidence, args.keep_fraction),
                              batch_size=args.batch_size, progress=not args.no_progress, overwrite=args.overwrite,
                              max_lm_disagreement=args.max_lm_disagreement,
                              confidence_method=method)
    s = result.summary
    if s["decoded_this_run"]:
        print(f"labelled {s['decoded_this_run']} segments ({s['decoded_audio_seconds'] / 60:.1f} min of audio) in "
              f"{s['decode_seconds']:.1f} s: {s['segments_per_second']:.1f} segments/s, real-time factor "
              f"{s['real_time_factor']:.4f}" + ("" if s["decoded_this_run"] == s["rows"] else
                                                f" ({s['rows'] - s['decoded_this_run']} labelled by an earlier run)"))
    else:
        print(f"all {s['rows']} segments were labelled by an earlier run")
    q = s["confidence_quantiles"]
    print(f"kept {s['kept']} of {s['rows']} labels ({100 * s['kept_share']:.1f}%, {60 * s['kept_hours']:.1f} min) "
          f"with {s['filter']}; confidence median {q['median']:.3f} [q10 {q['q10']:.3f}, q90 {q['q90']:.3f}] -> "
          f"{result.out_dir}")
    if "reference" in s and not s["reference"]["mostly_far_below"]:
        ref = s["reference"]
        print(f"{PROG}: pool check: {len(ref['files_far_below'])} source files below the dev split's "
              f"{ref['threshold']:.2f} confidence ({100 * ref['audio_share_far_below']:.0f}% of the audio)")
    return 0
