"""The demo base's training step time at 1 / 2 / ``auto`` torch threads, with OpenMP's default and passive wait
policies, on an idle machine and beside a CPU-bound process: does a thread setting collapse when the machine is busy?

One run measures every configuration of ``--threads`` x ``--policies`` x ``--loads``, each in a fresh Python process
(torch's threads and ``OMP_WAIT_POLICY`` are fixed when the process starts; libgomp reads the policy when
``import torch`` loads it):

- threads: a count, or ``auto`` (:func:`adaptspeech.training.threads.apply_threads`: the recipe's ``threads: auto``,
  the cores the other processes leave free, measured when the process starts);
- policies: ``default`` (``OMP_WAIT_POLICY`` unset: libgomp spins 300,000 rounds at a barrier, then sleeps) or
  ``passive`` (``OMP_WAIT_POLICY=PASSIVE``: a waiting thread sleeps at once);
- loads: ``idle`` (nothing started here), ``niced`` (one busy-loop Python process at ``nice 10``, the default of
  ``nice``) or ``busy`` (the same, not niced). The competitor runs in its own session (``setsid``), as another
  user's job would: with the kernel's autogroup scheduling (``/proc/sys/kernel/sched_autogroup_enabled``) a nice
  value weighs only against processes of the same session, so a niced job of another session still takes its
  share of a core.

A step is the demo base's (``recipes/synthetic_demo/stage_base.yaml``: its ``model`` section built by the stages'
own ``build_model``, its batch size and AdamW with its learning rate, weight decay and ``max_grad_norm``): forward
with CTC loss, backward, gradient clipping, optimiser step, ``zero_grad``, on a batch of random 80-dim features of
``--seconds`` seconds each (the demo's clips: 2.3 s on average; ``group_by_length`` batches clips of similar
length) and random labels (12 characters per second) over a ``--vocab``-token vocabulary (the demo's: about 60).
Dropout and SpecAugment stay as in training. Each configuration reports the median wall time of ``--steps`` steps
after ``--warmup`` and the process's CPU time per step (all threads: spinning threads show there), and the table
the ratio of each median to the idle 1-thread default-policy one of the same run. ``--rounds N`` repeats the whole
grid N times, interleaved, and takes the median over all rounds' steps. The machine's background load (the other
processes' CPU use, :func:`~adaptspeech.training.threads.measure_load`, before each load starts) is printed too.

    OMP_NUM_THREADS=1 python scripts/bench_threads_busy.py                      # 18 configurations, a few minutes
    python scripts/bench_threads_busy.py --steps 10 --rounds 2 --json runs/threads_busy.json
    python scripts/bench_threads_busy.py --threads 1,2 --policies passive --loads idle,busy
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import signal
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parent.parent
STAGE = ROOT / "recipes" / "synthetic_demo" / "stage_base.yaml"
POLICIES = {"default": None, "passive": "PASSIVE"}
LOADS = ("idle", "niced", "busy")
NICE = 10
"""The competitor's nice value in ``niced`` (``nice``'s default)."""
FEATURES = 80
FRAMES_PER_SECOND = 100
CHARACTERS_PER_SECOND = 12
BASELINE = ("idle", "default", "1")
"""(load, policy, threads) of the configuration every ratio is taken against."""


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--threads", default="1,2,auto", help="comma-separated counts and/or 'auto' (default 1,2,auto)")
    parser.add_argument("--policies", default="default,passive", help=f"comma-separated, of {', '.join(POLICIES)}")
    parser.add_argument("--loads", default=",".join(LOADS), help=f"comma-separated, of {', '.join(LOADS)}")
    parser.add_argument("--steps", type=int, default=4, help="timed steps per configuration and round (default 4)")
    parser.add_argument("--warmup", type=int, default=1, help="untimed steps first (default 1)")
    parser.add_argument("--rounds", type=int, default=1, help="times the whole grid runs, interleaved (default 1)")
    parser.add_argument("--stage", type=Path, default=STAGE, help="the stage file whose model and batch are timed")
    parser.add_argument("--batch", type=int, default=None, help="clips per batch (default: the stage's)")
    parser.add_argument("--seconds", type=float, default=2.3, help="seconds per clip (default 2.3, the demo's mean)")
    parser.add_argument("--vocab", type=int, default=60, help="vocabulary size (default 60)")
    parser.add_argument("--json", type=Path, default=None, help="also write the records and the table here")
    parser.add_argument("--worker", type=json.loads, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    args.threads = [t.strip() for t in args.threads.split(",") if t.strip()]
    args.policies = [p.strip() for p in args.policies.split(",") if p.strip()]
    args.loads = [x.strip() for x in args.loads.split(",") if x.strip()]
    for name in args.threads:
        if name != "auto" and not (name.isdigit() and int(name) > 0):
            parser.error(f"--threads: {name!r} is neither a positive count nor 'auto'")
    for name in args.policies:
        if name not in POLICIES:
            parser.error(f"--policies: {name!r} is not one of {', '.join(POLICIES)}")
    for name in args.loads:
        if name not in LOADS:
            parser.error(f"--loads: {name!r} is not one of {', '.join(LOADS)}")
    if args.steps < 1 or args.warmup < 0 or args.rounds < 1:
        parser.error("--steps and --rounds must be >= 1, --warmup >= 0")
    return args


# ---- one configuration, in its own process ---------------------------------------------------------------------


class _Vocabulary:
    """The tokenizer's part ``build_model`` reads: its size and special tokens."""

    def __init__(self, size: int) -> None:
        self.size, self.pad_token_id, self.bos_token_id, self.eos_token_id = size, 0, None, None

    def __len__(self) -> int:
        return self.size


