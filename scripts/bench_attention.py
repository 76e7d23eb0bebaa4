"""Benchmark the swappable encoder attention kinds against transformers' own attention, in one run.

Usage::

    python scripts/bench_attention.py                       # T = 250 .. 4000 at widths 768/12 and 144/4
    python scripts/bench_attention.py --quick               # T = 250, 500, 1000 at width 144/4, 2 rounds
    python scripts/bench_attention.py --widths 768:12 --lengths 500 1000 --rounds 9 --output bench.md

Two more benchmarks import this script's contenders, builders, measurements and formatting:
``scripts/bench_attention_rel_pos_memory.py`` (blockwise ``rel_pos`` memory against T) and
``scripts/bench_attention_table1.py`` (Table 1 of Wu et al. 2022). The old ``--rel-pos-memory`` and ``--table1``
flags are refused here with a message naming them.

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
``synth_fixed_frozen``: the random synthesizer with the fixed-pattern initialisation, frozen), transformers'
``Wav2Vec2Attention`` with its default SDPA implementation (``hf_sdpa``) and its eager one (``hf_eager``), and
``Wav2Vec2ConformerSelfAttention`` with relative positions (``hf_rel_sdpa``, ``hf_rel_eager``; transformers'
relative attention adds its position term to the SDPA mask). Dropout is 0 everywhere. *Speed* = baseline time / our
time (above 1 = faster), *memory* = our peak / baseline peak (below 1 = smaller), against ``hf_sdpa`` / ``hf_eager``
measured in the same run (``rel_pos`` also against ``hf_rel_*``). The synthesizers are built with
``synthesizer_max_len = T`` (the smallest model that accepts the input). ``rel_pos`` also reports its largest output
difference to transformers' relative attention with copied weights.

Targets (2 CPU cores): ``ldsa`` time(4000) / time(2000) <= 2.3, speed vs ``hf_sdpa`` >= 2 at T = 4000
with memory <= 0.25 of ``hf_sdpa``'s; ``rel_pos`` speed vs ``hf_rel_sdpa`` >= 0.95 at T = 1000 with equal outputs;
fixed-pattern random synthesizer faster than ``hf_sdpa`` at T = 500. Printed as MET / MISSED with the values.
"""

from __future__ import annotations

import argparse
import functools
import math
import os
import statistics
import sys
import time
from collections.abc import Callable, Hashable
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

from adaptspeech.attention import ATTENTION, AttentionConfig, settings_for_kind
from adaptspeech.attention.positional import RelativePositionTable

BASELINES = ("hf_sdpa", "hf_eager")
REL_BASELINES = ("hf_rel_sdpa", "hf_rel_eager")
Step = Callable[[], torch.Tensor]
#: one timed step: (fastest pass in s, number of passes, median pass in s).
Timing = tuple[float, int, float]

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

#: our contenders for Table 1 of Wu et al. 2022 (``scripts/bench_attention_table1.py``) that ``OURS`` lacks (the
#: sparse block size is set per length, see ``sparse_block``; the LSH kinds keep ``lsh_num_keys`` C = 64, the paper
#: gives no C).
TABLE1_KINDS: dict[str, dict[str, object]] = {
    "shared_qk": {"kind": "shared_qk"},
    "sparse_strided": {"kind": "sparse_strided"},
    "sparse_fixed": {"kind": "sparse_fixed"},
    **{kind: {"kind": kind} for kind in ("lsh_sign_alsh", "lsh_xbox", "lsh_xbox_qnf", "lsh_simple", "lsh_simple_alsh")},
    "synthesizer_dense_shared": {"kind": "synthesizer_dense_shared", "synthesizer_hidden": 16},
    "ours_fixed": {"kind": "synthesizer_random", "synthesizer_init": "fixed_patterns"},  # learned in pre-training
}
SETTINGS: dict[str, dict[str, object]] = {**OURS, **TABLE1_KINDS}
#: flags of the benchmarks that moved to their own scripts -> that script.
MOVED = {
    "--rel-pos-memory": "scripts/bench_attention_rel_pos_memory.py",
    "--table1": "scripts/bench_attention_table1.py",
}


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


def sparse_block(frames: int) -> int:
    """The Sparse Transformer's block / stride ``l ~ sqrt(T)`` (Child et al. 2019), as Wu et al. 2022 set it."""
    return max(1, round(math.sqrt(frames)))


def build(
    label: str,
    width: int,
    heads: int,
    frames: int,
    x: torch.Tensor,
    block_size: int = 256,
    sparse_block_size: int | None = None,
) -> tuple[nn.Module, Step]:
    """The contender's module and a closure running its forward on ``x`` (returning ``[B, T, D]``).

    ``sparse_block_size``: ``l`` of the sparse kinds (None: ``sparse_block(frames)``)."""
    if label in BASELINES:
        module = hf_attention(width, heads, label.removeprefix("hf_"))
        return module, lambda: module(x)[0]
    if label in REL_BASELINES:
        rel = hf_rel_attention(width, heads, label.removeprefix("hf_rel_"))
        positions = Wav2Vec2ConformerRelPositionalEmbedding(rel.config)(x)  # once per encoder, as in transformers
        return rel, lambda: rel(x, relative_position_embeddings=positions)[0]
    settings = dict(SETTINGS[label])
    if str(settings["kind"]).startswith("sparse_"):
        settings["sparse_block_size"] = sparse_block_size or sparse_block(frames)
    shared = {"hidden_size": width, "num_heads": heads, "synthesizer_max_len": frames, "query_block_size": block_size}
    config = AttentionConfig(**settings_for_kind(str(settings["kind"]), {**shared, **settings}))
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
    timed = fastest(
        {label: functools.partial(run_once, step, x, params) for label, (step, params) in contenders.items()},
        rounds,
        budget,
    )
    return {
        label: Measure(timed[label][0], peak_memory(step, x, params), timed[label][1])
        for label, (step, params) in contenders.items()
    }


