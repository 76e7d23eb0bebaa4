"""Does a confidence pick the good pseudo-labels? Label a pool whose clips' sentences are known (the synthetic corpus's
``unlabelled_sentences.tsv``, read only here) with a model and the n-gram LM beam search, once per confidence method
(:func:`adaptspeech.inference.pseudo_labels.labelling.label_batches`, the labelling code of ``pseudo-label``), and
print per method and kept share the CER of the kept labels (the most confident utterances) and its ratio to the CER of
all labels (the baseline of the same run), beside the oracle: the same share with the lowest true CER.

Usage::

    python scripts/pseudo_label_filter_quality.py --model runs/demo/target_adapter/model \\
        --pool runs/demo/self_training/pool --truth runs/demo/corpus/sk/unlabelled_sentences.tsv \\
        --lm runs/demo/lm --methods max_prob/min learned:runs/demo/target_adapter/model/confidence_estimator.json
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import numpy as np

DEFAULT_FRACTIONS = (0.5, 0.7, 0.8, 0.9)


def kept_cer(texts: list[str], truths: list[str], order: np.ndarray, fraction: float) -> float:
    """The corpus CER of the first ``fraction`` of the utterances in ``order`` (at least one)."""
    from adaptspeech.metrics.scoring import count_edits

    chosen = order[: max(1, round(fraction * len(order)))]
    counts = count_edits([texts[i] for i in chosen], [truths[i] for i in chosen], "char")
    return counts.edits / max(counts.ref_units, 1)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", required=True, help="the labelling model (a model/ folder with its processor)")
    parser.add_argument("--pool", required=True, help="a pool folder (adaptspeech prepare common-voice-other)")
    parser.add_argument("--truth", required=True, help="a TSV with the columns path and sentence of the pool's clips")
    parser.add_argument("--lm", required=True, help="an LM folder (adaptspeech lm build)")
    parser.add_argument("--methods", nargs="+", default=["max_prob/min"], help="confidence methods (pseudo-label's)")
    parser.add_argument("--fractions", nargs="+", type=float, default=list(DEFAULT_FRACTIONS))
    parser.add_argument("--alpha", type=float, default=0.5)
    parser.add_argument("--beta", type=float, default=1.0)
    parser.add_argument("--beam-size", type=int, default=16)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--json", default=None, help="also write the figures here")
    args = parser.parse_args(argv)

    from adaptspeech.decoding.confidence import ConfidenceMethod

    try:
        methods = [ConfidenceMethod.parse(m) for m in args.methods]
    except ValueError as err:
        parser.error(f"--methods: {err}")

    import torch
    from transformers import Wav2Vec2Processor

    from adaptspeech.data.array_rows import column_list
    from adaptspeech.data.common_voice import read_tsv
    from adaptspeech.data.pools import load_pool
    from adaptspeech.data.text import normalize_text
    from adaptspeech.inference.pseudo_labels.labelling import label_batches
    from adaptspeech.lm.decoder import LMDecoder, build_decoder
    from adaptspeech.metrics.scoring import count_edits
    from adaptspeech.modeling import AdaptSpeechForCTC

    torch.set_num_threads(args.threads)
    model = AdaptSpeechForCTC.from_pretrained(args.model)
    processor = Wav2Vec2Processor.from_pretrained(args.model)
    decoder = LMDecoder(build_decoder(processor.tokenizer, args.lm, args.alpha, args.beta), args.beam_size)
    rows, _ = load_pool(args.pool)
    language = rows[0]["language"]
    columns = read_tsv(Path(args.truth))
    known = {p: normalize_text(s, language) for p, s in zip(columns["path"], columns["sentence"], strict=True)}
    paths = column_list(rows, "path")
    missing = [p for p in paths if p not in known]
    if missing:
        parser.error(f"--truth {args.truth}: no sentence for {len(missing)} pool clips, e.g. {missing[0]}")
    truths = [known[p] for p in paths]
    figures: dict[str, Any] = {}
    texts: list[str] = []
    for method in methods:
        records = [r for batch in label_batches(model, processor, rows, list(range(len(rows))), decoder,
                                                args.batch_size, args.beam_size, method) for r in batch]
        records.sort(key=lambda r: r["index"])
        texts = [r["text"] for r in records]
        confidence = np.array([r["confidence"] for r in records])
        order = np.argsort(-confidence, kind="stable")
        figures[method.name] = {f: kept_cer(texts, truths, order, f) for f in args.fractions}
    per_utterance = np.array([count_edits([t], [r], "char").edits / max(len(r), 1) for t, r in zip(texts, truths,
                                                                                                 strict=True)])
    figures["oracle (lowest true CER)"] = {f: kept_cer(texts, truths, np.argsort(per_utterance, kind="stable"), f)
                                           for f in args.fractions}
    every = kept_cer(texts, truths, np.arange(len(texts)), 1.0)
    print(f"pool {args.pool}: {len(texts)} labels, LM beam {args.beam_size} (alpha {args.alpha}, beta {args.beta}); "
          f"CER of all labels {100 * every:.2f}%")
    print("| method | " + " | ".join(f"CER kept {f:g} (x all)" for f in args.fractions) + " |")
    print("| --- |" + " --- |" * len(args.fractions))
    for name, by_fraction in figures.items():
        cells = [f"{100 * c:.2f} ({c / every:.2f})" for c in by_fraction.values()]
        print(f"| {name} | " + " | ".join(cells) + " |")
    if args.json:
        Path(args.json).write_text(json.dumps({"labels": len(texts), "cer_all": every, "alpha": args.alpha,
                                               "beta": args.beta, "beam_size": args.beam_size,
                                               "kept_cer": figures}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
