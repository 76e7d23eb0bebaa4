"""Measure ``rel_pos`` in query blocks against its full path and transformers' relative attention, T up to 16000.

Usage::

    python scripts/bench_attention_rel_pos_memory.py        # width 768/12, T = 1000, 4000, 16000, one run
    python scripts/bench_attention_rel_pos_memory.py --lengths 500 1000 --rounds 2 --output rel_pos_memory.md

Compares, at width 768 / 12 heads and T = 1000, 4000, 16000 (``--lengths``), ``rel_pos`` on its full path
(``memory_efficient: false``), ``rel_pos_blockwise`` (``memory_efficient: true``, ``--query-block-size``) and
transformers' relative attention ``hf_rel_sdpa``, with the time and peak-memory measurements of
``scripts/bench_attention.py`` (imported from it; fastest of up to ``--rounds`` = 3 passes). A contender whose
memory is quadratic in T is skipped where its estimated peak (its peak at the longest length measured so far times
the squared length ratio) exceeds ``--max-quadratic-gb`` (default 8): at T = 16000 the full paths would need about
50 GB. Lengths of 8000 frames or more get a single pass, under the memory profiler, which gives both the peak and
the time (no warm-up: a pass takes minutes there, so one-time costs do not matter). Targets:
blockwise peak <= 0.1 x ``hf_rel_sdpa``'s at T = 4000, blockwise time <= 1.3 x the full path's at T = 1000,
blockwise peak(16000) / peak(4000) <= 4.5, and equal outputs (max abs difference to transformers <= 1e-5).
"""

from __future__ import annotations

import argparse

from bench_attention import Measure, add_run_options, fmt, measure_all, ratio, rel_pos_difference, run_report

#: contenders of this benchmark and those among them whose memory grows with T^2.
REL_POS_MEMORY = ("rel_pos", "rel_pos_blockwise", "hf_rel_sdpa")
QUADRATIC = {"rel_pos", "hf_rel_sdpa", "hf_rel_eager"}


def rel_pos_memory(args: argparse.Namespace) -> list[str]:
    """Blockwise ``rel_pos`` against its full path and transformers' relative attention, one run."""
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
    out += ["", "Targets:", ""]
    for name, value, ok in checks:
        verdict = "not measured" if value is None else ("MET" if ok(value) else "MISSED")
        out.append(f"- {name}: {fmt(value, '.1e' if 'diff' in name else '.3f')} -> {verdict}")
    return out


def measure_and_print(args: argparse.Namespace) -> list[str]:
    """:func:`rel_pos_memory`, its section printed once all lengths are measured."""
    section = rel_pos_memory(args)
    print("\n".join(section), flush=True)
    return section


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--lengths", type=int, nargs="+", default=[1000, 4000, 16000])
    add_run_options(parser, rounds=3)
    parser.add_argument("--query-block-size", type=int, default=256, help="rel_pos_blockwise: queries per block")
    parser.add_argument(
        "--max-quadratic-gb", type=float, default=8.0, help="skip T x T contenders whose estimated peak is above this"
    )
    run_report(parser.parse_args(argv), measure_and_print)


if __name__ == "__main__":
    main()
