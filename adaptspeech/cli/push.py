"""``adaptspeech push``: publish one language's adapter (or a fusion) on the Hub."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from .common import CommandError, _load_model

# ---- push ----------------------------------------------------------------------------------------------------


def _add_push(subparsers: argparse._SubParsersAction) -> None:
    push = subparsers.add_parser(
        "push",
        help="publish one language's adapter (or the fusion) on the Hugging Face Hub",
        description="Write adapter.<lang>.safetensors, its config, the fusion files with --fusion and a model card "
        "(base model and revision, languages, metrics) into --folder, then upload the folder. Without network the "
        "folder stays ready to upload and the command ends with one line saying so.",
    )
    push.add_argument("--model", required=True, metavar="DIR", help="a model folder saved by `adaptspeech train`")
    push.add_argument("--language", default=None, help="the language whose adapter to publish")
    push.add_argument("--fusion", action="store_true", help="publish the SimAdapter fusion (also without --language)")
    push.add_argument("--repo-id", required=True, metavar="ORG/NAME", help="the Hub repository")
    push.add_argument("--folder", default=None, help="where to write the files (default: DIR/hub/<language or fusion>)")
    push.add_argument("--token", default=None, help="Hub token (default: HF_TOKEN or the cached login)")
    push.add_argument("--metrics", default=None, metavar="results.json", help="`adaptspeech evaluate --output` JSON")
    push.add_argument("--dataset", default="test set", metavar="NAME",
                      help="the dataset the --metrics were measured on (the card's model-index)")
    push.add_argument("--include-head", action="store_true", help="also publish the CTC head (own vocabulary)")
    push.add_argument("--private", action="store_true", help="create the repository as private")
    push.set_defaults(func=_run_push)


def _card_metrics(path: str, language: str | None) -> dict[str, float | int]:
    """Metrics for the model card from an ``evaluate --output`` JSON (the language's entry, else overall)."""
    try:
        data = json.loads(Path(path).read_text())
    except json.JSONDecodeError as err:
        raise CommandError(f"--metrics {path}: not JSON ({err})") from None
    if not isinstance(data, dict):
        raise CommandError(f"--metrics {path}: expected a JSON object, found {type(data).__name__}")
    if "overall" not in data:
        return {k: v for k, v in data.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}
    entry = (data.get("per_language") or {}).get(language) or data["overall"]
    split = data.get("split", "test")
    return {f"{split}_cer": entry["cer"], f"{split}_wer": entry["wer"], f"{split}_utterances": entry["num_utterances"]}


def _run_push(args: argparse.Namespace) -> int:
    import re

    from ..hub import prepare_adapter_folder, push_folder

    if args.language is None and not args.fusion:
        raise CommandError("name the adapter to publish with --language, or pass --fusion")
    if not re.fullmatch(r"[\w.-]+(/[\w.-]+)?", args.repo_id):
        raise CommandError(f"--repo-id {args.repo_id!r} is not of the form ORG/NAME")
    model, _ = _load_model(args.model)
    metrics = _card_metrics(args.metrics, args.language) if args.metrics else None
    folder = Path(args.folder) if args.folder else Path(args.model) / "hub" / (args.language or "fusion")
    prepare_adapter_folder(
        model,
        folder,
        language=args.language,
        include_fusion=args.fusion,
        metrics=metrics,
        include_head=args.include_head,
        dataset=args.dataset,
    )
    url = push_folder(folder, args.repo_id, token=args.token, private=args.private)
    print(f"pushed {folder} to {args.repo_id}: {url}")
    return 0
