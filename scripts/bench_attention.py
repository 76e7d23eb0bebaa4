"""Benchmark the swappable encoder attention kinds against transformers' own attention, in one run.

Usage::

    python scripts/bench_attention.py                       # T = 250 .. 4000 at widths 768/12 and 144/4
    python scripts/bench_attention.py --quick               # T = 250, 500, 1000 at width 144/4, 2 rounds
    python scripts/bench_attention.py --widths 768:12 --lengths 500 1000 --rounds 9 --output bench.md
    python scripts/bench_attention.py --rel-pos-memory      # issue 16: blockwise rel_pos, T = 1000, 4000, 16000

What is measured, for every contender at every length ``T`` (batch ``--batch``, no padding, float32, CPU,
``--threads`` torch threads, default 2):

* **time**: one forward + backward pass of the attention sub-layer alone (``out.sum().backward()``: gradients
  for the input and every trainable parameter), after one warm-up pass. The contenders run in interleaved rounds
  (one pass of each per round) so that load from other processes hits them alike, and each keeps its fastest pass
  (``time.perf_counter``), the least disturbed estimate on a shared machine. Rounds stop after ``--rounds`` or
  once a length has used ``--budget`` seconds (at least 2 rounds); contenders cut short then get more passes, up
  to ``--rounds``, within an equal share of the budget. Growth = time at ``T`` / time at ``T/2``.
* **peak memory**: one more pass under ``torch.profiler`` with ``profile_memory=True``. The profiler records
  every CPU allocation and free of the pass with its size; the running sum of those events, in time order, is the
  memory the pass holds at each moment, and its maximum is the peak: activations kept for backward, temporaries,
  and the gradients (of the input and the weights). Weights and the input, allocated before the pass, are not
  counted, the same for every contender. (``tracemalloc`` cannot see torch's allocator and the process RSS keeps
  freed pages, so neither measures this; the profiler needs no GPU.)

Contenders: ours (``mhsa``, ``rel_pos`` on its full ``T x T`` path (``memory_efficient: false``, whatever T),
``rel_pos_blockwise`` (``memory_efficient: true``: query blocks, memory linear in T), ``ldsa`` with ``c = 15``,
``ldsa_hybrid`` (LDSA then MHSA), ``synthesizer_dense`` with ``N = 16``, ``synthesizer_random``, and
``synth_fixed_frozen``: the random synthesizer with the seed's fixed-pattern initialisation, frozen), transformers'
``Wav2Vec2Attention`` with its default SDPA implementation (``hf_sdpa``) and its eager one (``hf_eager``), and
``Wav2Vec2ConformerSelfAttention`` with relative positions (``hf_rel_sdpa``, ``hf_rel_eager``; transformers'
relative attention adds its position term to the SDPA mask). Dropout is 0 everywhere. *Speed* = baseline time / our
time (above 1 = faster), *memory* = our peak / baseline peak (below 1 = smaller), against ``hf_sdpa`` / ``hf_eager``
measured in the same run (``rel_pos`` also against ``hf_rel_*``). The synthesizers are built with
``synthesizer_max_len = T`` (the smallest model that accepts the input). ``rel_pos`` also reports its largest output
difference to transformers' relative attention with copied weights.

``--rel-pos-memory`` (issue 16) compares, at width 768 / 12 heads and T = 1000, 4000, 16000, ``rel_pos`` on its full
path (``memory_efficient: false``), ``rel_pos_blockwise`` (``memory_efficient: true``, ``--query-block-size``) and
transformers' relative attention ``hf_rel_sdpa``, with the same time and peak-memory measurements. A contender whose
memory is quadratic in T is skipped where its estimated peak (its peak at the longest length measured so far times
the squared length ratio) exceeds ``--max-quadratic-gb`` (default 8): at T = 16000 the full paths would need about
50 GB. Lengths of 8000 frames or more get a single pass, under the memory profiler, which gives both the peak and
the time (no warm-up: a pass takes minutes there, so one-time costs do not matter). Targets:
blockwise peak <= 0.1 x ``hf_rel_sdpa``'s at T = 4000, blockwise time <= 1.3 x the full path's at T = 1000,
blockwise peak(16000) / peak(4000) <= 4.5, and equal outputs (max abs difference to transformers <= 1e-5).

Targets (issue 4, 2 CPU cores): ``ldsa`` time(4000) / time(2000) <= 2.3, speed vs ``hf_sdpa`` >= 2 at T = 4000
with memory <= 0.25 of ``hf_sdpa``'s; ``rel_pos`` speed vs ``hf_rel_sdpa`` >= 0.95 at T = 1000 with equal outputs;
fixed-pattern random synthesizer faster than ``hf_sdpa`` at T = 500. Printed as MET / MISSED with the values.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import torch
from torch import nn
from torch.profiler import ProfilerActivity, profile
from transformers import Wav2Vec2Config, Wav2Vec2ConformerConfig
from transformers.models.wav2vec2.modeling_wav2vec2 import Wav2Vec2Attention
from transformers.models.wav2vec2_conformer.modeling_wav2vec2_conformer import (
    Wav2Vec2ConformerRelPositionalEmbedding,
    Wav2Vec2ConformerSelfAttention,
)

from adaptspeech.attention import ATTENTION, AttentionConfig
from adaptspeech.attention.positional import RelativePositionTable

BASELINES = ("hf_sdpa", "hf_eager")
REL_BASELINES = ("hf_rel_sdpa", "hf_rel_eager")
Step = Callable[[], torch.Tensor]

#: our contenders: label -> AttentionConfig settings.
OURS: dict[str, dict[str, object]] = {
    "mhsa": {"kind": "mhsa"},
    "rel_pos": {"kind": "rel_pos", "memory_efficient": False},  # the full T x T path, whatever the length
    "rel_pos_blockwise": {"kind": "rel_pos", "memory_efficient": True},  # query blocks, memory linear in T
    "ldsa": {"kind": "ldsa", "context_width": 15},
    "ldsa_hybrid": {"kind": "ldsa", "context_width": 15, "hybrid": True},
    "synthesizer_dense": {"kind": "synthesizer_dense", "synthesizer_hidden": 16},
    "synthesizer_random": {"kind": "synthesizer_random"},
    "synth_fixed_frozen": {
        "kind": "synthesizer_random",
        "synthesizer_init": "fixed_patterns",
        "synthesizer_freeze": True,
    },
}
ALL = (*OURS, *BASELINES, *REL_BASELINES)
#: contenders of ``--rel-pos-memory`` and those among them whose memory grows with T^2.
REL_POS_MEMORY = ("rel_pos", "rel_pos_blockwise", "hf_rel_sdpa")
QUADRATIC = {"rel_pos", "hf_rel_sdpa", "hf_rel_eager"}


@dataclass
class Measure:
    """Fastest forward + backward time (s), peak memory (bytes) and number of timed passes."""

    seconds: float
    peak_bytes: int
    passes: int


@dataclass
class Results:
    """``table[(label, T)]`` for one width, plus ``rel_pos``'s output differences to transformers."""

    width: int
    heads: int
    table: dict[tuple[str, int], Measure] = field(default_factory=dict)
    rel_pos_diff: dict[int, float] = field(default_factory=dict)


