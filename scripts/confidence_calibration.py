"""Which word confidence is any good? Decode a prepared split (the target's dev split) with a model once, by the CTC
best path and, with ``--lm``, by the n-gram LM beam search, and score its words by every method of ``--methods``
(:class:`~adaptspeech.decoding.confidence.ConfidenceMethod`: a frame measure, max-probability or an entropy of
Laptev & Ginsburg 2022 with its order, and how a word aggregates its tokens; the LM beam's N-best posterior at
temperature 1 and at a temperature fitted on ``--fit-split``, or two-fold on the split itself). Per method
(:func:`adaptspeech.inference.pseudo_labels.confidence_comparison.compare_methods`):

* the area under the ROC curve of "word correct" against its confidence (a hypothesis word is correct when the WER
  alignment matches it to an equal reference word): the probability that a random correct word scores above a random
  wrong one (0.5: no information, 1: perfect);
* the expected calibration error over 10 equal-width confidence bins, drawn as a reliability diagram (PNG).

Beside them, the learned word confidence of each decoder (``best path learned``, ``LM beam learned``: a logistic
regression over per-word features, :mod:`adaptspeech.decoding.confidence_estimator`), fitted on ``--fit-split`` or
cross-fitted two-fold on the split itself. ``--save-estimator FILE`` writes the estimator fitted on the whole of
``--fit-split`` (or ``--split``), the LM beam's with ``--lm``, else the best path's; ``pseudo-label
--confidence-method learned:FILE`` (or ``learned`` with the file saved as ``confidence_estimator.json`` beside the
model) scores words with it.

Usage::

    python scripts/confidence_calibration.py --model runs/synthetic_demo/target_adapter/model \\
        --data runs/synthetic_demo/prepared --language sk --lm runs/synthetic_demo/lm --out docs/benchmarks/confidence

writes ``reliability_<method>.png`` per method, ``reliability.png`` (the default method of each decoder, the learned
ones and the best by ROC AUC), ``comparison.json`` and ``calibration.json`` into ``--out``, and prints a table sorted
by ROC AUC.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

DEFAULT_METHODS = (
    "max_prob/min", "max_prob/mean", "max_prob/product",
    *(f"{measure}@{alpha}/{aggregation}" for measure in ("tsallis_exp", "renyi_exp", "tsallis_lin", "renyi_lin")
      for alpha in (0.25, 0.33, 0.5) for aggregation in ("min", "mean", "product")),
    "gibbs_exp/min", "gibbs_lin/min",
)
"""The methods compared by default (``MEASURE[@ALPHA]/AGGREGATION``)."""


def _rows(args: argparse.Namespace, dataset: Any, split: str) -> Any:
    from adaptspeech.data.prepared_data import select_languages

    rows = dataset[split]
    if args.language:
        rows = select_languages(rows, [args.language], split, "--language")
    if args.max_rows:
        rows = rows.select(range(min(args.max_rows, len(rows))))
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", required=True, help="a model/ folder with its processor")
    parser.add_argument("--data", required=True, help="a prepared folder (adaptspeech prepare)")
    parser.add_argument("--split", default="dev")
    parser.add_argument("--fit-split", default=None,
                        help="the split the N-best temperature and the learned confidence are fitted on (default: "
                        "two-fold on --split)")
    parser.add_argument("--language", default=None, help="the rows of this language (default: all)")
    parser.add_argument("--methods", nargs="+", default=list(DEFAULT_METHODS),
                        help="MEASURE[@ALPHA][/AGGREGATION] ... (default: a grid of max_prob, Tsallis, Rényi, Gibbs)")
    parser.add_argument("--lm", default=None, help="an LM folder (adaptspeech lm build): also the LM beam search")
    parser.add_argument("--alpha", type=float, default=0.5)
    parser.add_argument("--beta", type=float, default=1.0)
    parser.add_argument("--beam-size", type=int, default=16)
    parser.add_argument("--max-rows", type=int, default=None)
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--l2", type=float, default=None, help="the learned confidence's L2 penalty (default 1)")
    parser.add_argument("--learned-features", nargs="+", default=None, metavar="NAME",
                        help="the features of the LM beam's learned confidence (default: agreement nbest_posterior "
                        "lm_logprob lm_oov chars; any of adaptspeech.decoding.confidence_estimator.LM_BEAM_FEATURES)")
    parser.add_argument("--save-estimator", default=None, metavar="FILE",
                        help="write the learned confidence fitted on the whole fit split (or --split) as JSON (a "
                        "folder: its confidence_estimator.json)")
    parser.add_argument("--out", required=True, help="folder of the diagrams and the JSON files")
    args = parser.parse_args(argv)

    from adaptspeech.decoding.confidence import ConfidenceMethod
    from adaptspeech.decoding.confidence_estimator import BEST_PATH, DEFAULT_L2, LM_BEAM, LM_BEAM_FEATURES

    try:
        methods = [ConfidenceMethod.parse(m) for m in args.methods]
    except ValueError as err:
        parser.error(f"--methods: {err}")
    unknown = [n for n in args.learned_features or [] if n not in LM_BEAM_FEATURES]
    if unknown:
        parser.error(f"--learned-features: unknown {', '.join(unknown)}; allowed values: {', '.join(LM_BEAM_FEATURES)}")

    import torch

    from adaptspeech.data.prepared_data import load_prepared
    from adaptspeech.inference.pseudo_labels.confidence_comparison import (
        compare_methods,
        decode_split,
        fit_split_estimator,
    )
    from adaptspeech.metrics.confidence import reliability_diagram
    from adaptspeech.modeling import AdaptSpeechForCTC

    if args.threads:
        torch.set_num_threads(args.threads)
    dataset, processor = load_prepared(args.data)
    rows = _rows(args, dataset, args.split)
    model = AdaptSpeechForCTC.from_pretrained(args.model)
    decoder = None
    if args.lm:
        from adaptspeech.lm.decoder import LMDecoder, build_decoder

        decoder = LMDecoder(build_decoder(processor.tokenizer, args.lm, args.alpha, args.beta), args.beam_size)
    started = time.perf_counter()
    split = decode_split(model, processor, rows, decoder, args.beam_size if decoder else None)
    fit = None
    if args.fit_split and args.fit_split != args.split:
        fit = decode_split(model, processor, _rows(args, dataset, args.fit_split), decoder,
                           args.beam_size if decoder else None)
    l2 = DEFAULT_L2 if args.l2 is None else args.l2
    out = Path(args.out)
    title = f"{Path(args.model).parent.name} on {args.split}" + (f" ({args.language})" if args.language else "")
    names = {LM_BEAM: args.learned_features} if args.learned_features else None
    results = compare_methods(split, processor.tokenizer, methods, fit=fit, out_dir=out, title=title, l2=l2,
                              learned_features=names)
    seconds = time.perf_counter() - started
    for name, r in results.items():
        if "skipped" in r:
            print(f"{name}: not fitted ({r['skipped']})")
    scored = [(name, r) for name, r in results.items() if "skipped" not in r]
    ranked = sorted(scored, key=lambda item: -item[1]["roc_auc"] if item[1]["roc_auc"] == item[1]["roc_auc"] else 0.0)
    print("| method | words | correct % | ROC AUC | ECE | N-best temperature |")
    print("| --- | --- | --- | --- | --- | --- |")
    for name, r in ranked:
        temperature = r.get("temperature", "")
        temperature = ", ".join(f"{t:g}" for t in temperature) if isinstance(temperature, list) else temperature
        print(f"| {name} | {r['words']} | {100 * r['correct_share']:.1f} | {r['roc_auc']:.3f} | {r['ece']:.3f} | "
              f"{temperature} |")
    default = ConfidenceMethod().name
    chosen = {name: r for name, r in scored if name.startswith(f"best path {default}")
              or name.startswith(f"LM beam {default.rsplit('/', 1)[0]} T=1") or r["method"] == "learned"}
    chosen.update(dict(ranked[:1]))
    reliability_diagram(chosen, out / "reliability.png", title)
    (out / "calibration.json").write_text(json.dumps(
        {"model": args.model, "data": args.data, "split": args.split, "fit_split": args.fit_split,
         "language": args.language, "rows": len(rows), "seconds": seconds, "methods": results}, indent=1,
        default=float) + "\n")
    print(f"wrote {out / 'reliability.png'}, {len(results)} reliability_*.png and {out / 'calibration.json'}")
    if args.save_estimator:
        fitted_on = fit if fit is not None else split
        estimator = fit_split_estimator(fitted_on, processor.tokenizer, LM_BEAM if decoder else BEST_PATH, l2, {
            "model": args.model, "data": args.data, "split": args.fit_split or args.split, "language": args.language,
            "lm": args.lm, "alpha": args.alpha if decoder else None, "beta": args.beta if decoder else None,
            "beam_size": args.beam_size if decoder else None}, (names or {}).get(LM_BEAM) if decoder else None)
        print(f"wrote {estimator.save(args.save_estimator)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
