"""Reproduce Table 1 of Wu et al. 2022: inference and training time of every row's attention kind, as ratios to
Baseline (QK).

Usage::

    python scripts/bench_attention_table1.py                # Table 1 of Wu et al. 2022 at L = 500, growth with L
    python scripts/bench_attention_table1.py --quick        # the same at toy sizes (the test's)
    python scripts/bench_attention_table1.py --threads 1 --rounds 100 --budget 400 --table1-widths 144:4 --growth-widths

Reproduces Table 1 of Wu et al. 2022 ("Input-independent attention weights are expressive enough"): every row's
kind (``SEED_TABLE1``; Ours = the random synthesizer with the
fixed-pattern initialisation, learned; plus transformers' ``Wav2Vec2Attention`` and Ours frozen) at
``L = --table1-length`` (500, the paper's) for each ``--table1-widths`` (144 / 4: our fbank Conformer base,
recipes/synthetic_demo; 768 / 12: the paper's 6-layer model), batch ``--batch`` (1: the paper times "1000 training
examples" in "sec / 1000 batches"). Two modes per contender, all interleaved in the same rounds, fastest pass kept:
*inference* (eval mode, forward under ``no_grad``) and *training* (forward + backward, as in
``scripts/bench_attention.py``, whose contenders, builders and timing rounds this script imports). Printed as ratios to
Baseline (QK), ours (``mhsa``) and transformers' (``hf_sdpa``), beside the paper's Practical Time (Inference) / 146.8.
Sparse kinds use ``l = round(sqrt(L))``, LSH kinds ``C = 64`` (the paper gives no C), dense synthesizers ``N = 16``
(the paper's). Then ``GROWTH`` (``mhsa``, ``hf_sdpa``, ``shared_qk`` and the sparse kinds) at ``--growth-lengths``
(500 .. 4000) for each ``--growth-widths``, with the least-squares slope of log(time) against log(L) (2 = quadratic).
Targets: the sparse kinds at most 0.6x of ``mhsa`` at L = 500, growth exponent at most 1.6.
"""

from __future__ import annotations

import argparse
import functools
import math
from collections.abc import Callable, Hashable

import torch
from bench_attention import Step, Timing, add_run_options, build, fastest, run_once, run_report, sparse_block
from torch import nn

#: Table 1 of Wu et al. 2022, transcribed:
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
#: rows after the paper's: transformers' attention (the other Baseline (QK)) and Ours frozen (as the paper
#: uses it after pre-training).
TABLE1_EXTRA: tuple[tuple[str, str], ...] = (
    ("Baseline (QK), transformers SDPA", "hf_sdpa"),
    ("Baseline (QK), transformers eager", "hf_eager"),
    ("Ours, frozen", "synth_fixed_frozen"),
)
#: growth of time with L: these contenders at ``--growth-lengths``.
GROWTH = ("mhsa", "hf_sdpa", "shared_qk", "sparse_strided", "sparse_fixed")
MODES = ("inference", "training")


# --- Table 1 of the paper ---------------------------------------------------------------------------------------------
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
    (``mhsa``) and transformers' (``hf_sdpa``), beside the paper's Practical Time / 146.8."""

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
    """The targets: the sparse kinds at most 0.6x of ``mhsa`` at L = 500, and clearly sub-quadratic (growth
    exponent over all lengths at most 1.6, while ``mhsa``'s last doubling is near 2)."""
    out = ["", "Targets:", ""]
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
    """Table 1's contenders at ``--table1-length`` for each ``--table1-widths``, then ``GROWTH`` at
    ``--growth-lengths`` for each ``--growth-widths``; returns the markdown section."""
    labels = list(dict.fromkeys([label for _, label, _ in SEED_TABLE1] + [label for _, label in TABLE1_EXTRA]))
    out = ["", "### Table 1 of Wu et al. 2022 reproduced", ""]
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
    parser.add_argument(
        "--quick",
        action="store_true",
        help="toy sizes (the test's): L = 48 at widths 24/4 and 48/12, growth at L = 32 64 at width 24/4, 1 round, "
        "5 s budget",
    )
    add_run_options(parser)
    parser.add_argument("--table1-length", type=int, default=500, help="L (the paper's 500)")
    parser.add_argument(
        "--table1-widths",
        nargs="*",
        default=["144:4", "768:12"],
        help="WIDTH:HEADS (our Conformer base, the paper's 6-layer model)",
    )
    parser.add_argument("--growth-lengths", type=int, nargs="+", default=[500, 1000, 2000, 4000])
    parser.add_argument("--growth-widths", nargs="*", default=["144:4", "768:12"], help="WIDTH:HEADS of the growth run")
    args = parser.parse_args(argv)
    if args.quick:  # toy sizes (the test's)
        args.table1_length, args.table1_widths, args.growth_lengths = 48, ["24:4", "48:12"], [32, 64]
        args.growth_widths, args.rounds, args.budget = ["24:4"], 1, 5.0
    run_report(args, table1)


if __name__ == "__main__":
    main()
