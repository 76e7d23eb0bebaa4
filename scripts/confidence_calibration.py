"""How good is the word confidence of :mod:`adaptspeech.decoding.confidence`? Decode a prepared split (the target's
dev split) with a model, by the CTC best path and, with ``--lm``, by the n-gram LM beam search (its N-best word
posteriors), and measure per decoder:

* the area under the ROC curve of "word correct" against its confidence (a hypothesis word is correct when the WER
  alignment matches it to an equal reference word; :func:`~adaptspeech.metrics.confidence.word_correctness`): the
  probability that a random correct word scores above a random wrong one (0.5: no information, 1: perfect);
* the reliability table (10 equal-width confidence bins: mean confidence against the share correct) and its expected
  calibration error, drawn as a reliability diagram (PNG).

Usage::

    python scripts/confidence_calibration.py --model runs/synthetic_demo/target_adapter/model \\
        --data runs/synthetic_demo/prepared --language sk --lm runs/synthetic_demo/lm --out docs/benchmarks/confidence

writes ``reliability.png`` and ``calibration.json`` into ``--out`` and prints one line per decoder.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

import numpy as np


def decode_split(model: Any, processor: Any, rows: Any, lm_decoder: Any = None, batch_size: int = 16,
                 beam_size: int | None = None) -> list[dict[str, Any]]:
    """Every row of ``rows`` decoded with its word confidences (``{"index", "text", "confidence", "words"}``)."""
    from adaptspeech.inference.pseudo_label import label_batches

    out: list[dict[str, Any]] = []
    for batch in label_batches(model, processor, rows, list(range(len(rows))), lm_decoder, batch_size, beam_size):
        out.extend(batch)
    return sorted(out, key=lambda r: r["index"])


def calibration(decoded: list[dict[str, Any]], references: list[str], num_bins: int = 10) -> dict[str, Any]:
    """ROC AUC, reliability bins and ECE of the words of ``decoded`` against ``references`` (one per row)."""
    from adaptspeech.metrics.confidence import (
        expected_calibration_error,
        reliability_bins,
        roc_auc,
        word_correctness,
    )

    scores: list[float] = []
    correct: list[bool] = []
    for record, reference in zip(decoded, references, strict=True):
        flags = word_correctness(record["text"], reference)
        if len(flags) != len(record["words"]):
            raise ValueError(f"row {record['index']}: {len(record['words'])} scored words for the {len(flags)} words "
                             f"of {record['text']!r}")
        scores += [float(c) for _, c in record["words"]]
        correct += flags
    bins = reliability_bins(scores, correct, num_bins)
    return {"words": len(scores), "correct_share": float(np.mean(correct)) if correct else float("nan"),
            "roc_auc": roc_auc(scores, correct), "ece": expected_calibration_error(bins),
            "bins": [b.__dict__ for b in bins]}


def plot(results: dict[str, dict[str, Any]], path: Path, title: str) -> None:
    """The reliability diagram: per decoder, the share correct of each bin against its mean confidence."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5, 5))
    ax.plot([0, 1], [0, 1], color="grey", linestyle="--", linewidth=1, label="perfectly calibrated")
    for name, result in results.items():
        bins = [b for b in result["bins"] if b["count"]]
        ax.plot([b["mean_confidence"] for b in bins], [b["accuracy"] for b in bins], marker="o",
                label=f"{name}: AUC {result['roc_auc']:.3f}, ECE {result['ece']:.3f}")
    ax.set_xlim(0, 1)
    ax.set_ylim(0, 1)
    ax.set_xlabel("word confidence (bin mean)")
    ax.set_ylabel("share of words correct")
    ax.set_title(title)
    ax.legend(loc="upper left", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", required=True, help="a model/ folder with its processor")
    parser.add_argument("--data", required=True, help="a prepared folder (adaptspeech prepare)")
    parser.add_argument("--split", default="dev")
    parser.add_argument("--language", default=None, help="the rows of this language (default: all)")
    parser.add_argument("--lm", default=None, help="an LM folder (adaptspeech lm build): also the LM beam search")
    parser.add_argument("--alpha", type=float, default=0.5)
    parser.add_argument("--beta", type=float, default=1.0)
    parser.add_argument("--beam-size", type=int, default=16)
    parser.add_argument("--max-rows", type=int, default=None)
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--out", required=True, help="folder of reliability.png and calibration.json")
    args = parser.parse_args(argv)

    import torch

    from adaptspeech.data.prepared_data import load_prepared, select_languages
    from adaptspeech.modeling import AdaptSpeechForCTC

    if args.threads:
        torch.set_num_threads(args.threads)
    dataset, processor = load_prepared(args.data)
    rows = dataset[args.split]
    if args.language:
        rows = select_languages(rows, [args.language], args.split, "--language")
    if args.max_rows:
        rows = rows.select(range(min(args.max_rows, len(rows))))
    model = AdaptSpeechForCTC.from_pretrained(args.model)
    references = list(rows["text"])
    decoders: dict[str, Any] = {"CTC best path": None}
    if args.lm:
        from adaptspeech.lm.decoder import LMDecoder, build_decoder

        name = f"LM beam {args.beam_size} (alpha {args.alpha:g}, beta {args.beta:g})"
        decoders[name] = LMDecoder(build_decoder(processor.tokenizer, args.lm, args.alpha, args.beta), args.beam_size)
    results: dict[str, dict[str, Any]] = {}
    for name, decoder in decoders.items():
        started = time.perf_counter()
        decoded = decode_split(model, processor, rows, decoder, beam_size=args.beam_size if decoder else None)
        results[name] = {**calibration(decoded, references), "seconds": time.perf_counter() - started}
        r = results[name]
        print(f"{name}: {r['words']} words, {100 * r['correct_share']:.1f}% correct, ROC AUC {r['roc_auc']:.3f}, "
              f"ECE {r['ece']:.3f}")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    title = f"{Path(args.model).parent.name} on {args.split}" + (f" ({args.language})" if args.language else "")
    plot(results, out / "reliability.png", title)
    (out / "calibration.json").write_text(json.dumps(
        {"model": args.model, "data": args.data, "split": args.split, "language": args.language,
         "rows": len(rows), "decoders": results}, indent=1, default=float) + "\n")
    print(f"wrote {out / 'reliability.png'} and {out / 'calibration.json'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