# --- contenders ---------------------------------------------------------------------------------------------------
def hf_attention(width: int, heads: int, implementation: str) -> Wav2Vec2Attention:
    config = Wav2Vec2Config(hidden_size=width, num_attention_heads=heads, attention_dropout=0.0)
    config._attn_implementation = implementation
    return Wav2Vec2Attention(width, heads, config=config)


def hf_rel_attention(width: int, heads: int, implementation: str) -> Wav2Vec2ConformerSelfAttention:
    config = Wav2Vec2ConformerConfig(
        hidden_size=width, num_attention_heads=heads, position_embeddings_type="relative", attention_dropout=0.0
    )
    config._attn_implementation = implementation
    module = Wav2Vec2ConformerSelfAttention(config)
    nn.init.xavier_uniform_(module.pos_bias_u)  # as transformers' _init_weights does
    nn.init.xavier_uniform_(module.pos_bias_v)
    return module


def build(
    label: str, width: int, heads: int, frames: int, x: torch.Tensor, block_size: int = 256
) -> tuple[nn.Module, Step]:
    """The contender's module and a closure running its forward on ``x`` (returning ``[B, T, D]``)."""
    if label in BASELINES:
        module = hf_attention(width, heads, label.removeprefix("hf_"))
        return module, lambda: module(x)[0]
    if label in REL_BASELINES:
        rel = hf_rel_attention(width, heads, label.removeprefix("hf_rel_"))
        positions = Wav2Vec2ConformerRelPositionalEmbedding(rel.config)(x)  # once per encoder, as in transformers
        return rel, lambda: rel(x, relative_position_embeddings=positions)[0]
    config = AttentionConfig(
        hidden_size=width, num_heads=heads, synthesizer_max_len=frames, query_block_size=block_size, **OURS[label]
    )
    ours = ATTENTION.get(config.kind)(config)
    if isinstance(getattr(ours, "positions", None), RelativePositionTable):
        # the cached sinusoid table (kept across calls) is built now, as a warm-up pass would, so a single measured
        # pass does not count its one-time construction (transformers' positions are also computed out of the pass)
        ours.positions(frames + 1, x.dtype, x.device)
    return ours, lambda: ours(x)


