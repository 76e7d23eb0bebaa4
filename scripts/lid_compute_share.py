"""What the language-ID head adds to the encoder's compute (docs/lid.md), measured in one run.

Usage::

    python scripts/lid_compute_share.py                  # the demo's base shape, 3-s and 10-s utterances, layer 1
    python scripts/lid_compute_share.py --shape xlsr --seconds 5 --rounds 3
    python scripts/lid_compute_share.py --tiny            # toy size (CI)
    python scripts/lid_compute_share.py --top-k 1 2 3 --layer 2 --layer-mix   # the hybrid's cost for k = 1..3

Model: an adaptspeech model of the chosen shape (``demo``: the synthetic demo's 4-layer, width-144 filterbank
Conformer with one bottleneck adapter (r = 64) per language on every layer, 6 languages; ``xlsr``: XLS-R 300M's
wav2vec2 shape, 24 layers, width 1024, r = 64; ``tiny``: the library's tiny fbank Conformer), random weights, a
language-ID head over 6 languages (attentive statistics pooling, scorer width 64) on ``--layer``.

Computations, batch 1, float32, CPU, ``--threads`` torch threads (default 2):

* **encoder**: the routed recognition pass, encoder + adapters of one language + CTC head (what transcribing costs);
* **head**: the language-ID head alone (pooling + classifier) on the pooled layer's hidden states;
* **LID pass**: the language-ID pass: the encoder without adapters up to the pooled layer (the layers above it are
  not run) + the head;
* **LID pass + prefix**: the same pass keeping what it computed before the first adapter layer
  (``lid_logits_with_prefix``, :mod:`adaptspeech.heads.encoder_prefix`);
* **encoder from prefix**: the routed recognition pass started from that prefix (``reusing_encoder_prefix``): the
  front end and the layers below the first adapter layer are not run again;
* FLOPs of each from ``torch.utils.flop_counter.FlopCounterMode`` (matrix products and convolutions; the elementwise
  rest is not counted), and time: the fastest of ``--rounds`` interleaved passes after one warm-up (the least
  disturbed estimate on a shared machine).

* **candidate pass**: one candidate of the hybrid score (:mod:`adaptspeech.inference.language_id.hybrid`): the routed
  pass from the prefix, its best path and the CTC log-likelihood of that path (``best_path_scores``; the LM score of the
  hypothesis is a KenLM lookup per word and is not counted).

Printed, as ratios to the encoder pass measured in the same run: the head's share (target: the head adds < 1% to the
encoder's compute), and what routing by language ID adds to transcribing, **before** (LID pass, then the whole
recognition pass: ``LID pass / encoder``) and **after** sharing the prefix (``(LID pass + prefix + encoder from
prefix - encoder) / encoder``), for FLOPs and time. With ``--top-k``, a second table: what routing adds for each
``k`` (:func:`routing_cost`): acoustic re-ranking (each candidate decoded and CTC-scored: ``2k`` passes from the
prefix) and hybrid scoring (``k`` candidate passes, then the chosen language's decoding: ``k + 1``).
"""

from __future__ import annotations

import argparse
import json
import time
from typing import Any

import torch
from torch.utils.flop_counter import FlopCounterMode

from adaptspeech import AdaptSpeechConfig, AdaptSpeechForCTC
from adaptspeech.testing import TINY_BACKBONES

LANGUAGES = ["cs", "pl", "sl", "it", "es", "sk"]
SHAPES: dict[str, dict[str, Any]] = {
    "demo": {"backbone_type": "fbank_conformer", "backbone_config": {
        "hidden_size": 144, "num_hidden_layers": 4, "num_attention_heads": 4, "intermediate_size": 576,
        "conv_depthwise_kernel_size": 15}},
    "xlsr": {"backbone_type": "wav2vec2", "backbone_config": {
        "hidden_size": 1024, "num_hidden_layers": 24, "num_attention_heads": 16, "intermediate_size": 4096,
        "do_stable_layer_norm": True, "feat_extract_norm": "layer", "conv_bias": True}},
    "tiny": {"backbone_type": "fbank_conformer", "backbone_config": dict(TINY_BACKBONES["fbank_conformer"])},
}


VOCAB_TEXT = "abcdefghijklmnopqrstuvwxyzáéíóúýčďě"
"""35 characters: with the 5 special tokens, the 40-token vocabulary of the measured models."""


def build(shape: str, layer: int, layer_mix: bool = False) -> AdaptSpeechForCTC:
    """A random model of ``shape`` with an adapter per language (one active) and a language-ID head on ``layer``
    (with ``layer_mix``: a learned mix of layers 0 .. ``layer``)."""
    torch.manual_seed(0)
    config = AdaptSpeechConfig(**SHAPES[shape], vocab_size=40, adapter_languages=LANGUAGES,
                               adapter_defaults={"bottleneck": 64}, active_languages=["sk"])
    model = AdaptSpeechForCTC(config).eval()
    model.add_lid_head(LANGUAGES, pooling="attentive_stats", attention_dim=64, layer=layer, layer_mix=layer_mix)
    return model


