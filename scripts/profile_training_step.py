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

``--by-module`` measures instead, without the profiler, where each step's wall time goes part by part, forward and
backward: the convolutional front end, the feature projection, the positional convolution, and in every encoder
layer its attention, its feed-forward block, its adapters / fusion block and the rest (layer norms, dropout,
residual sums), timed by module hooks (forward: pre-hook to hook; backward: full backward pre-hook to hook) and
summed over the layers, each beside its multiply-adds (``bench_training_step.multiply_adds``'s count) and the rate
that gives (a part far below the others' rate is where the step exceeds its arithmetic bound):

    python scripts/profile_training_step.py --device cpu --dtype fp32 --threads 2 --by-module --configs full,fusion
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

import torch
from torch import nn
from torch.profiler import ProfilerActivity, profile

sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_training_step as bts

from adaptspeech.adapters.adapter_types import ADAPTER_MODULE_NAME

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


def prepare(config: str, args: argparse.Namespace) -> tuple[nn.Module, torch.optim.Optimizer, dict[str, torch.Tensor]]:
    """``config`` built as ``bench_training_step.py`` builds it, in training mode, its AdamW (fused on CUDA) and one
    batch of random audio ``[batch, samples]`` with its mask and random labels."""
    device = torch.device(args.device)
    with device:
        model = bts.build_model(config, args.layers)
    if args.checkpointing:
        model.activation_checkpointing_enable(activation_checkpointing_kwargs={"use_reentrant": False})
    model.train()
    trainable = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(trainable, lr=1e-4, fused=device.type == "cuda")
    generator = torch.Generator().manual_seed(0)
    samples = int(args.seconds * 16000)
    batch = {
        "input_values": torch.randn(args.batch, samples, generator=generator).to(device),
        "attention_mask": torch.ones(args.batch, samples, dtype=torch.long, device=device),
        "labels": torch.randint(5, 40, (args.batch, max(1, int(10 * args.seconds))), generator=generator).to(device),
        **bts.step_inputs(config, args.batch, device),
    }
    return model, optimizer, batch


def profile_config(config: str, args: argparse.Namespace) -> dict[str, Any]:
    """Build ``config``, warm it up, profile ``args.steps`` steps; returns wall and busy times and the top kernels."""
    device = torch.device(args.device)
    cuda = device.type == "cuda"
    model, optimizer, batch = prepare(config, args)
    trainable = [p for p in model.parameters() if p.requires_grad]

    def step() -> None:
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=args.dtype == "bf16"), bts.step_context(config):
            loss = model(**batch).loss
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


class ModuleClock:
    """Wall time of named parts of a model, forward and backward, summed over the calls of one step.

    Forward: a forward pre-hook to the forward hook. Backward: from the moment the gradient of the part's output is
    complete (a hook on that tensor) to the moment the gradient of its input is (a hook on the input); a part whose
    input needs no gradient has no backward time (its weight gradients, if any, are not timed). Tensor hooks, not
    module backward hooks: those wrap the outputs in views that in-place writes downstream (transformers masks the
    projected features in place) refuse. Parts may nest (a layer holds its attention); each is timed on its own.
    """

    def __init__(self, parts: dict[str, list[nn.Module]]) -> None:
        self.totals: dict[tuple[str, str], float] = {}
        self.handles: list[Any] = []
        for name, modules in parts.items():
            for module in modules:
                self._watch(name, module)

    def _add(self, name: str, direction: str, seconds: float) -> None:
        self.totals[(name, direction)] = self.totals.get((name, direction), 0.0) + seconds

    def _watch(self, name: str, module: nn.Module) -> None:
        calls: list[tuple[float, torch.Tensor | None]] = []
        backward: list[float] = []

        def first_tensor(value: Any) -> torch.Tensor | None:
            if isinstance(value, torch.Tensor):
                return value
            if isinstance(value, (tuple, list)):
                return next((v for v in value if isinstance(v, torch.Tensor)), None)
            return None

        def pre(_: nn.Module, args: tuple) -> None:
            calls.append((time.perf_counter(), first_tensor(args)))

        def post(_: nn.Module, args: tuple, output: Any) -> None:
            start, inputs = calls.pop()
            self._add(name, "forward", time.perf_counter() - start)
            out = first_tensor(output)
            if not torch.is_grad_enabled() or out is None or not out.requires_grad:
                return
            if inputs is None or not inputs.requires_grad:
                return
            out.register_hook(lambda grad: backward.append(time.perf_counter()))

            def stop(grad: torch.Tensor) -> None:
                if backward:
                    self._add(name, "backward", time.perf_counter() - backward.pop())

            inputs.register_hook(stop)

        self.handles += [module.register_forward_pre_hook(pre), module.register_forward_hook(post)]

    def reset(self) -> None:
        self.totals.clear()

    def remove(self) -> None:
        for handle in self.handles:
            handle.remove()


def model_parts(model: nn.Module) -> dict[str, list[nn.Module]]:
    """The parts :class:`ModuleClock` times, by name (``layer`` is every encoder layer as a whole, adapter block
    included)."""
    backbone = model.backbone
    layers = list(backbone.encoder.layers)
    parts = {
        "front end": [backbone.feature_extractor],
        "projection": [backbone.feature_projection],
        "pos conv": [backbone.encoder.pos_conv_embed],
        "layer": layers,
        "attention": [layer.attention for layer in layers],
        "feed-forward": [layer.feed_forward for layer in layers],
        "adapters / fusion": [getattr(layer, ADAPTER_MODULE_NAME) for layer in layers
                              if hasattr(layer, ADAPTER_MODULE_NAME)],
    }
    return {name: modules for name, modules in parts.items() if modules}


def part_multiply_adds(config: str, args: argparse.Namespace) -> dict[str, float]:
    """:func:`bench_training_step.multiply_adds` of ``config`` by part, the layers split into attention and
    feed-forward (their shares of ``4 M d^2 + 2 M T d`` and ``2 M d f``), adapters and fusion together."""
    parts = bts.multiply_adds(config, args.layers, args.batch, args.seconds)
    d, f = bts.BACKBONE["hidden_size"], bts.BACKBONE["intermediate_size"]
    t = bts.frames(int(args.seconds * 16000))[-1]
    attention, ffn = 4 * d * d + 2 * t * d, 2 * d * f
    return {
        "front end": parts["front_end"],
        "projection": parts["projection"],
        "pos conv": parts["pos_conv"],
        "attention": parts["layers"] * attention / (attention + ffn),
        "feed-forward": parts["layers"] * ffn / (attention + ffn),
        "adapters / fusion": parts.get("adapters", 0.0) + parts.get("fusion", 0.0),
        "total": parts["total"],
    }


def profile_by_module(config: str, args: argparse.Namespace) -> dict[str, Any]:
    """Build ``config``, warm it up, time ``args.steps`` steps part by part (:class:`ModuleClock`)."""
    device = torch.device(args.device)
    model, optimizer, batch = prepare(config, args)
    clock = ModuleClock(model_parts(model))
    phases = {"forward": 0.0, "backward": 0.0, "optimizer": 0.0}

    def step() -> None:
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=args.dtype == "bf16"), bts.step_context(config):
            tick = time.perf_counter()
            loss = model(**batch).loss
            phases["forward"] += time.perf_counter() - tick
            tick = time.perf_counter()
            loss.backward()
            phases["backward"] += time.perf_counter() - tick
        tick = time.perf_counter()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        phases["optimizer"] += time.perf_counter() - tick

    for _ in range(args.warmup):
        step()
    clock.reset()
    phases.update(dict.fromkeys(phases, 0.0))
    for _ in range(args.steps):
        step()
    clock.remove()
    seconds = {key: value / args.steps for key, value in clock.totals.items()}
    for direction in ("forward", "backward"):  # a layer's own rest: the layer less its timed sub-parts
        inner = sum(seconds.get((name, direction), 0.0) for name in ("attention", "feed-forward", "adapters / fusion"))
        seconds[("layer rest", direction)] = seconds.pop(("layer", direction), 0.0) - inner
    return {"config": config, "seconds": seconds, "phases": {k: v / args.steps for k, v in phases.items()},
            "multiply_adds": part_multiply_adds(config, args)}