# --- measurements -------------------------------------------------------------------------------------------------
def run_once(step: Step, x: torch.Tensor, params: list[nn.Parameter]) -> None:
    """One forward + backward pass, gradients reset first (so no pass accumulates into the previous one's)."""
    x.grad = None
    for p in params:
        p.grad = None
    step().sum().backward()


def peak_memory(step: Step, x: torch.Tensor, params: list[nn.Parameter]) -> int:
    """Peak of (allocated - freed) bytes during one forward + backward pass, from the profiler's memory events."""
    x.grad = None
    for p in params:
        p.grad = None
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        step().sum().backward()
    events = [e for e in prof.profiler.kineto_results.events() if e.name() == "[memory]"]
    current = peak = 0
    for event in sorted(events, key=lambda e: e.start_ns()):
        current += event.nbytes()
        peak = max(peak, current)
    return peak


def measure_all(
    labels: list[str],
    width: int,
    heads: int,
    frames: int,
    batch: int,
    rounds: int,
    budget: float,
    single_pass: bool = False,
    block_size: int = 256,
) -> dict[str, Measure]:
    """Interleaved timing rounds (fastest pass of each contender), then peak memory one contender at a time.

    ``single_pass``: no warm-up and no timing rounds; one pass under the memory profiler gives both the peak and
    the time (for passes of minutes, where one-time costs and the profiler's per-operator overhead are
    negligible)."""
    torch.manual_seed(0)
    x = torch.randn(batch, frames, width, requires_grad=True)
    contenders = {}
    for label in labels:
        module, step = build(label, width, heads, frames, x, block_size)
        contenders[label] = (step, [p for p in module.parameters() if p.requires_grad])
        if not single_pass:
            run_once(step, x, contenders[label][1])  # warm-up: caches, allocator
    if single_pass:
        measures = {}
        for label, (step, params) in contenders.items():
            tick = time.perf_counter()
            peak = peak_memory(step, x, params)
            measures[label] = Measure(time.perf_counter() - tick, peak, 1)
        return measures
    passes: dict[str, list[float]] = {label: [] for label in labels}

    def timed(label: str) -> None:
        step, params = contenders[label]
        tick = time.perf_counter()
        run_once(step, x, params)
        passes[label].append(time.perf_counter() - tick)

    start, done = time.perf_counter(), 0
    while done < rounds and (done < 2 or time.perf_counter() - start < budget):
        for label in labels:
            timed(label)
        done += 1
    # top-up: contenders cut short by the budget but cheap get more passes (up to ``rounds``) within an equal
    # share of the budget each, so a fast kernel's minimum does not rest on one or two samples
    for label in labels:
        while len(passes[label]) < rounds and sum(passes[label]) < budget / len(labels):
            timed(label)
    return {
        label: Measure(min(passes[label]), peak_memory(step, x, params), len(passes[label]))
        for label, (step, params) in contenders.items()
    }


