"""The demo's ``fusion`` stage with the fusion computed on the reference path and on the stacked path: seconds per
training step (the demo's ``train s`` column over the steps), same steps, same run, and whether the two reach the
same training losses and dev CER.

Each run is ``adaptspeech train --config SPEC`` on a copy of the demo's fusion stage settings (its
``stage_spec.json``), with ``training.max_steps=--max-steps``, the target adapter model and prepared data given here,
and ``model.fusion_path`` set to ``reference`` (each adapter's own forward and the fusion over their stacked outputs,
as before the stacked path) or ``stacked`` (the default), in its own process, ``--rounds`` times interleaved
(reference, stacked, reference, ...) so that both paths see the same changing load of a shared machine. Reported per
path: ``train_seconds`` of the stage summary per step (median over the rounds) and its ``train_cpu_seconds`` per step
(all threads; the steadier figure on a loaded machine), the whole process's CPU time (model loading, training and the
dev evaluation), the logged training losses and the dev CER / WER of the final model.

The three inputs come from a finished ``adaptspeech demo`` run (``RUN/fusion/stage_spec.json``,
``RUN/target_adapter/model``, ``RUN/prepared``; copies, so that nothing here writes into that run):

    OMP_NUM_THREADS=1 python scripts/bench_demo_fusion.py --spec runs/st_demo/fusion_stage_spec.json \\
        --model runs/st_demo/target_adapter_model --prepared runs/st_demo/prepared --out runs/demo_fusion \\
        --max-steps 100 --threads 1
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

PATHS = ("reference", "stacked")


def run_stage(path: str, round_index: int, args: argparse.Namespace) -> dict[str, Any]:
    """One ``adaptspeech train`` of the fusion stage on ``path``; its figures."""
    out = Path(args.out) / f"{path}_{round_index + 1}"
    command = [
        sys.executable, "-m", "adaptspeech.cli", "train", "--config", str(args.spec), "--no-progress", "--overwrite",
        "--threads", str(args.threads),
        f"output_dir={out}", f"training.max_steps={args.max_steps}", f"model.fusion_path={path}",
        f"model.path={args.model}", f"data.prepared_dir={args.prepared}",
    ]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run(command, check=False, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise SystemExit(f"{path} run {round_index + 1} failed (exit code {done.returncode}):\n{done.stdout[-3000:]}")
    summary = json.loads((out / "stage_summary.json").read_text())
    history = json.loads((out / "log_history.json").read_text())
    dev = summary["dev"]["overall"]
    steps = summary["global_step"]
    return {
        "path": path,
        "round": round_index + 1,
        "steps": steps,
        "train_seconds": summary["train_seconds"],
        "seconds_per_step": summary["train_seconds"] / steps,
        "train_cpu_seconds": summary.get("train_cpu_seconds"),
        "cpu_seconds_per_step": summary.get("train_cpu_seconds", float("nan")) / steps,
        "process_cpu_seconds": (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime),
        "process_wall_seconds": wall,
        "losses": {entry["step"]: entry["loss"] for entry in history if "loss" in entry},
        "train_loss": next((entry["train_loss"] for entry in history if "train_loss" in entry), None),
        "dev_cer": dev["cer"],
        "dev_wer": dev["wer"],
        "load_average": os.getloadavg()[0],
    }


def report(runs: list[dict[str, Any]]) -> tuple[str, dict[str, Any]]:
    """The markdown table (one row per path, medians over the rounds) and the comparison figures."""
    by_path = {path: [r for r in runs if r["path"] == path] for path in PATHS}
    median = {
        path: {key: statistics.median(r[key] for r in rows)
               for key in ("seconds_per_step", "train_seconds", "cpu_seconds_per_step", "process_cpu_seconds",
                           "dev_cer", "dev_wer")}
        for path, rows in by_path.items()
    }
    lines = [
        "| fusion path | rounds | steps | train s (median) | s/step | vs reference | train CPU s/step | vs reference "
        "| process CPU s | dev CER % | dev WER % |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    base = median["reference"]
    for path in PATHS:
        m = median[path]
        lines.append(
            f"| {path} | {len(by_path[path])} | {by_path[path][0]['steps']} | {m['train_seconds']:.1f} "
            f"| {m['seconds_per_step']:.3f} | {m['seconds_per_step'] / base['seconds_per_step']:.2f}x "
            f"| {m['cpu_seconds_per_step']:.3f} | {m['cpu_seconds_per_step'] / base['cpu_seconds_per_step']:.2f}x "
            f"| {m['process_cpu_seconds']:.1f} "
            f"| {100 * m['dev_cer']:.2f} | {100 * m['dev_wer']:.2f} |"
        )
    pairs = list(zip(by_path["reference"], by_path["stacked"]))
    gaps = [abs(a["losses"][s] - b["losses"][s]) for a, b in pairs for s in a["losses"] if s in b["losses"]]
    gaps += [abs(a["train_loss"] - b["train_loss"]) for a, b in pairs if None not in (a["train_loss"], b["train_loss"])]
    loss_gap = max(gaps, default=float("nan"))
    cer_gap = max(abs(a["dev_cer"] - b["dev_cer"]) for a, b in pairs)
    comparison = {
        "speedup": base["seconds_per_step"] / median["stacked"]["seconds_per_step"],
        "cpu_speedup": base["cpu_seconds_per_step"] / median["stacked"]["cpu_seconds_per_step"],
        "largest_logged_loss_difference": loss_gap,
        "largest_dev_cer_difference_points": 100 * cer_gap,
    }
    lines.append("")
    lines.append(
        f"stacked path: {comparison['speedup']:.2f}x the reference path's speed per step (train s), "
        f"{comparison['cpu_speedup']:.2f}x in training CPU time; largest difference of a logged training loss "
        f"{loss_gap:.2e}, of the dev CER {100 * cer_gap:.2f} points (same round)"
    )
    return "\n".join(lines), comparison


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--spec", required=True, help="the demo's fusion stage settings (its stage_spec.json)")
    parser.add_argument("--model", required=True, help="the target adapter model folder (model.path)")
    parser.add_argument("--prepared", required=True, help="the demo's prepared data (the stage's data.prepared_dir)")
    parser.add_argument("--out", required=True, help="folder for the runs (one sub-folder per path and round)")
    parser.add_argument("--max-steps", type=int, default=100, help="training steps of each run")
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads of each run")
    parser.add_argument("--rounds", type=int, default=1, help="runs per path, interleaved")
    parser.add_argument("--json", default=None, metavar="PATH", help="also write the figures here")
    args = parser.parse_args()
    runs = []
    for round_index in range(args.rounds):
        for path in PATHS:
            r = run_stage(path, round_index, args)
            print(f"[{path}, round {round_index + 1}] {r['steps']} steps in {r['train_seconds']:.1f} s "
                  f"({r['seconds_per_step']:.3f} s/step, CPU {r['cpu_seconds_per_step']:.3f} s/step), process CPU "
                  f"{r['process_cpu_seconds']:.1f} s, dev CER {100 * r['dev_cer']:.2f}%, load average "
                  f"{r['load_average']:.1f}", flush=True)
            runs.append(r)
    text, comparison = report(runs)
    print()
    print(text)
    if args.json:
        Path(args.json).write_text(json.dumps({"args": vars(args), "runs": runs, **comparison}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