def tokenizer_of(folder: str) -> Any:
    """A CTC tokenizer over :data:`VOCAB_TEXT` (40 tokens, the measured models' vocabulary) written to ``folder``."""
    from adaptspeech.data.processor import build_processor
    from adaptspeech.data.text import build_vocab

    return build_processor(build_vocab([VOCAB_TEXT]), folder).tokenizer


def inputs_of(model: AdaptSpeechForCTC, seconds: float) -> torch.Tensor:
    """A random model input of ``seconds`` (16-kHz samples, or 80 fbank bins at 100 frames a second)."""
    if model.main_input_name == "input_values":
        return torch.randn(1, int(16000 * seconds))
    bins = model.config.backbone_config.num_mel_bins
    return torch.randn(1, int(100 * seconds), bins)


def computations(model: AdaptSpeechForCTC, x: torch.Tensor, tokenizer: Any) -> dict[str, Any]:
    """name -> a no-argument function running it."""
    from adaptspeech.inference.language_id.hybrid import best_path_scores
    from adaptspeech.inference.language_id.routing import routed_to

    key = model.main_input_name
    layer = model.config.lid.resolved_layer(model.config.num_encoder_layers)
    with model.without_adapters():
        _, mask, _, _ = model.encode(x)
    captured: list[torch.Tensor] = []
    handle = model.config.backbone_spec.encoder_layers(model.backbone)[layer].register_forward_hook(
        lambda m, a, o: captured.append(o[0] if isinstance(o, tuple) else o))
    with model.without_adapters():
        model.encode(x)
    handle.remove()
    hidden = captured[0]
    _, prefix = model.lid_logits_with_prefix(x)

    def from_prefix() -> Any:
        with model.reusing_encoder_prefix(prefix):
            return model(**{key: x})

    def candidate() -> Any:
        with routed_to(model, "sk"), model.reusing_encoder_prefix(prefix):
            return best_path_scores(model, {key: x}, tokenizer)

    if model.config.lid.layer_mix:
        hidden = torch.stack([hidden] * (layer + 1))  # the mix's input: as many layers' outputs (its cost)
    return {
        "encoder": lambda: model(**{key: x}),
        "head": lambda: model.lid_head(hidden, mask),
        "LID pass": lambda: model.lid_logits(x),
        "LID pass + prefix": lambda: model.lid_logits_with_prefix(x),
        "encoder from prefix": from_prefix,
        "candidate pass": candidate,
        "prefix start": prefix.start,
    }


def flops(function: Any) -> int:
    counter = FlopCounterMode(display=False)
    with counter:
        function()
    return int(counter.get_total_flops())


def fastest(functions: dict[str, Any], rounds: int) -> dict[str, float]:
    """The fastest of ``rounds`` interleaved passes of each function after one warm-up, in seconds."""
    best = {name: float("inf") for name in functions}
    for function in functions.values():
        function()
    for _ in range(rounds):
        for name, function in functions.items():
            start = time.perf_counter()
            function()
            best[name] = min(best[name], time.perf_counter() - start)
    return best


def routing_extra(cost: dict[str, float]) -> dict[str, float]:
    """What routing adds to the recognition pass, as a ratio to it: ``before`` (the LID pass, then the whole
    recognition pass) and ``after`` (the LID pass keeping its prefix, then the recognition pass from it)."""
    encoder = cost["encoder"]
    after = cost["LID pass + prefix"] + cost["encoder from prefix"] - encoder
    return {"before": cost["LID pass"] / encoder, "after": after / encoder}


def routing_cost(cost: dict[str, float], k: int, scoring: str) -> float:
    """What routing adds to the recognition pass for ``k`` candidates, as a ratio to it: the LID pass keeping its
    prefix, then ``acoustic``: one pass from the prefix for ``k = 1``, else each candidate decoded and CTC-scored
    (``2k`` passes); ``hybrid``: ``k`` candidate passes and the chosen language's decoding from the prefix."""
    passes = {"acoustic": cost["encoder from prefix"] * (1 if k == 1 else 2 * k),
              "hybrid": k * cost["candidate pass"] + cost["encoder from prefix"]}[scoring]
    return (cost["LID pass + prefix"] + passes - cost["encoder"]) / cost["encoder"]