def fastest(steps: dict[Hashable, Callable[[], object]], rounds: int, budget: float) -> dict[Hashable, Timing]:
    """``name -> (fastest pass in s, passes, median pass in s)``: interleaved rounds (one pass of each step per
    round, so load from other processes hits them alike) until ``rounds`` or, after 2 rounds, ``budget`` seconds;
    then steps cut short by the budget but cheap get more passes (up to ``rounds``) within an equal share of the
    budget each, so a fast step's minimum does not rest on one or two samples."""
    passes: dict[Hashable, list[float]] = {name: [] for name in steps}

    def timed(name: Hashable) -> None:
        tick = time.perf_counter()
        steps[name]()
        passes[name].append(time.perf_counter() - tick)

    start, done = time.perf_counter(), 0
    while done < rounds and (done < 2 or time.perf_counter() - start < budget):
        for name in steps:
            timed(name)
        done += 1
    for name in steps:
        while len(passes[name]) < rounds and sum(passes[name]) < budget / len(steps):
            timed(name)
    return {name: (min(times), len(times), statistics.median(times)) for name, times in passes.items()}


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
    """The targets on this width's results (they are stated for width 768, 12 heads)."""

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


def header(batch: int, rounds: int) -> str:
    """The report's first line: torch version and threads, batch, rounds and the load average at the start."""
    return (
        f"torch {torch.__version__}, {torch.get_num_threads()} threads, batch {batch}, float32, CPU; "
        f"fastest of up to {rounds} passes (interleaved rounds); load average at start "
        f"{' / '.join(f'{v:.1f}' for v in os.getloadavg())} (1 / 5 / 15 min)"
    )


def add_run_options(parser: argparse.ArgumentParser, rounds: int = 9) -> None:
    """The options every attention benchmark takes: batch, timing rounds and budget, threads, report file."""
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=rounds, help="interleaved timing rounds per length (at most)")
    parser.add_argument("--budget", type=float, default=120.0, help="seconds of timing rounds per length (soft)")
    parser.add_argument("--threads", type=int, default=2, help="torch threads (the targets are for 2 cores)")
    parser.add_argument("--output", help="also write the markdown report to this file")


def run_report(args: argparse.Namespace, body: Callable[[argparse.Namespace], list[str]]) -> None:
    """Set ``--threads``, print the header line, run ``body`` (it prints its sections as they are measured and
    returns them), print the load average at the end and write it all to ``--output`` if given."""
    torch.set_num_threads(args.threads)
    lines = [header(args.batch, args.rounds)]
    print(lines[0], flush=True)
    lines += body(args)
    lines.append(f"\nLoad average at the end: {' / '.join(f'{v:.1f}' for v in os.getloadavg())}")
    print(lines[-1])
    if args.output:
        with open(args.output, "w") as handle:
            handle.write("\n".join(lines) + "\n")


def compare(args: argparse.Namespace) -> list[str]:
    """Every ``--contenders`` at every ``--lengths`` for each ``--widths``: the tables and the targets."""
    lines: list[str] = []
    for spec in args.widths:
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
    return lines


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="T = 250, 500, 1000 at width 144/4, 2 rounds")
    parser.add_argument("--lengths", type=int, nargs="+", default=[250, 500, 1000, 2000, 4000])
    parser.add_argument("--widths", nargs="+", default=["768:12", "144:4"], help="WIDTH:HEADS pairs")
    add_run_options(parser)
    parser.add_argument("--contenders", nargs="+", default=list(ALL), help=f"subset of {', '.join(ALL)}")
    for flag, script in MOVED.items():
        parser.add_argument(flag, action="store_true", help=f"moved: run python {script} instead (refused here)")
    given = sys.argv[1:] if argv is None else argv
    for flag, script in MOVED.items():  # before parsing: the moved benchmarks' own options are unknown here
        if flag in given:
            refuse_moved(parser, flag, script)
    args = parser.parse_args(argv)
    for flag, script in MOVED.items():  # an abbreviation of a moved flag
        if getattr(args, flag.removeprefix("--").replace("-", "_")):
            refuse_moved(parser, flag, script)
    if args.quick:
        args.lengths, args.widths, args.rounds = [250, 500, 1000], ["144:4"], 2
    unknown = sorted(set(args.contenders) - set(ALL))
    if unknown:
        parser.error(f"unknown contender(s) {unknown}; allowed: {', '.join(ALL)}")
    run_report(args, compare)


def refuse_moved(parser: argparse.ArgumentParser, flag: str, script: str) -> None:
    """Exit (status 2) with one line naming the script that ``flag``'s benchmark moved to."""
    parser.exit(2, f"{parser.prog}: {flag} has moved to its own script: python {script} (same options, no {flag})\n")


if __name__ == "__main__":
    main()
