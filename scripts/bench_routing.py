"""One adapter layer's routing of a multi-language batch, alone: the grouped pass against the masked routing before it
(``reference_path()``), forward + backward, at XLS-R 300M's width, for a growing number of languages in the batch.

Each utterance goes through its language's bottleneck adapter (r = 64, all trainable), languages assigned round
robin; the input ``[batch, frames, 1024]`` requires grad (the frozen layers below back-propagate through it). The
multiply-adds are the same in both (each utterance through one adapter: forward, weight and input gradients); what
differs is the copying around them: the masked routing copies the batch, and in backward clears and gathers the
whole batch's gradient once per language. Reported: the process's CPU time (steadier than the wall time on a shared
machine) of the fastest of ``--repeats`` passes of each, interleaved, and their ratio, beside the time the adapter
products alone take on the whole batch (one adapter, no routing).

    OMP_NUM_THREADS=1 python scripts/bench_routing.py --threads 1 --batch 16 --languages 1,2,4,8,16
"""

from __future__ import annotations

import argparse
import sys
import time

import torch
from torch import nn

from adaptspeech.adapters.bottleneck import BottleneckAdapter
from adaptspeech.adapters.layer_forward import reference_path, route


def languages_of(count: int) -> list[str]:
    """``count`` language names."""
    return [f"l{i:02d}" for i in range(count)]


def one_pass(z: torch.Tensor, adapters: nn.ModuleDict, rows: list[str] | None, reference: bool) -> float:
    """CPU seconds of one forward + backward (``rows`` None: the first adapter on the whole batch, no routing)."""
    adapters.zero_grad(set_to_none=True)
    z.grad = None
    start = time.process_time()
    if rows is None:
        out = adapters[next(iter(adapters))](z)
    else:
        with reference_path() if reference else torch.enable_grad():
            out = route(z, adapters, list(adapters), rows, "benchmark layer")
    out.sum().backward()
    return time.process_time() - start


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=16, help="utterances")
    parser.add_argument("--frames", type=int, default=199, help="encoder frames per utterance (4 s of XLS-R: 199)")
    parser.add_argument("--width", type=int, default=1024, help="d")
    parser.add_argument("--bottleneck", type=int, default=64, help="r")
    parser.add_argument("--languages", default="1,2,4,8,16", help="languages in the batch, comma-separated")
    parser.add_argument("--repeats", type=int, default=5, help="passes of each (the fastest is reported)")
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    z = torch.randn(args.batch, args.frames, args.width).requires_grad_(True)
    print(f"batch {args.batch} x {args.frames} frames, width {args.width}, r = {args.bottleneck}, "
          f"{args.threads} thread(s), fastest of {args.repeats}")
    print("| languages in the batch | one adapter, no routing CPU ms | grouped CPU ms | masked (before) CPU ms "
          "| masked / grouped |")
    print("| --- | --- | --- | --- | --- |")
    for count in (int(c) for c in args.languages.split(",")):
        names = languages_of(count)
        adapters = nn.ModuleDict({name: BottleneckAdapter(args.width, args.bottleneck) for name in names})
        rows = [names[i % count] for i in range(args.batch)]
        best = {"alone": float("inf"), "grouped": float("inf"), "masked": float("inf")}
        for _ in range(args.repeats):
            best["alone"] = min(best["alone"], one_pass(z, adapters, None, False))
            best["grouped"] = min(best["grouped"], one_pass(z, adapters, rows, False))
            best["masked"] = min(best["masked"], one_pass(z, adapters, rows, True))
        print(f"| {count} | {1e3 * best['alone']:.1f} | {1e3 * best['grouped']:.1f} | {1e3 * best['masked']:.1f} "
              f"| {best['masked'] / best['grouped']:.2f}x |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
