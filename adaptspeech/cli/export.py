"""``adaptspeech export``: one language of a trained CTC model as an ONNX folder (see :mod:`adaptspeech.export`)."""

from __future__ import annotations

import argparse

from .push import _card_metrics


def _add_export(subparsers: argparse._SubParsersAction) -> None:
    export = subparsers.add_parser(
        "export",
        help="export one language (its adapter, or the SimAdapter fusion) to ONNX for onnxruntime and sherpa-onnx",
        description="Write OUT/model.onnx (dynamic batch and length; inputs x and x_lengths, outputs logits and "
        "logits_lengths), tokens.txt, adaptspeech_export.json (feature settings), the model folder's n-gram LM and a "
        "model card; --quantize int8 adds model.int8.onnx. Run it with `adaptspeech transcribe --onnx OUT`, `python "
        "-m adaptspeech.runtime --onnx OUT` (no PyTorch), onnxruntime or sherpa-onnx (docs/export.md).",
    )
    export.add_argument("--model", required=True, metavar="DIR", help="a model folder saved by `adaptspeech train`")
    export.add_argument("--language", default=None, help="the language whose adapter and head the graph holds")
    export.add_argument("--fusion", action="store_true", help="the SimAdapter fusion (its target language's head)")
    export.add_argument("--out", required=True, metavar="OUT", help="the folder to write")
    export.add_argument("--quantize", choices=("int8",), default=None, help="also write int8 linear-layer weights")
    export.add_argument("--overwrite", action="store_true",
                        help="replace an earlier export in OUT (a file, a folder of other files and the model's own "
                        "folder are never replaced)")
    export.add_argument("--metrics", default=None, metavar="results.json",
                        help="`adaptspeech evaluate --output` JSON: its WER / CER go into the model card")
    export.add_argument("--dataset", default="test set", metavar="NAME",
                        help="the dataset the --metrics were measured on (model card)")
    export.set_defaults(func=_run_export)


def _run_export(args: argparse.Namespace) -> int:
    from ..export import export_model
    from ..model_card import metrics_from_rates

    metrics = metrics_from_rates(_card_metrics(args.metrics, args.language), args.dataset) if args.metrics else None
    result = export_model(args.model, args.out, language=args.language, fusion=args.fusion, quantize=args.quantize,
                          overwrite=args.overwrite, metrics=metrics)
    what = f"fusion over {', '.join(result.fusion)}" if result.fusion else (result.language or "the base model")
    print(f"exported {what} to {result.folder}: " + ", ".join(p.name for p in result.graphs.values()))
    return 0
