"""``adaptspeech evaluate``: WER / CER of a model on a prepared split, overall and per language."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from .common import (
    CommandError,
    _add_model_options,
    _check_vocabulary,
    _decoder_setup,
    _load_model,
    _output_file,
    _positive_int,
    _resolve_device,
    _split_list,
)
from .lid import (
    AUTO,
    add_calibration_options,
    add_lid_options,
    fit_calibration_command,
    language_identifier,
    routing_options,
)

# ---- evaluate ------------------------------------------------------------------------------------------------


def _add_evaluate(subparsers: argparse._SubParsersAction) -> None:
    evaluate = subparsers.add_parser(
        "evaluate",
        help="WER / CER of a model on a prepared split, overall and per language (JSON)",
        description="Decode a split of a prepared dataset (`adaptspeech prepare` output) with any head and decoder "
        "and score it with the shipped WER / CER modules (no network): overall and per language.",
    )
    evaluate.add_argument("--model", required=True, metavar="DIR", help="a model folder saved by `adaptspeech train`")
    evaluate.add_argument("--data", required=True, metavar="PREPARED_DIR", help="`adaptspeech prepare` output")
    evaluate.add_argument("--split", default="test", help="split to score (default test)")
    evaluate.add_argument("--languages", default=None, help="comma-separated languages (default: all of the split)")
    evaluate.add_argument("--max-rows", type=_positive_int, default=None, help="score only the first N rows")
    evaluate.add_argument(
        "--output", type=_output_file, default=None, metavar="results.json", help="write the rates as JSON"
    )
    evaluate.add_argument("--overwrite", action="store_true",
                          help="replace an earlier evaluate output in --output (without it, one is refused; another "
                          "file always is)")
    evaluate.add_argument("--language", choices=[AUTO], default=None,
                          help="auto: route each row to the adapter of the language identified in it and score the "
                          "routing too (docs/lid.md); default: the model's own routing")
    _add_model_options(evaluate)
    add_lid_options(evaluate)
    add_calibration_options(evaluate)
    evaluate.set_defaults(func=_run_evaluate)


def _is_evaluate_output(path: Path) -> bool:
    """Whether ``path`` holds what ``evaluate --output`` writes: a JSON object with ``overall`` and ``per_language``
    rates (:func:`~adaptspeech.metrics.write_error_rates_json`)."""
    try:
        result = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return False
    return isinstance(result, dict) and isinstance(result.get("overall"), dict) and \
        isinstance(result.get("per_language"), dict)


def _run_evaluate(args: argparse.Namespace) -> int:
    from ..data.output_folder import check_output_file
    from ..data.prepared_data import load_prepared, select_languages
    from ..evaluation import evaluate_dataset
    from ..lid_evaluation import evaluate_dataset_auto
    from ..metrics import write_error_rates_json

    if args.output:
        check_output_file(Path(args.output), _is_evaluate_output, "adaptspeech evaluate", overwrite=args.overwrite,
                          kind="JSON with overall and per_language rates")
    device = _resolve_device(args.device)
    model, processor = _load_model(args.model)
    dataset, data_processor = load_prepared(args.data)
    if args.split not in dataset:
        raise CommandError(
            f"--split {args.split!r} is not prepared in {args.data}; prepared splits: {', '.join(sorted(dataset))}"
        )
    data = dataset[args.split]
    languages = _split_list(args.languages)
    if languages:
        data = select_languages(data, languages, args.split, "--languages")
    if args.max_rows:
        data = data.select(range(min(len(data), args.max_rows)))
    processor = processor or data_processor
    _check_vocabulary(model, processor, args.model if processor is not data_processor else args.data)
    method, options, lm_decoder = _decoder_setup(args, model, processor)
    identifier = language_identifier(args, model, processor)
    model.to(device)
    if args.fit_lid_calibration:
        return fit_calibration_command(args, model, data, processor, identifier)
    for given, option in ((args.lid_lms, "--lid-lms"), (args.lid_text_score, "--lid-text-score")):
        if given:
            raise CommandError(f"{option}: used with --fit-lid-calibration only")
    routing = routing_options(args, identifier)
    result = (evaluate_dataset if identifier is None else evaluate_dataset_auto)(
        model, data, processor, **routing, method=method, batch_size=args.batch_size, progress=not args.no_progress,
        lm_decoder=lm_decoder, **options,
    )
    if lm_decoder is not None:
        options = {**options, "lm": args.lm, "alpha": lm_decoder.alpha, "beta": lm_decoder.beta,
                   "beam_size": lm_decoder.beam_width}
    result.update(model=str(Path(args.model)), data=str(Path(args.data)), split=args.split, options=options)
    for code, entry in result["per_language"].items():
        print(f"{code}\tCER {100 * entry['cer']:.2f}%\tWER {100 * entry['wer']:.2f}%\t{entry['num_utterances']} utt")
    if identifier is not None:
        print(f"language ID\taccuracy {100 * result['lid']['accuracy']:.2f}%\t{result['routing']['systems']}")
    overall = result["overall"]
    print(
        f"overall\tCER {100 * overall['cer']:.2f}%\tWER {100 * overall['wer']:.2f}%\t"
        f"{overall['num_utterances']} utt ({result['method']})"
    )
    if args.output:
        print(f"wrote {write_error_rates_json(result, args.output)}")
    return 0
