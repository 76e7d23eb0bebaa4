"""Benchmark the SimAdapter fusion module against SimAdapter's equation computed in the order it is written.

``SimAdapterFusion`` computes ``sum_i softmax_i((z W_Q)(a_i W_K)^T / tau) (a_i W_V)`` as
``((z W_Q) W_K^T) a_i^T`` and ``(sum_i p_i a_i) W_V`` (3 d^2 multiply-adds per frame instead of (1 + 2N) d^2);
the baseline projects every adapter output through ``W_K`` and ``W_V`` first, as the equation reads. Both run
forward + backward on the same inputs in one process, interleaved rounds, fastest round counts; the script prints
the time ratio and the largest output difference.

Usage::

    python scripts/bench_fusion.py                       # XLS-R width 1024, 6 entries, batch 4 x 200 frames
    python scripts/bench_fusion.py --width 144 --frames 100 --rounds 3
"""

from __future__ import annotations

import argparse
import time

import torch

from adaptspeech.adapters.fusion import SimAdapterFusion


def as_written(fusion: SimAdapterFusion, query: torch.Tensor, entries: torch.Tensor) -> torch.Tensor:
    """The seed's equation in its written order: ``[B, T, D]``, ``[B, T, N, D]`` -> ``[B, T, D]``."""
    q = fusion.linear_q(query).unsqueeze(2)
    scores = (q * fusion.linear_k(entries)).sum(-1) / fusion.temperature
    weights = torch.softmax(scores, dim=-1)
    return (weights.unsqueeze(-1) * fusion.linear_v(entries)).sum(2)


def step_seconds(fn, query: torch.Tensor, entries: torch.Tensor) -> float:
    """Wall time of one forward + backward of ``fn``."""
    start = time.perf_counter()
    fn(query, entries).sum().backward()
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--width", type=int, default=1024)
    parser.add_argument("--entries", type=int, default=6, help="fused adapters N")
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--frames", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    fusion = SimAdapterFusion(args.width, args.entries)
    with torch.no_grad():
        fusion.linear_v.weight.add_(0.01 * torch.randn_like(fusion.linear_v.weight))
    query = torch.randn(args.batch, args.frames, args.width, requires_grad=True)
    entries = torch.randn(args.batch, args.frames, args.entries, args.width, requires_grad=True)
    with torch.no_grad():
        diff = (fusion(query, entries)[0] - as_written(fusion, query, entries)).abs().max().item()
    contenders = {"as written": lambda q, e: as_written(fusion, q, e), "SimAdapterFusion": lambda q, e: fusion(q, e)[0]}
    best = {name: float("inf") for name in contenders}
    for _ in range(args.rounds):
        for name, fn in contenders.items():
            best[name] = min(best[name], step_seconds(fn, query, entries))
    print(f"width {args.width}, N={args.entries}, batch {args.batch} x {args.frames} frames, {args.threads} thread(s), "
          f"forward + backward, fastest of {args.rounds}")
    print("| implementation | s | vs as written |\n| --- | --- | --- |")
    for name, seconds in best.items():
        print(f"| {name} | {seconds:.3f} | {seconds / best['as written']:.2f}x |")
    print(f"largest output difference: {diff:.2e}")


if __name__ == "__main__":
    main()
