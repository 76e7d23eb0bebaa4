"""Benchmark the swappable encoder attention kinds against transformers' own attention, in one run.

Usage::

    python scripts/bench_attention.py                       # T = 250 .. 4000 at widths 768/12 and 144/4
    python scripts/bench_attention.py --quick               # T = 250, 500, 1000 at width 144/4, 2 rounds
    python scripts/bench_attention.py --widths 768:12 --lengths 500 1000 --rounds 9 --output bench.md
    python scripts/bench_attention.py --rel-pos-memory      # issue 16: blockwise rel_pos, T = 1000, 4000, 16000
    python scripts/bench_attention.py --table1              # issue 14: seeds/002 Table 1 at L = 500, growth with L
    python scripts/bench_attention.py --table1 --quick      # the same at toy sizes (the test's)

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

``--table1`` (issue 14) reproduces seeds/002 Table 1: every row's kind (``SEED_TABLE1``; Ours = the random
synthesizer with the fixed-pattern initialisation, learned; plus transformers' ``Wav2Vec2Attention`` and Ours frozen)
at ``L = --table1-length`` (500, the seed's) for each ``--table1-widths`` (144 / 4: our fbank Conformer base,
recipes/synthetic_demo; 768 / 12: the seed's 6-layer model), batch ``--batch`` (1: the seed times "1000 training
examples" in "sec / 1000 batches"). Two modes per contender, all interleaved in the same rounds, fastest pass kept:
*inference* (eval mode, forward under ``no_grad``) and *training* (forward + backward, as above). Printed as ratios to
Baseline (QK), ours (``mhsa``) and transformers' (``hf_sdpa``), beside the seed's Practical Time (Inference) / 146.8.
Sparse kinds use ``l = round(sqrt(L))``, LSH kinds ``C = 64`` (the seed gives no C), dense synthesizers ``N = 16``
(the seed's). Then ``GROWTH`` (``mhsa``, ``hf_sdpa``, ``shared_qk`` and the sparse kinds) at ``--growth-lengths``
(500 .. 4000) for each ``--growth-widths``, with the least-squares slope of log(time) against log(L) (2 = quadratic).
Targets: the sparse kinds at most 0.6x of ``mhsa`` at L = 500, growth exponent at most 1.6.

Targets (issue 4, 2 CPU cores): ``ldsa`` time(4000) / time(2000) <= 2.3, speed vs ``hf_sdpa`` >= 2 at T = 4000
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

from adaptspeech.attention import ATTENTION, AttentionConfig
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

#: ``--table1``: seeds/002 Table 1, transcribed from /work/shared/seeds/002_89d2cdc6fff8fa0a.txt lines 192-204:
#: (row, our contender, Practical Time (Inference) in sec / 1000 batches of L = 500 frames).
SEED_TABLE1: tuple[tuple[str, str, float], ...] = (
    ("Baseline (QK)", "mhsa", 146.8),
    ("Baseline (Q)", "shared_qk", 143.4),
    ("Sparse (strided)", "sparse_strided", 143.4),
    ("Sparse (fixed)", "sparse_fixed", 143.4),
    ("Sign-ALSH", "lsh_sign_alsh", 268.9),
    ("XBOX", "lsh_xbox", 235.5),
    ("XBOX (QNF)", "lsh_xbox_qnf", 240.2),
    ("Simple LSH", "lsh_simple", 236.2),
    ("Simple ALSH", "lsh_simple_alsh", 235.7),
    ("SYN. (Dense)", "synthesizer_dense_shared", 111.0),
    ("SYN. (Dense+M)", "synthesizer_dense", 130.5),
    ("SYN. (Random)", "synthesizer_random", 116.8),
    ("Ours", "ours_fixed", 116.8),
)
SEED_BASELINE_TIME = 146.8  # Baseline (QK)
#: our Table 1 contenders that ``OURS`` lacks (the sparse block size is set per length, see ``sparse_block``; the
#: LSH kinds keep ``lsh_num_keys`` C = 64, the seed gives no C).
TABLE1_KINDS: dict[str, dict[str, object]] = {
    "shared_qk": {"kind": "shared_qk"},
    "sparse_strided": {"kind": "sparse_strided"},
    "sparse_fixed": {"kind": "sparse_fixed"},
    **{kind: {"kind": kind} for kind in ("lsh_sign_alsh", "lsh_xbox", "lsh_xbox_qnf", "lsh_simple", "lsh_simple_alsh")},
    "synthesizer_dense_shared": {"kind": "synthesizer_dense_shared", "synthesizer_hidden": 16},
    "ours_fixed": {"kind": "synthesizer_random", "synthesizer_init": "fixed_patterns"},  # learned in pre-training
}
SETTINGS: dict[str, dict[str, object]] = {**OURS, **TABLE1_KINDS}
#: ``--table1`` rows after the seed's: transformers' attention (the other Baseline (QK)) and Ours frozen (as the seed
#: uses it after pre-training).
TABLE1_EXTRA: tuple[tuple[str, str], ...] = (
    ("Baseline (QK), transformers SDPA", "hf_sdpa"),
    ("Baseline (QK), transformers eager", "hf_eager"),
    ("Ours, frozen", "synth_fixed_frozen"),
)
#: ``--table1`` growth of time with L: these contenders at ``--growth-lengths``.
GROWTH = ("mhsa", "hf_sdpa", "shared_qk", "sparse_strided", "sparse_fixed")
MODES = ("inference", "training")
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


def sparse_block(frames: int) -> int:
    """The Sparse Transformer's block / stride ``l ~ sqrt(T)`` (Child et al. 2019), as the ``--table1`` setting."""
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
    config = AttentionConfig(
        hidden_size=width, num_heads=heads, synthesizer_max_len=frames, query_block_size=block_size, **settings
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


# --- seeds/002 Table 1 ---------------------------------------------------------------------------------------------
def infer_once(module: nn.Module, step: Step) -> None:
    """One inference pass: eval mode, forward under ``no_grad``."""
    module.eval()
    with torch.no_grad():
        step()


def train_once(module: nn.Module, step: Step, x: torch.Tensor, params: list[nn.Parameter]) -> None:
    """One training step of the sub-layer: train mode, forward + backward (:func:`run_once`)."""
    module.train()
    run_once(step, x, params)


def time_modes(
    labels: list[str], width: int, heads: int, frames: int, batch: int, rounds: int, budget: float
) -> dict[tuple[str, str], Timing]:
    """``(label, mode) -> (fastest pass in s, passes)`` for ``mode`` in ``MODES``: every contender's inference pass
    and training step, all interleaved in the same rounds (:func:`fastest`) after one warm-up pass each."""
    torch.manual_seed(0)
    x = torch.randn(batch, frames, width, requires_grad=True)
    steps: dict[Hashable, Callable[[], object]] = {}
    for label in labels:
        module, step = build(label, width, heads, frames, x)
        params = [p for p in module.parameters() if p.requires_grad]
        steps[(label, "inference")] = functools.partial(infer_once, module, step)
        steps[(label, "training")] = functools.partial(train_once, module, step, x, params)
    for step in steps.values():
        step()  # warm-up: caches, allocator, the sparse kinds' layouts
    return fastest(steps, rounds, budget)  # type: ignore[return-value]


def log_slope(lengths: list[int], seconds: list[float]) -> float:
    """Least-squares slope of ``log(time)`` against ``log(T)``: the growth exponent (2 = quadratic)."""
    xs, ys = [math.log(t) for t in lengths], [math.log(s) for s in seconds]
    mean_x, mean_y = sum(xs) / len(xs), sum(ys) / len(ys)
    return sum((x - mean_x) * (y - mean_y) for x, y in zip(xs, ys)) / sum((x - mean_x) ** 2 for x in xs)


def table1_report(times: dict[tuple[str, str], Timing], width: int, heads: int, frames: int) -> list[str]:
    """Markdown: every Table 1 row (and ``TABLE1_EXTRA``) with its times and its ratios to Baseline (QK), ours
    (``mhsa``) and transformers' (``hf_sdpa``), beside the seed's Practical Time / 146.8."""

    def ms(label: str, mode: str) -> str:
        return f"{times[(label, mode)][0] * 1e3:.2f}"

    def vs(label: str, mode: str, base: str) -> str:
        return f"{times[(label, mode)][0] / times[(base, mode)][0]:.2f}"

    out = [
        f"#### Width {width}, {heads} heads, L = {frames} (sparse l = {sparse_block(frames)})",
        "",
        "| Table 1 row | contender | inference ms | training ms | inference / mhsa | training / mhsa "
        "| inference / hf_sdpa | training / hf_sdpa | seed (Practical Time / 146.8) |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    rows = [(row, label, f"{seed / SEED_BASELINE_TIME:.3f}") for row, label, seed in SEED_TABLE1]
    rows += [(row, label, "-") for row, label in TABLE1_EXTRA]
    for row, label, seed in rows:
        out.append(
            f"| {row} | `{label}` | {ms(label, 'inference')} | {ms(label, 'training')} "
            f"| {vs(label, 'inference', 'mhsa')} | {vs(label, 'training', 'mhsa')} "
            f"| {vs(label, 'inference', 'hf_sdpa')} | {vs(label, 'training', 'hf_sdpa')} | {seed} |"
        )
    passes = [count for _, count, _ in times.values()]
    spread = {mode: times[("mhsa", mode)][2] / times[("mhsa", mode)][0] for mode in MODES}
    out += [
        "",
        f"Fastest of {min(passes)} to {max(passes)} passes per contender and mode (interleaved rounds). Contention: "
        f"`mhsa`'s median pass / fastest pass = {spread['inference']:.1f} (inference), {spread['training']:.1f} "
        "(training); 1.0 = undisturbed.",
    ]
    return out


def growth_report(
    times: dict[int, dict[tuple[str, str], Timing]], width: int, heads: int
) -> tuple[list[str], dict[tuple[str, str], tuple[float, float]]]:
    """Markdown: time against L for ``GROWTH`` and the growth exponents; also returns ``(label, mode) -> (slope
    over all lengths, slope over the last doubling)``."""
    lengths = sorted(times)
    out = [
        f"#### Growth with L, width {width}, {heads} heads (sparse l = round(sqrt(L)): "
        + ", ".join(str(sparse_block(t)) for t in lengths)
        + ")",
        "",
        "| contender | mode | "
        + " | ".join(f"T={t} ms" for t in lengths)
        + " | slope (fit, all L) | slope (last x2) |",
        "|---|---|" + "---|" * (len(lengths) + 2),
    ]
    slopes = {}
    for label in GROWTH:
        for mode in MODES:
            seconds = [times[t][(label, mode)][0] for t in lengths]
            slopes[(label, mode)] = (log_slope(lengths, seconds), log_slope(lengths[-2:], seconds[-2:]))
            out.append(
                f"| `{label}` | {mode} | "
                + " | ".join(f"{s * 1e3:.1f}" for s in seconds)
                + f" | {slopes[(label, mode)][0]:.2f} | {slopes[(label, mode)][1]:.2f} |"
            )
    return out, slopes


def table1_targets(
    tables: dict[tuple[int, int], dict[tuple[str, str], Timing]],
    slopes: dict[tuple[int, int], dict[tuple[str, str], tuple[float, float]]],
) -> list[str]:
    """Issue 14's targets: the sparse kinds at most 0.6x of ``mhsa`` at L = 500, and clearly sub-quadratic (growth
    exponent over all lengths at most 1.6, while ``mhsa``'s last doubling is near 2)."""
    out = ["", "Targets (issue 14):", ""]
    for (width, heads), times in tables.items():
        for label in ("sparse_strided", "sparse_fixed"):
            for mode in MODES:
                value = times[(label, mode)][0] / times[("mhsa", mode)][0]
                verdict = "MET" if value <= 0.6 else "MISSED"
                out.append(
                    f"- `{label}` {mode} / `mhsa` <= 0.6 (width {width}, {heads} heads): {value:.2f} -> {verdict}"
                )
    for (width, heads), found in slopes.items():
        for label in ("sparse_strided", "sparse_fixed"):
            for mode in MODES:
                value = found[(label, mode)][0]
                verdict = "MET" if value <= 1.6 else "MISSED"
                out.append(
                    f"- `{label}` {mode} growth exponent <= 1.6 (width {width}, {heads} heads): {value:.2f} -> "
                    f"{verdict} (`mhsa`: {found[('mhsa', mode)][0]:.2f} over all, {found[('mhsa', mode)][1]:.2f} "
                    "over the last doubling)"
                )
    return out


def table1(args: argparse.Namespace) -> list[str]:
    """``--table1``: Table 1's contenders at ``--table1-length`` for each ``--table1-widths``, then ``GROWTH`` at
    ``--growth-lengths`` for each ``--growth-widths``; returns the markdown section."""
    labels = list(dict.fromkeys([label for _, label, _ in SEED_TABLE1] + [label for _, label in TABLE1_EXTRA]))
    out = ["", "### seeds/002 Table 1 reproduced", ""]
    tables, slopes = {}, {}
    for spec in args.table1_widths:
        width, heads = (int(v) for v in spec.split(":"))
        times = time_modes(labels, width, heads, args.table1_length, args.batch, args.rounds, args.budget)
        tables[(width, heads)] = times
        section = table1_report(times, width, heads, args.table1_length)
        print("\n".join(section), flush=True)
        out += [*section, ""]
    for spec in args.growth_widths:
        width, heads = (int(v) for v in spec.split(":"))
        by_length = {}
        for frames in args.growth_lengths:
            by_length[frames] = time_modes(list(GROWTH), width, heads, frames, args.batch, args.rounds, args.budget)
            print(f"  growth: width {width} T={frames} done", flush=True)
        section, slopes[(width, heads)] = growth_report(by_length, width, heads)
        print("\n".join(section), flush=True)
        out += [*section, ""]
    targets = table1_targets(tables, slopes)
    print("\n".join(targets), flush=True)
    return out + targets


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
        "--table1",
        action="store_true",
        help="issue 14: seeds/002 Table 1, inference and training time of every row as a ratio to Baseline (QK), "
        "then the growth exponent of the sparse kinds (--quick: toy sizes)",
    )
    parser.add_argument("--table1-length", type=int, default=500, help="--table1: L (the seed's 500)")
    parser.add_argument(
        "--table1-widths",
        nargs="*",
        default=["144:4", "768:12"],
        help="--table1: WIDTH:HEADS (our Conformer base, the seed's 6-layer model)",
    )
    parser.add_argument("--growth-lengths", type=int, nargs="+", default=[500, 1000, 2000, 4000])
    parser.add_argument(
        "--growth-widths", nargs="*", default=["144:4", "768:12"], help="--table1: WIDTH:HEADS of the growth run"
    )
    parser.add_argument(
        "--max-quadratic-gb", type=float, default=8.0, help="--rel-pos-memory: skip T x T contenders above this"
    )
    args = parser.parse_args(argv)
    if args.quick and args.table1:  # toy sizes (the test's)
        args.table1_length, args.table1_widths, args.growth_lengths = 48, ["24:4", "48:12"], [32, 64]
        args.growth_widths, args.rounds, args.budget = ["24:4"], 1, 5.0
    elif args.quick:
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
    if args.table1:
        lines += table1(args)
    for spec in [] if args.rel_pos_memory or args.table1 else args.widths:
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
