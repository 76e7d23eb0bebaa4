"""Where a training step at XLS-R 300M's shape spends its time: wall time against the device's busy time, and that
busy time by category of kernel, for each configuration of ``scripts/bench_training_step.py``.

    python scripts/profile_training_step.py --device cuda --configs full,adapter,fusion
    python scripts/profile_training_step.py --device cpu --layers 1 --batch 1 --seconds 1     # a quick check

Each configuration is built as ``bench_training_step.py`` builds it, trained ``--warmup`` steps (bf16 autocast, fused
AdamW on CUDA), then ``--steps`` steps run under ``torch.profiler``. Printed per configuration and step: the wall
time (measured without the profiler), the summed duration of the device's kernels (on a CPU: the self time of the
operators) in the profiled steps and their share of the wall time (well below 1: the step waits on Python and
kernel launches, not on arithmetic), the busy time split into
matrix products (GEMM), convolutions, attention (SDPA / flash), the optimizer, copies and dtype casts (autocast
casts each fp32 weight to bf16 at every use), and everything else (element-wise, normalisation, reductions), and
the ``--top`` kernels that took longest.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

import torch
from torch.profiler import ProfilerActivity, profile

sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_training_step as bts

#: kernel-name fragments of each category (lower case), checked in this order; the rest is "other"
CATEGORIES = (
    ("optimizer", ("adam", "multi_tensor", "foreach")),
    ("attention", ("flash", "fmha", "attention", "sdpa", "cudnn_mha")),
    ("convolution", ("conv", "implicit_gemm", "winograd", "im2col", "col2im", "fprop", "dgrad", "wgrad", "cudnn")),
    ("copy / cast", ("copy",)),
    ("gemm", ("gemm", "sm90_xmma", "cutlass", "matmul", "addmm", "mm", "cublas", "nvjet", "linear")),
)


def category_of(name: str) -> str:
    """The category of a kernel or operator (:data:`CATEGORIES`) from its name."""
    lowered = name.lower()
    for category, fragments in CATEGORIES:
        if any(fragment in lowered for fragment in fragments):
            return category
    return "other"


def profile_config(config: str, args: argparse.Namespace) -> dict[str, Any]:
    """Build ``config``, warm it up, profile ``args.steps`` steps; returns wall and busy times and the top kernels."""
    device = torch.device(args.device)
    cuda = device.type == "cuda"
    with device:
        model = bts.build_model(config, args.layers)
    if args.checkpointing:
        model.activation_checkpointing_enable(activation_checkpointing_kwargs={"use_reentrant": False})
    model.train()
    trainable = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(trainable, lr=1e-4, fused=cuda)
    generator = torch.Generator().manual_seed(0)
    samples = int(args.seconds * 16000)
    inputs = torch.randn(args.batch, samples, generator=generator).to(device)
    mask = torch.ones(args.batch, samples, dtype=torch.long, device=device)
    labels = torch.randint(5, 40, (args.batch, max(1, int(10 * args.seconds))), generator=generator).to(device)

    def step() -> None:
        with torch.autocast(device.type, dtype=torch.bfloat16):
            loss = model(input_values=inputs, attention_mask=mask, labels=labels).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    for _ in range(args.warmup):
        step()
    if cuda:
        torch.cuda.synchronize(device)
    tick = time.perf_counter()  # the wall time without the profiler's own overhead
    for _ in range(args.steps):
        step()
    if cuda:
        torch.cuda.synchronize(device)
    wall = (time.perf_counter() - tick) / args.steps
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    with profile(activities=activities) as prof:
        for _ in range(args.steps):
            step()
        if cuda:
            torch.cuda.synchronize(device)
    kernels: dict[str, float] = {}
    for event in prof.key_averages():
        # on CUDA the kernels alone (an operator's device time is its kernels': counting both would count twice)
        if cuda and event.device_type != torch.autograd.DeviceType.CUDA:
            continue
        seconds = (event.self_device_time_total if cuda else event.self_cpu_time_total) / 1e6 / args.steps
        if seconds > 0 and not event.key.startswith("ProfilerStep"):
            kernels[event.key] = kernels.get(event.key, 0.0) + seconds
    busy = sum(kernels.values())
    by_category: dict[str, float] = {}
    for name, seconds in kernels.items():
        by_category[category_of(name)] = by_category.get(category_of(name), 0.0) + seconds
    top = sorted(kernels.items(), key=lambda item: -item[1])[: args.top]
    return {"config": config, "wall": wall, "busy": busy, "by_category": by_category, "top": top,
            "trainable": sum(p.numel() for p in trainable)}


def report(results: list[dict[str, Any]], cuda: bool) -> list[str]:
    """Markdown: one table of wall / busy time and the split by category, then the top kernels of each
    configuration."""
    categories = [category for category, _ in CATEGORIES] + ["other"]
    busy_name = "kernel" if cuda else "operator self"
    lines = [
        f"| configuration | wall ms | {busy_name} ms | busy / wall | "
        + " | ".join(f"{c} ms" for c in categories) + " |",
        "|---|---|---|---|" + "---|" * len(categories),
    ]
    for r in results:
        lines.append(
            f"| {r['config']} | {1e3 * r['wall']:.1f} | {1e3 * r['busy']:.1f} | {r['busy'] / r['wall']:.2f} | "
            + " | ".join(f"{1e3 * r['by_category'].get(c, 0.0):.1f}" for c in categories) + " |"
        )
    for r in results:
        lines += ["", f"Top {len(r['top'])} of `{r['config']}` (ms per step):", ""]
        lines += [f"- {1e3 * seconds:.2f} ms [{category_of(name)}] {name[:110]}" for name, seconds in r["top"]]
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--configs", default="full,adapter,fusion",
                        help=f"among {', '.join(bts.CONFIGS + bts.PEERS)}")
    parser.add_argument("--layers", type=int, default=24)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--steps", type=int, default=2)
    parser.add_argument("--top", type=int, default=8)
    parser.add_argument("--checkpointing", action="store_true")
    args = parser.parse_args(argv)
    configs = [c for c in args.configs.split(",") if c]
    unknown = sorted(set(configs) - set(bts.CONFIGS + bts.PEERS))
    if unknown:
        parser.error(f"--configs: unknown {', '.join(unknown)}")
    results = []
    for config in configs:
        results.append(profile_config(config, args))
        if torch.cuda.is_available():
            torch.cuda.empty_cache()
    cuda = args.device.startswith("cuda")
    print(f"XLS-R 300M shape, {args.layers} layers, batch {args.batch} x {args.seconds:g} s, bf16 autocast, "
          f"checkpointing {'on' if args.checkpointing else 'off'}, {args.device}; {args.steps} profiled steps\n")
    print("\n".join(report(results, cuda)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
