"""`scripts/bench_attention_rel_pos_memory.py` at toy lengths: every contender measured or skipped by its T^2
estimate, outputs equal to transformers', and `scripts/bench_attention.py` refusing the flag that moved here."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from helpers.paths import SCRIPTS


def run(script: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPTS / script), *args], capture_output=True, text=True, timeout=300)


def cells(line: str) -> list[str]:
    return [cell.strip() for cell in line.strip().strip("|").split("|")]


def test_quadratic_contenders_are_skipped_past_the_memory_cap_and_outputs_match(tmp_path: Path) -> None:
    report = tmp_path / "rel_pos_memory.md"
    # 0.05 GB: the T x T contenders fit at T = 64 (a few MB) but their estimate at T = 1024 (x256) does not
    done = run("bench_attention_rel_pos_memory.py", "--lengths", "64", "1024", "--rounds", "1", "--budget", "1",
               "--threads", "1", "--max-quadratic-gb", "0.05", "--query-block-size", "32", "--output", str(report))
    assert done.returncode == 0, done.stderr
    text = report.read_text()
    rows = {cells(line)[0]: cells(line)[1:] for line in text.splitlines() if line.startswith("| rel_pos")}
    rows |= {cells(line)[0]: cells(line)[1:] for line in text.splitlines() if line.startswith("| hf_rel_sdpa")}
    assert rows["rel_pos_blockwise"][0].endswith("MB") and rows["rel_pos_blockwise"][1].endswith("MB")
    for quadratic in ("rel_pos", "hf_rel_sdpa"):
        assert rows[quadratic][0].endswith("MB") and rows[quadratic][1].startswith("skipped (~")
    ratios = {cells(line)[0]: cells(line)[1:] for line in text.splitlines() if line.startswith("| 64 |")}
    assert float(ratios["64"][4]) <= 1e-5  # blockwise vs transformers' relative attention, copied weights
    assert "Skipped: `hf_rel_sdpa`, `rel_pos` where the estimated peak exceeds 0.05 GB" in text
    assert "blockwise peak(16000) / peak(4000) <= 4.5: - -> not measured" in text


def test_the_old_flag_is_refused_with_the_new_script_named() -> None:
    done = run("bench_attention.py", "--rel-pos-memory", "--lengths", "64")
    assert done.returncode == 2
    moved = "--rel-pos-memory has moved to its own script: python scripts/bench_attention_rel_pos_memory.py"
    assert moved in done.stderr