def measure(shape: str, seconds: float, layer: int, rounds: int, layer_mix: bool = False,
            top_k: tuple[int, ...] = ()) -> dict[str, Any]:
    import tempfile

    model = build(shape, layer, layer_mix)
    with torch.no_grad(), tempfile.TemporaryDirectory() as folder:
        functions = computations(model, inputs_of(model, seconds), tokenizer_of(folder))
        start = functions.pop("prefix start")
        counts = {name: flops(function) for name, function in functions.items()}
        times = fastest(functions, rounds)
    parameters = sum(p.numel() for p in model.lid_head.parameters())
    return {
        "shape": shape, "seconds": seconds, "layer": model.config.lid.resolved_layer(model.config.num_encoder_layers),
        "layers": model.config.num_encoder_layers, "prefix_start": start, "lid_parameters": parameters,
        "encoder_parameters": sum(p.numel() for p in model.parameters()) - parameters,
        "flops": counts, "seconds_per_pass": times,
        "flop_share": {name: counts[name] / counts["encoder"] for name in counts if name != "encoder"},
        "time_share": {name: times[name] / times["encoder"] for name in times if name != "encoder"},
        "routing_extra_flops": routing_extra({k: float(v) for k, v in counts.items()}),
        "routing_extra_time": routing_extra(times),
        "layer_mix": layer_mix,
        "top_k": {f"{scoring} k={k}": {"flops": routing_cost({n: float(v) for n, v in counts.items()}, k, scoring),
                                       "time": routing_cost(times, k, scoring)}
                  for k in top_k for scoring in ("acoustic", "hybrid") if not (scoring == "hybrid" and k == 1)},
    }


def markdown(rows: list[dict[str, Any]]) -> str:
    lines = ["| shape | utterance | pooled layer | recognition from layer | head params | head FLOPs share | "
             "head time share | routing adds, FLOPs: before -> after | after / before | routing adds, time: before "
             "-> after |", "|" + " --- |" * 10]
    for r in rows:
        f, t = r["routing_extra_flops"], r["routing_extra_time"]
        lines.append(
            f"| {r['shape']} | {r['seconds']:g} s | {r['layer']} of 0..{r['layers'] - 1} | {r['prefix_start']} | "
            f"{r['lid_parameters']:,} | {100 * r['flop_share']['head']:.3f}% | {100 * r['time_share']['head']:.2f}% | "
            f"{100 * f['before']:.1f}% -> {100 * f['after']:.1f}% | {f['after'] / f['before']:.3f} | "
            f"{100 * t['before']:.1f}% -> {100 * t['after']:.1f}% |")
    return "\n".join(lines)


def top_k_markdown(rows: list[dict[str, Any]]) -> str:
    """What routing adds to transcribing for each ``k`` and scoring (FLOPs and CPU time, as ratios to recognition
    alone)."""
    lines = ["| shape | utterance | pooled | scoring, candidates | routing adds (FLOPs) | routing adds (CPU time) |",
             "|" + " --- |" * 6]
    for r in rows:
        pooled = f"layers 0..{r['layer']} (mix)" if r["layer_mix"] else f"layer {r['layer']}"
        for name, cost in r["top_k"].items():
            lines.append(f"| {r['shape']} | {r['seconds']:g} s | {pooled} | {name} | {100 * cost['flops']:.1f}% | "
                         f"{100 * cost['time']:.1f}% |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shape", choices=list(SHAPES), default="demo")
    parser.add_argument("--seconds", type=float, nargs="+", default=[3.0, 10.0])
    parser.add_argument("--layer", type=int, default=1, help="the pooled encoder layer (default 1, as the demo)")
    parser.add_argument("--layer-mix", action="store_true", help="a learned mix of layers 0..--layer")
    parser.add_argument("--top-k", type=int, nargs="+", default=[], metavar="K",
                        help="also state what routing adds with K candidates, acoustic and hybrid (e.g. 1 2 3)")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--tiny", action="store_true", help="toy size: --shape tiny --seconds 1 --rounds 2 --layer 0")
    parser.add_argument("--json", default=None, metavar="FILE", help="also write every figure as JSON")
    args = parser.parse_args(argv)
    if args.tiny:
        args.shape, args.seconds, args.rounds, args.layer = "tiny", [1.0], 2, 0
    torch.set_num_threads(args.threads)
    if any(k < 1 for k in args.top_k):
        parser.error(f"--top-k: every K must be at least 1, got {args.top_k}")
    rows = [measure(args.shape, seconds, args.layer, args.rounds, args.layer_mix, tuple(args.top_k))
            for seconds in args.seconds]
    print(markdown(rows))
    if args.top_k:
        print()
        print(top_k_markdown(rows))
    worst = max(r["flop_share"]["head"] for r in rows)
    print(f"target: the head adds < 1% to the encoder's FLOPs: {'MET' if worst < 0.01 else 'MISSED'} "
          f"(largest share {100 * worst:.3f}%)")
    if args.json:
        with open(args.json, "w") as handle:
            json.dump(rows, handle, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
