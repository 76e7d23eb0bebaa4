"""Which language-ID head settings tell the demo's languages best: the pooled layer and the audio per language.

Trains one head per setting on a trained demo model (its encoder frozen, the head reads it without adapters; the
stage is ``stage_lid.yaml`` with ``model.lid.layer`` and ``data.train_subset`` changed), then measures the head's
accuracy on the test split (held-out voices) for whole utterances and their first 1 s and 3 s. Every setting trains
with the same seed, steps and learning rate, so the rows differ only in the setting named.

``--subsets 10min null``: ``10min`` is the demo's budget (the target's 10 labelled minutes, kept for every language);
``null`` is all training audio of every language. The head needs no transcript, only the language, so the target's
untranscribed pool (its training audio beyond the 10 labelled minutes, whose language is known) may feed it without
touching the recognition budget.

Usage::

    OMP_NUM_THREADS=1 python recipes/synthetic_demo/lid_settings_study.py --model runs/demo/base/model \
        --prepared runs/demo/prepared --output runs/lid_study --layers 1 3 --subsets 10min null

Writes ``<output>/lid_settings.md`` and ``lid_settings.json`` (and each head under ``<output>/<setting>/``).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

from adaptspeech.overrides import load_yaml

HERE = Path(__file__).parent
LANGUAGES = ["cs", "pl", "sl", "it", "es", "sk"]
PREFIX_SECONDS = (None, 1.0, 3.0)


def stage_for(model: str, prepared: str, output: Path, layer: int, subset: str | None, steps: int) -> dict[str, Any]:
    """``stage_lid.yaml`` on ``model`` with the pooled ``layer`` and the training ``subset`` (None: all audio)."""
    stage = load_yaml(HERE / "stage_lid.yaml")
    pooling = {k: v for k, v in stage["model"]["lid"].items() if k in ("pooling", "attention_dim")}  # a single layer
    stage["model"] = {**stage["model"], "init": "pretrained", "path": model, "lid": {**pooling, "layer": layer}}
    stage["training"] = {**stage["training"], "max_steps": steps, "save_steps": steps}
    return {**stage, "name": "lid", "output_dir": str(output), "seed": 0,
            "data": {"prepared_dir": prepared, "train_languages": LANGUAGES, "train_subset": subset},
            "evaluation": {"batch_size": 32}}


def measure(model_dir: Path, prepared: str, split: str) -> dict[str, Any]:
    """Test accuracy (overall and per language) for whole utterances and the 1-s / 3-s prefixes."""
    from transformers import AutoProcessor

    from adaptspeech import AdaptSpeechForCTC
    from adaptspeech.data.prepared_data import load_prepared
    from adaptspeech.lid_evaluation import lid_accuracy

    model = AdaptSpeechForCTC.from_pretrained(model_dir).eval()
    processor = AutoProcessor.from_pretrained(model_dir)
    rows = load_prepared(prepared)[0][split]
    out = {}
    for seconds in PREFIX_SECONDS:
        report = lid_accuracy(model, rows, processor, batch_size=32, prefix_seconds=seconds)
        out["whole" if seconds is None else f"{seconds:g}s"] = {
            "accuracy": report["accuracy"], "confusion": report["confusion"],
            "per_language": {k: v["accuracy"] for k, v in report["per_language"].items()}}
    return out


def markdown(rows: list[dict[str, Any]]) -> str:
    """The settings table, the per-language accuracies (whole utterances) and the target's confusions."""
    lines = ["| pooled layer | training audio per language | train rows | train s | dev acc. whole % | "
             "LID acc. whole % | LID acc. first 1 s % | LID acc. first 3 s % |", "|" + " --- |" * 8]
    for r in rows:
        acc = r["accuracy"]
        lines.append(f"| {r['layer']} | {r['subset'] or 'all'} | {r['train_rows']} | {r['train_seconds']:.0f} | "
                     f"{100 * r['dev_accuracy']:.2f} | {100 * acc['whole']['accuracy']:.2f} | "
                     f"{100 * acc['1s']['accuracy']:.2f} | {100 * acc['3s']['accuracy']:.2f} |")
    lines += ["", "Per language, whole utterances (%), and what the target sk is taken for:", "",
              "| pooled layer | audio | " + " | ".join(LANGUAGES) + " | sk taken for |", "|" + " --- |" * 9]
    for r in rows:
        whole = r["accuracy"]["whole"]
        wrong = {k: v for k, v in whole["confusion"].get("sk", {}).items() if k != "sk"}
        lines.append(f"| {r['layer']} | {r['subset'] or 'all'} | "
                     + " | ".join(f"{100 * whole['per_language'][lang]:.0f}" for lang in LANGUAGES)
                     + " | " + ", ".join(f"{k} {v}" for k, v in sorted(wrong.items(), key=lambda kv: -kv[1])) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", required=True, help="a trained demo model folder (read only)")
    parser.add_argument("--prepared", required=True, help="the demo's prepared data")
    parser.add_argument("--output", required=True)
    parser.add_argument("--layers", type=int, nargs="+", default=[1, 3])
    parser.add_argument("--subsets", nargs="+", default=["10min", "null"], help="train_subset values (null: all)")
    parser.add_argument("--steps", type=int, default=400)
    parser.add_argument("--split", default="test")
    args = parser.parse_args(argv)
    from adaptspeech.training.stage import run_stage

    out = Path(args.output)
    rows = []
    for subset in [None if s == "null" else s for s in args.subsets]:
        for layer in args.layers:
            folder = out / f"layer{layer}_{subset or 'all'}"
            start = time.perf_counter()
            result = run_stage(stage_for(args.model, args.prepared, folder, layer, subset, args.steps),
                               progress=False, overwrite=True)
            summary = json.loads((folder / "stage_summary.json").read_text())
            rows.append({"layer": layer, "subset": subset, "train_rows": summary["train_rows"],
                         "train_seconds": time.perf_counter() - start,
                         "dev_accuracy": summary["dev"]["lid"]["accuracy"],
                         "accuracy": measure(Path(result.model_dir), args.prepared, args.split)})
            (out / "lid_settings.json").write_text(json.dumps(rows, indent=1) + "\n")
            (out / "lid_settings.md").write_text(markdown(rows) + "\n")
            print(markdown(rows), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
