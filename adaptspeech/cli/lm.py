"""``adaptspeech lm build`` (an ARPA n-gram model from text) and ``adaptspeech lm tune`` (alpha / beta on dev)."""

from __future__ import annotations

import argparse
import json
import math
import os
from pathlib import Path

from .common import (
    CommandError,
    _add_device_option,
    _check_vocabulary,
    _load_model,
    _output_file,
    _positive_int,
    _resolve_device,
)


def _floats(text: str) -> list[float]:
    """``"0,0.5,-1e9"`` -> ``[0.0, 0.5, -1e9]``: at least one number, every one finite (an empty grid ended in an
    IndexError after the encoder had run, a nan weight in pyctcdecode's "max() arg is an empty sequence")."""
    try:
        values = [float(part) for part in text.split(",") if part.strip()]
    except ValueError:
        values = []
    if not values:
        raise argparse.ArgumentTypeError(f"expected comma-separated numbers, got {text!r}")
    if not all(math.isfinite(value) for value in values):
        raise argparse.ArgumentTypeError(f"expected finite numbers, got {text!r}")
    return values


def _add_lm(subparsers: argparse._SubParsersAction) -> None:
    lm = subparsers.add_parser("lm", help="n-gram language models: build one from text, tune its weights on dev",
                               description="Word n-gram LMs for CTC beam search (pyctcdecode + KenLM).")
    actions = lm.add_subparsers(dest="lm_command", metavar="ACTION", required=True)
    build = actions.add_parser(
        "build", help="estimate a Kneser-Ney ARPA model (kaldingram) from a text file",
        description="Writes OUT/lm.arpa (KenLM loads it) and OUT/unigrams.txt. One sentence a line, normalised like "
        "the model's transcripts.",
    )
    build.add_argument("--text", required=True, metavar="corpus.txt")
    build.add_argument("--order", type=_positive_int, default=4, help="n-gram order, 2..5 (default 4)")
    build.add_argument("--out", required=True, metavar="DIR")
    build.set_defaults(func=_run_build)
    tune = actions.add_parser(
        "tune", help="grid-search alpha / beta on a prepared split (lowest WER)",
        description="Runs the encoder once on the split, decodes with every (alpha, beta), prints the table best "
        "first; with --save writes the LM with the best weights into the model folder as a processor with the LM: "
        "transformers' pipeline then applies it, and `adaptspeech transcribe --lm MODEL` / `evaluate --lm MODEL` "
        "decode with it at the tuned weights (unless --alpha / --beta are given).",
    )
    tune.add_argument("--model", required=True, metavar="DIR")
    tune.add_argument("--data", required=True, metavar="PREPARED_DIR")
    tune.add_argument("--split", default="dev")
    tune.add_argument("--lm", required=True, metavar="DIR",
                      help="`adaptspeech lm build` output (or a model folder with a saved LM)")
    tune.add_argument("--alphas", type=_floats, default=[0.0, 0.25, 0.5, 0.75, 1.0])
    tune.add_argument("--betas", type=_floats, default=[0.0, 1.0, 2.0])
    tune.add_argument("--beam-size", type=_positive_int, default=32)
    tune.add_argument("--max-rows", type=_positive_int, default=None)
    tune.add_argument("--save", action="store_true", help="save the best weights with the LM into --model")
    tune.add_argument("--output", type=_output_file, default=None, metavar="tune.json",
                      help="write the grid as JSON (best first)")
    tune.add_argument("--overwrite", action="store_true",
                      help="replace an earlier lm tune output in --output (without it, one is refused; another file "
                      "always is)")
    _add_device_option(tune)
    tune.set_defaults(func=_run_tune)


def _run_build(args: argparse.Namespace) -> int:
    from ..lm.build import build_arpa

    arpa = build_arpa(args.text, args.out, order=args.order)
    print(f"wrote {arpa} and {Path(args.out) / 'unigrams.txt'}")
    return 0


def _is_tune_output(path: Path) -> bool:
    """Whether ``path`` holds what ``lm tune --output`` writes: a JSON object with the ``best`` weights and the
    ``grid``."""
    try:
        result = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return False
    return isinstance(result, dict) and isinstance(result.get("best"), dict) and isinstance(result.get("grid"), list)


def _run_tune(args: argparse.Namespace) -> int:
    from ..data.output_folder import check_output_file
    from ..run_lock import OutputDirLock

    if args.output:  # before the encoder and the grid run
        check_output_file(Path(args.output), _is_tune_output, "adaptspeech lm tune", overwrite=args.overwrite,
                          kind="JSON with the best weights and the grid")
    save = args.save and Path(args.model).is_dir()  # (a folder that is not there: _load_model says so)
    if save and not os.access(args.model, os.W_OK | os.X_OK):  # checked before the encoder and the grid run
        raise CommandError(f"--save: cannot write into {args.model} (permission denied); nothing was run")
    with OutputDirLock(args.model, enabled=save, what="--model"):  # one --save into a model folder at a time
        return _tune(args)


def _tune(args: argparse.Namespace) -> int:
    from ..data.prepared_data import load_prepared
    from ..lm.decoder import LMDecoder, build_decoder
    from ..lm.processor import save_processor_with_lm
    from ..lm.tune import dev_log_probs, grid_search

    device = _resolve_device(args.device)
    model, processor = _load_model(args.model)
    dataset, data_processor = load_prepared(args.data)
    if args.split not in dataset:
        raise CommandError(f"--split {args.split!r} is not prepared in {args.data}; prepared: {', '.join(dataset)}")
    data = dataset[args.split]
    if args.max_rows:
        data = data.select(range(min(len(data), args.max_rows)))
    processor = processor or data_processor
    _check_vocabulary(model, processor, args.model)
    if getattr(model, "ctc_head", None) is None:
        raise CommandError(f"--model {args.model}: the LM decodes CTC output and this model has no CTC head")
    decoder = LMDecoder(build_decoder(processor.tokenizer, args.lm), beam_width=args.beam_size)
    model.to(device)
    log_probs = dev_log_probs(model, data, processor)
    results = grid_search(decoder, log_probs, list(data["text"]), args.alphas, args.betas)
    print("alpha\tbeta\tWER %\tCER %")
    for row in results:
        print(f"{row['alpha']:g}\t{row['beta']:g}\t{100 * row['wer']:.2f}\t{100 * row['cer']:.2f}")
    best = results[0]
    print(f"best: alpha {best['alpha']:g}, beta {best['beta']:g} ({len(data)} utterances of {args.split})")
    if args.output:
        output = Path(args.output)
        output.parent.mkdir(parents=True, exist_ok=True)
        output.write_text(json.dumps({"best": best, "grid": results}, indent=1), encoding="utf-8")
    if args.save:
        decoder.set_weights(best["alpha"], best["beta"])
        try:
            save_processor_with_lm(processor, decoder.decoder, args.model)
        except OSError as err:
            raise CommandError(
                f"saving the LM into {args.model} failed ({err.strerror or err}); {args.model} was left as it was"
            ) from None
        print(f"saved the LM with these weights into {args.model}")
    return 0
