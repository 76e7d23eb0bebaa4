"""How long the command line takes to start: seconds of each command below, as the median (and minimum) of ``--runs``
fresh interpreters run in turn, against ``python -c pass`` in the same run (the ratio column), with the load average
before and after (the machine may be shared: compare the ratios, and ``python -c pass`` beside each figure).

    python -c pass                          the interpreter alone (baseline)
    adaptspeech --help                      ``python -m adaptspeech.cli --help``: the console script's imports
    adaptspeech transcribe --help           the largest subcommand parser
    adaptspeech demo --help                 a recipe task's options (the demo's option table)
    import adaptspeech.runtime              the torch-free ONNX runtime
    import torch                            what the three above no longer import

Every command also reports whether torch, transformers or peft was imported (``-X importtime`` of one more run).

Usage::

    python scripts/bench_startup.py --runs 7
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import subprocess
import sys
import time
from datetime import date

COMMANDS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("python -c pass", ("-c", "pass")),
    ("adaptspeech --help", ("-m", "adaptspeech.cli", "--help")),
    ("adaptspeech transcribe --help", ("-m", "adaptspeech.cli", "transcribe", "--help")),
    ("adaptspeech demo --help", ("-m", "adaptspeech.cli", "demo", "--help")),
    ("import adaptspeech.runtime", ("-c", "import adaptspeech.runtime")),
    ("import torch", ("-c", "import torch")),
)
"""``(name, interpreter arguments)`` of each measured command; the first is the baseline."""

HEAVY = ("torch", "transformers", "peft")


def seconds(arguments: tuple[str, ...]) -> float:
    """Wall-clock seconds of one fresh interpreter running ``arguments`` (its output discarded)."""
    start = time.perf_counter()
    subprocess.run([sys.executable, *arguments], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
    return time.perf_counter() - start


def heavy_imports(arguments: tuple[str, ...]) -> list[str]:
    """The packages of :data:`HEAVY` that ``arguments`` imports, read from ``-X importtime``'s report."""
    done = subprocess.run([sys.executable, "-X", "importtime", *arguments], stdout=subprocess.DEVNULL,
                          stderr=subprocess.PIPE, text=True, check=True)
    names = {line.rsplit("|", 1)[-1].strip() for line in done.stderr.splitlines() if line.startswith("import time:")}
    return [name for name in HEAVY if name in names]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=5, help="interpreters per command (default 5)")
    args = parser.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    load_before = os.getloadavg()
    for _, arguments in COMMANDS:  # warm the file cache once
        seconds(arguments)
    times: dict[str, list[float]] = {name: [] for name, _ in COMMANDS}
    for _ in range(args.runs):  # interleaved, so that a busy moment spreads over every command
        for name, arguments in COMMANDS:
            times[name].append(seconds(arguments))
    load_after = os.getloadavg()
    base = statistics.median(times[COMMANDS[0][0]])
    print(f"{date.today()}, {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, Python "
          f"{platform.python_version()}; median of {args.runs} runs; load average {load_before[0]:.2f} before, "
          f"{load_after[0]:.2f} after")
    print("| command | median s | min s | / python -c pass | imports torch / transformers / peft |")
    print("| --- | ---: | ---: | ---: | --- |")
    for name, arguments in COMMANDS:
        median = statistics.median(times[name])
        heavy = ", ".join(heavy_imports(arguments)) or "none"
        print(f"| `{name}` | {median:.2f} | {min(times[name]):.2f} | {median / base:.1f} | {heavy} |")


if __name__ == "__main__":
    main()