def report_by_module(results: list[dict[str, Any]]) -> list[str]:
    """Markdown: per configuration, each part's forward and backward time, its multiply-adds and their rate."""
    names = ["front end", "projection", "pos conv", "attention", "feed-forward", "adapters / fusion", "layer rest"]
    lines = []
    for r in results:
        phases = r["phases"]
        lines += [
            f"`{r['config']}`: forward {phases['forward']:.2f} s, backward {phases['backward']:.2f} s, optimizer "
            f"{phases['optimizer']:.2f} s per step; {r['multiply_adds']['total'] / 1e9:.1f} G multiply-adds",
            "",
            "| part | forward s | backward s | G multiply-adds (forward + backward) | G multiply-adds / s |",
            "| --- | --- | --- | --- | --- |",
        ]
        for name in names:
            forward, backward = r["seconds"].get((name, "forward"), 0.0), r["seconds"].get((name, "backward"), 0.0)
            if not forward and not backward:
                continue
            macs = r["multiply_adds"].get(name)
            rate = "-" if not macs else f"{macs / 1e9 / (forward + backward):.1f}"
            lines.append(f"| {name} | {forward:.3f} | {backward:.3f} | {'-' if macs is None else f'{macs / 1e9:.2f}'} "
                         f"| {rate} |")
        lines.append("")
    return lines


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
                        help=f"among {', '.join(bts.ALL_CONFIGS)}")
    parser.add_argument("--layers", type=int, default=24)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--steps", type=int, default=2)
    parser.add_argument("--top", type=int, default=8)
    parser.add_argument("--checkpointing", action="store_true")
    parser.add_argument("--dtype", choices=("fp32", "bf16"), default="bf16", help="bf16: autocast, fp32 weights")
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's)")
    parser.add_argument("--by-module", action="store_true", help="time each part forward and backward (no profiler)")
    args = parser.parse_args(argv)
    configs = [c for c in args.configs.split(",") if c]
    unknown = sorted(set(configs) - set(bts.ALL_CONFIGS))
    if unknown:
        parser.error(f"--configs: unknown {', '.join(unknown)}")
    if args.threads:
        torch.set_num_threads(args.threads)
    results = []
    for config in configs:
        results.append((profile_by_module if args.by_module else profile_config)(config, args))
        if torch.cuda.is_available():
            torch.cuda.empty_cache()
    cuda = args.device.startswith("cuda")
    print(f"XLS-R 300M shape, {args.layers} layers, batch {args.batch} x {args.seconds:g} s, {args.dtype}, "
          f"checkpointing {'on' if args.checkpointing else 'off'}, {args.device}; {args.steps} profiled steps\n")
    print("\n".join(report_by_module(results) if args.by_module else report(results, cuda)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