def rel_pos_difference(width: int, heads: int, frames: int, label: str = "rel_pos", block_size: int = 256) -> float:
    """Largest |ours - transformers| of ``rel_pos`` (the contender ``label``'s path) with weights copied from HF's
    relative attention (eval)."""
    torch.manual_seed(0)
    hf = hf_rel_attention(width, heads, "sdpa").eval()
    config = AttentionConfig(hidden_size=width, num_heads=heads, query_block_size=block_size, **OURS[label])
    ours = ATTENTION.get("rel_pos")(config).eval()
    ours.init_from_hf(hf)
    x = torch.randn(1, frames, width)
    with torch.no_grad():
        positions = Wav2Vec2ConformerRelPositionalEmbedding(hf.config)(x)
        return (ours(x) - hf(x, relative_position_embeddings=positions)[0]).abs().max().item()


# --- report -------------------------------------------------------------------------------------------------------
def fmt(value: float | None, spec: str = ".2f") -> str:
    return "-" if value is None else format(value, spec)


def ratio(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None else a / b


def report(res: Results, lengths: list[int], labels: list[str]) -> list[str]:
    """Markdown tables for one width."""

    def seconds(label: str, t: int) -> float | None:
        m = res.table.get((label, t))
        return m.seconds if m else None

    def peak(label: str, t: int) -> float | None:
        m = res.table.get((label, t))
        return m.peak_bytes / 1e6 if m else None

    head = ["| contender | " + " | ".join(f"T={t}" for t in lengths) + " |", "|---|" + "---|" * len(lengths)]
    out = [f"### Width {res.width}, {res.heads} heads", ""]

    out += ["Forward + backward time, ms (growth from T/2 to T in brackets):", "", *head]
    for label in labels:
        cells = []
        for i, t in enumerate(lengths):
            half = seconds(label, lengths[i - 1]) if i > 0 and lengths[i - 1] * 2 == t else None
            growth = ratio(seconds(label, t), half)
            cells.append(
                fmt(seconds(label, t) and seconds(label, t) * 1e3, ".1f") + (f" ({growth:.2f}x)" if growth else "")
            )
        out.append(f"| {label} | " + " | ".join(cells) + " |")

    out += [
        "",
        "Speed vs transformers (baseline time / ours; above 1 = faster): vs `hf_sdpa` / vs `hf_eager`:",
        "",
        *head,
    ]
    for label in labels:
        cells = [
            f"{fmt(ratio(seconds(base, t), seconds(label, t)))} / {fmt(ratio(seconds(eager, t), seconds(label, t)))}"
            for t in lengths
            for base, eager in [BASELINES]
        ]
        out.append(f"| {label} | " + " | ".join(cells) + " |")

    out += ["", "Peak memory of the pass, MB:", "", *head]
    for label in labels:
        out.append(f"| {label} | " + " | ".join(fmt(peak(label, t), ".1f") for t in lengths) + " |")

    out += ["", "Memory vs transformers (our peak / baseline peak; below 1 = smaller): vs `hf_sdpa` / vs `hf_eager`:"]
    out += ["", *head]
    for label in labels:
        cells = [
            f"{fmt(ratio(peak(label, t), peak('hf_sdpa', t)))} / {fmt(ratio(peak(label, t), peak('hf_eager', t)))}"
            for t in lengths
        ]
        out.append(f"| {label} | " + " | ".join(cells) + " |")

    if "rel_pos" in labels:
        out += [
            "",
            "`rel_pos` vs transformers' relative attention (`Wav2Vec2ConformerSelfAttention`, copied weights):",
            "",
        ]
        out += ["| T | speed vs hf_rel_sdpa | speed vs hf_rel_eager | memory vs hf_rel_sdpa | max abs output diff |"]
        out += ["|---|---|---|---|---|"]
        for t in lengths:
            out.append(
                f"| {t} | {fmt(ratio(seconds('hf_rel_sdpa', t), seconds('rel_pos', t)))} "
                f"| {fmt(ratio(seconds('hf_rel_eager', t), seconds('rel_pos', t)))} "
                f"| {fmt(ratio(peak('rel_pos', t), peak('hf_rel_sdpa', t)))} | {fmt(res.rel_pos_diff.get(t), '.1e')} |"
            )
    return out


def targets(res: Results) -> list[str]:
    """The issue's targets on this width's results (they are stated for width 768, 12 heads)."""

    def seconds(label: str, t: int) -> float | None:
        m = res.table.get((label, t))
        return m.seconds if m else None

    def peak(label: str, t: int) -> float | None:
        m = res.table.get((label, t))
        return m.peak_bytes if m else None

    checks = [
        (
            "`ldsa` time(4000) / time(2000) <= 2.3",
            ratio(seconds("ldsa", 4000), seconds("ldsa", 2000)),
            lambda v: v <= 2.3,
        ),
        (
            "`ldsa` speed vs `hf_sdpa` at T=4000 >= 2",
            ratio(seconds("hf_sdpa", 4000), seconds("ldsa", 4000)),
            lambda v: v >= 2,
        ),
        (
            "`ldsa` memory vs `hf_sdpa` at T=4000 <= 0.25",
            ratio(peak("ldsa", 4000), peak("hf_sdpa", 4000)),
            lambda v: v <= 0.25,
        ),
        (
            "`rel_pos` speed vs `hf_rel_sdpa` at T=1000 >= 0.95",
            ratio(seconds("hf_rel_sdpa", 1000), seconds("rel_pos", 1000)),
            lambda v: v >= 0.95,
        ),
        (
            "`rel_pos` max output diff vs transformers at T=1000 <= 1e-5",
            res.rel_pos_diff.get(1000),
            lambda v: v <= 1e-5,
        ),
        (
            "`synth_fixed_frozen` speed vs `hf_sdpa` at T=500 > 1",
            ratio(seconds("hf_sdpa", 500), seconds("synth_fixed_frozen", 500)),
            lambda v: v > 1,
        ),
    ]
    out = ["", f"Targets (width {res.width}, {res.heads} heads):", ""]
    for name, value, ok in checks:
        verdict = "not measured" if value is None else ("MET" if ok(value) else "MISSED")
        out.append(f"- {name}: {fmt(value, '.1e' if 'diff' in name else '.2f')} -> {verdict}")
    return out


def rel_pos_memory(args: argparse.Namespace) -> list[str]:
    """Issue 16: blockwise ``rel_pos`` against its full path and transformers' relative attention, one run."""
    width, heads = 768, 12
    table: dict[tuple[str, int], Measure] = {}
    diffs: dict[int, float] = {}
    skipped: dict[tuple[str, int], float] = {}  # estimated peak (bytes) of the contenders left out
    longest: dict[str, int] = {}
    for frames in args.lengths:
        labels = []
        for label in REL_POS_MEMORY:
            if label in QUADRATIC and label in longest:
                estimate = table[(label, longest[label])].peak_bytes * (frames / longest[label]) ** 2
                if estimate > args.max_quadratic_gb * 1e9:
                    skipped[(label, frames)] = estimate
                    print(f"  T={frames} {label}: skipped, would need ~{estimate / 1e9:.0f} GB", flush=True)
                    continue
            labels.append(label)
        measures = measure_all(
            labels,
            width,
            heads,
            frames,
            args.batch,
            args.rounds,
            args.budget,
            single_pass=frames >= 8000,
            block_size=args.query_block_size,
        )
        for label, m in measures.items():
            table[(label, frames)] = m
            longest[label] = frames
            print(
                f"  T={frames} {label}: {m.seconds * 1e3:.1f} ms, {m.peak_bytes / 1e6:.1f} MB ({m.passes} passes)",
                flush=True,
            )
        if "hf_rel_sdpa" in labels:
            diffs[frames] = rel_pos_difference(width, heads, frames, "rel_pos_blockwise", args.query_block_size)

    def get(label: str, t: int, attr: str) -> float | None:
        m = table.get((label, t))
        return None if m is None else getattr(m, attr)

    def cell(label: str, t: int) -> str:
        if (label, t) in skipped:
            return f"skipped (~{skipped[(label, t)] / 1e9:.0f} GB)"
        return f"{fmt(get(label, t, 'seconds') and get(label, t, 'seconds') * 1e3, '.0f')} ms, " + (
            f"{fmt(get(label, t, 'peak_bytes') and get(label, t, 'peak_bytes') / 1e6, '.1f')} MB"
        )

    lengths = args.lengths
    out = [
        "",
        f"### `rel_pos` memory (width {width}, {heads} heads, query block {args.query_block_size})",
        "",
        "Forward + backward time and peak memory:",
        "",
        "| contender | " + " | ".join(f"T={t}" for t in lengths) + " |",
        "|---|" + "---|" * len(lengths),
    ]
    out += [f"| {label} | " + " | ".join(cell(label, t) for t in lengths) + " |" for label in REL_POS_MEMORY]
    out += [
        "",
        "| T | blockwise peak / hf_rel_sdpa peak | blockwise peak / full-path peak | blockwise time / full-path time "
        "| blockwise time / hf_rel_sdpa time | max abs output diff to transformers |",
        "|---|---|---|---|---|---|",
    ]
    for t in lengths:
        bw_peak, bw_time = get("rel_pos_blockwise", t, "peak_bytes"), get("rel_pos_blockwise", t, "seconds")
        out.append(
            f"| {t} | {fmt(ratio(bw_peak, get('hf_rel_sdpa', t, 'peak_bytes')), '.3f')} "
            f"| {fmt(ratio(bw_peak, get('rel_pos', t, 'peak_bytes')), '.3f')} "
            f"| {fmt(ratio(bw_time, get('rel_pos', t, 'seconds')))} "
            f"| {fmt(ratio(bw_time, get('hf_rel_sdpa', t, 'seconds')))} | {fmt(diffs.get(t), '.1e')} |"
        )
    if skipped:
        names = ", ".join(sorted({f"`{label}`" for label, _ in skipped}))
        out += ["", f"Skipped: {names} where the estimated peak exceeds {args.max_quadratic_gb:g} GB (quadratic in T)."]
    checks = [
        (
            "blockwise peak memory vs `hf_rel_sdpa` at T=4000 <= 0.1",
            ratio(get("rel_pos_blockwise", 4000, "peak_bytes"), get("hf_rel_sdpa", 4000, "peak_bytes")),
            lambda v: v <= 0.1,
        ),
        (
            "blockwise time vs the full path at T=1000 <= 1.3",
            ratio(get("rel_pos_blockwise", 1000, "seconds"), get("rel_pos", 1000, "seconds")),
            lambda v: v <= 1.3,
        ),
        (
            "blockwise peak(16000) / peak(4000) <= 4.5",
            ratio(get("rel_pos_blockwise", 16000, "peak_bytes"), get("rel_pos_blockwise", 4000, "peak_bytes")),
            lambda v: v <= 4.5,
        ),
        ("blockwise max output diff vs transformers <= 1e-5", max(diffs.values(), default=None), lambda v: v <= 1e-5),
    ]
    out += ["", "Targets (issue 16):", ""]
    for name, value, ok in checks:
        verdict = "not measured" if value is None else ("MET" if ok(value) else "MISSED")
        out.append(f"- {name}: {fmt(value, '.1e' if 'diff' in name else '.3f')} -> {verdict}")
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="T = 250, 500, 1000 at width 144/4, 2 rounds")
    parser.add_argument("--lengths", type=int, nargs="+", default=[250, 500, 1000, 2000, 4000])
    parser.add_argument("--widths", nargs="+", default=["768:12", "144:4"], help="WIDTH:HEADS pairs")
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=9, help="interleaved timing rounds per length (at most)")
    parser.add_argument("--budget", type=float, default=120.0, help="seconds of timing rounds per length (soft)")
    parser.add_argument("--threads", type=int, default=2, help="torch threads (the targets are for 2 cores)")
    parser.add_argument("--contenders", nargs="+", default=list(ALL), help=f"subset of {', '.join(ALL)}")
    parser.add_argument("--output", help="also write the markdown report to this file")
    parser.add_argument(
        "--rel-pos-memory",
        action="store_true",
        help="issue 16: blockwise rel_pos vs its full path and hf_rel_sdpa at width 768/12, T = 1000 4000 16000 "
        "(--lengths overrides), 3 rounds, 120 s budget per length",
    )
    parser.add_argument("--query-block-size", type=int, default=256, help="rel_pos_blockwise: queries per block")
    parser.add_argument(
        "--max-quadratic-gb", type=float, default=8.0, help="--rel-pos-memory: skip T x T contenders above this"
    )
    args = parser.parse_args(argv)
    if args.quick:
        args.lengths, args.widths, args.rounds = [250, 500, 1000], ["144:4"], 2
    if args.rel_pos_memory:
        if "--lengths" not in (argv if argv is not None else sys.argv[1:]):
            args.lengths = [1000, 4000, 16000]
        if "--rounds" not in (argv if argv is not None else sys.argv[1:]):
            args.rounds = 3
    unknown = sorted(set(args.contenders) - set(ALL))
    if unknown:
        parser.error(f"unknown contender(s) {unknown}; allowed: {', '.join(ALL)}")
    torch.set_num_threads(args.threads)
    lines = [
        f"torch {torch.__version__}, {torch.get_num_threads()} threads, batch {args.batch}, float32, CPU; "
        f"fastest of up to {args.rounds} passes (interleaved rounds); load average at start "
        f"{' / '.join(f'{v:.1f}' for v in os.getloadavg())} (1 / 5 / 15 min)",
    ]
    print(lines[0], flush=True)
    if args.rel_pos_memory:
        section = rel_pos_memory(args)
        print("\n".join(section), flush=True)
        lines += section
    for spec in [] if args.rel_pos_memory else args.widths:
        width, heads = (int(v) for v in spec.split(":"))
        res = Results(width, heads)
        for frames in args.lengths:
            for label, m in measure_all(
                args.contenders, width, heads, frames, args.batch, args.rounds, args.budget
            ).items():
                res.table[(label, frames)] = m
                print(
                    f"  width {width} T={frames} {label}: {m.seconds * 1e3:.1f} ms, {m.peak_bytes / 1e6:.1f} MB "
                    f"({m.passes} passes)",
                    flush=True,
                )
            if "rel_pos" in args.contenders:
                res.rel_pos_diff[frames] = rel_pos_difference(width, heads, frames)
        section = ["", *report(res, args.lengths, args.contenders), *targets(res)]
        print("\n".join(section), flush=True)
        lines += section
    lines.append(f"\nLoad average at the end: {' / '.join(f'{v:.1f}' for v in os.getloadavg())}")
    print(lines[-1])
    if args.output:
        with open(args.output, "w") as handle:
            handle.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