def stage_settings(stage: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    """(model, training) sections of a stage file."""
    values = yaml.safe_load(stage.read_text())
    return dict(values["model"]), dict(values["training"])


def worker(config: dict[str, Any]) -> dict[str, Any]:
    """Time the training steps of one configuration in this process (its wait policy already in the environment)."""
    from adaptspeech.training.threads import apply_threads, measure_load

    lines: list[str] = []
    load = measure_load() if config["threads"] == "auto" else None
    threads = apply_threads(config["threads"] if config["threads"] == "auto" else int(config["threads"]),
                            measure=lambda: load, say=lines.append)
    import torch

    from adaptspeech.training.model_setup import build_model

    model_spec, training = stage_settings(Path(config["stage"]))
    torch.manual_seed(0)
    model = build_model(model_spec, type("Processor", (), {"tokenizer": _Vocabulary(config["vocab"])})()).train()
    batch = config["batch"] or int(training["per_device_train_batch_size"])
    frames = int(config["seconds"] * FRAMES_PER_SECOND)
    characters = max(1, int(config["seconds"] * CHARACTERS_PER_SECOND))
    features = torch.randn(batch, frames, FEATURES)
    mask = torch.ones(batch, frames, dtype=torch.long)
    labels = torch.randint(1, config["vocab"], (batch, characters))
    parameters = [p for p in model.parameters() if p.requires_grad]
    optimiser = torch.optim.AdamW(parameters, lr=float(training.get("learning_rate", 1e-3)),
                                  weight_decay=float(training.get("weight_decay", 0.0)))
    clip = float(training.get("max_grad_norm", 1.0))
    walls, cpus = [], []
    for step in range(config["warmup"] + config["steps"]):
        start, cpu_start = time.perf_counter(), time.process_time()
        loss = model(input_features=features, attention_mask=mask, labels=labels).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(parameters, clip)
        optimiser.step()
        optimiser.zero_grad(set_to_none=True)
        if step >= config["warmup"]:
            walls.append(time.perf_counter() - start)
            cpus.append(time.process_time() - cpu_start)
    return {**config, "torch_threads": threads, "wait_policy": os.environ.get("OMP_WAIT_POLICY", "default"),
            "auto_line": lines[0] if lines else None, "load_seen": None if load is None else load.busy,
            "walls": walls, "cpus": cpus}


# ---- the grid -------------------------------------------------------------------------------------------------


def start_competitor(load: str) -> subprocess.Popen | None:
    """A busy-loop Python process in its own session (``niced``: at nice :data:`NICE`); None for ``idle``."""
    if load == "idle":
        return None
    command = [sys.executable, "-c", "while True: pass"]
    if load == "niced":
        command = ["nice", "-n", str(NICE), *command]
    return subprocess.Popen(command, start_new_session=True)


def stop_competitor(process: subprocess.Popen | None) -> None:
    if process is not None:
        os.killpg(process.pid, signal.SIGTERM)
        process.wait()


def run_configuration(config: dict[str, Any]) -> dict[str, Any]:
    """One configuration in a fresh Python process (its wait policy in the environment); its record."""
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_WAIT_POLICY", "OMP_NUM_THREADS", "GOMP_SPINCOUNT")}
    if POLICIES[config["policy"]]:
        env["OMP_WAIT_POLICY"] = POLICIES[config["policy"]]
    env["OMP_DISPLAY_ENV"] = "VERBOSE"  # libgomp prints the settings it read when torch loads it: the spin count
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    done = subprocess.run([sys.executable, __file__, "--worker", json.dumps(config)], env=env, check=False,
                          capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"configuration {config} failed (exit code {done.returncode}):\n{done.stderr[-3000:]}")
    spin = re.search(r"GOMP_SPINCOUNT = '(\d+)'", done.stderr)
    return {**json.loads(done.stdout.strip().splitlines()[-1]), "spin_count": int(spin.group(1)) if spin else None}


def key(record: dict[str, Any]) -> tuple[str, str, str]:
    return record["load"], record["policy"], str(record["threads"])


def summarise(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per (load, policy, threads) in first-seen order: the medians over all its rounds' steps, the threads
    ``auto`` chose, and ``ratio`` = its median wall time / the :data:`BASELINE` configuration's (None without it)."""
    groups: dict[tuple[str, str, str], list[dict[str, Any]]] = {}
    for record in records:
        groups.setdefault(key(record), []).append(record)
    rows = []
    for (load, policy, threads), group in groups.items():
        rows.append({
            "load": load, "policy": policy, "threads": threads,
            "torch_threads": sorted({r["torch_threads"] for r in group}),
            "wall": statistics.median([w for r in group for w in r["walls"]]),
            "cpu": statistics.median([c for r in group for c in r["cpus"]]),
            "steps": sum(len(r["walls"]) for r in group),
        })
    base = next((row["wall"] for row in rows if (row["load"], row["policy"], row["threads"]) == BASELINE), None)
    for row in rows:
        row["ratio"] = None if base is None else row["wall"] / base
    return rows


def table(rows: list[dict[str, Any]]) -> str:
    """The rows as a Markdown table."""
    lines = ["| load | wait policy | threads | s/step (median) | CPU s/step | x idle 1 thread |",
             "| --- | --- | --- | --- | --- | --- |"]
    for row in rows:
        threads = row["threads"]
        if threads == "auto":
            threads = f"auto -> {'/'.join(str(t) for t in row['torch_threads'])}"
        ratio = "-" if row["ratio"] is None else f"{row['ratio']:.2f}"
        lines.append(f"| {row['load']} | {row['policy']} | {threads} | {row['wall']:.3f} | {row['cpu']:.3f} | "
                     f"{ratio} |")
    return "\n".join(lines)


def cpu_description() -> str:
    """``lscpu``'s model name and whether the CPU has AVX-512 and VNNI."""
    model, flags = platform.processor() or "unknown", set()
    try:
        info = dict(line.split(":", 1) for line in Path("/proc/cpuinfo").read_text().split("\n\n")[0].splitlines()
                    if ":" in line)
        info = {name.strip(): value.strip() for name, value in info.items()}
        model, flags = info.get("model name", model), set(info.get("flags", "").split())
    except OSError:
        pass
    avx512 = "yes" if "avx512f" in flags else "no"
    vnni = "yes" if {"avx512_vnni", "avx_vnni"} & flags else "no"
    return f"{model}, {os.cpu_count()} CPUs, AVX-512 {avx512}, VNNI {vnni}"


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    if args.worker is not None:
        print(json.dumps(worker(args.worker)))  # the last line of stdout: the record
        return 0
    import torch

    from adaptspeech.training.threads import measure_load

    print(f"{cpu_description()}; torch {torch.__version__}; stage {args.stage}; batch {args.batch or 'stage'} x "
          f"{args.seconds} s; {args.warmup} warm-up + {args.steps} steps, {args.rounds} round(s)", flush=True)
    records, background = [], []
    for round_index in range(args.rounds):
        for load in args.loads:
            seen = measure_load()
            background.append({"round": round_index + 1, "load": load, "other_processes_cores": seen.busy,
                               "load_average": os.getloadavg()})
            print(f"round {round_index + 1}, {load}: background {seen.busy:.2f} of {seen.cores} cores busy "
                  f"(load average {os.getloadavg()[0]:.2f})", flush=True)
            competitor = start_competitor(load)
            try:
                time.sleep(0.5 if competitor else 0)
                for policy in args.policies:
                    for threads in args.threads:
                        config = {"load": load, "policy": policy, "threads": threads, "stage": str(args.stage),
                                  "batch": args.batch, "seconds": args.seconds, "vocab": args.vocab,
                                  "warmup": args.warmup, "steps": args.steps, "round": round_index + 1}
                        record = run_configuration(config)
                        records.append(record)
                        note = f" ({record['auto_line']})" if record["auto_line"] else ""
                        print(f"  {policy:8s} threads {threads:4s}: {statistics.median(record['walls']):.3f} "
                              f"s/step{note}", flush=True)
            finally:
                stop_competitor(competitor)
    rows = summarise(records)
    text = table(rows)
    print(text)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({"cpu": cpu_description(), "records": records, "rows": rows,
                                         "background": background, "table": text}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
