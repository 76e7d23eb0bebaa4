"""`scripts/bench_attention_table1.py --quick`: every row of Wu et al. 2022's Table 1 is timed, finite positive
ratios."""

from __future__ import annotations

import importlib.util
import math
import sys

import pytest
import torch
from helpers.paths import SCRIPTS

SCRIPT = SCRIPTS / "bench_attention_table1.py"


@pytest.fixture(scope="module")
def bench():
    """The script as a module, with `scripts/` on sys.path meanwhile for its `from bench_attention import ...`."""
    names = ("bench_attention_table1", "bench_attention")
    loaded = {name for name in names if name in sys.modules}
    sys.path.insert(0, str(SCRIPTS))
    try:
        spec = importlib.util.spec_from_file_location("bench_attention_table1", SCRIPT)
        module = importlib.util.module_from_spec(spec)
        sys.modules["bench_attention_table1"] = module  # registered before it runs, as an import would
        spec.loader.exec_module(module)
        yield module
    finally:
        sys.path.remove(str(SCRIPTS))
        for name in names:
            if name not in loaded:
                sys.modules.pop(name, None)


def cells(line: str) -> list[str]:
    return [cell.strip() for cell in line.strip().strip("|").split("|")]


def test_log_slope_is_the_growth_exponent(bench) -> None:
    assert bench.log_slope([500, 1000, 2000], [1.0, 4.0, 16.0]) == pytest.approx(2.0)
    assert bench.log_slope([500, 1000, 2000, 4000], [3.0 * t**1.5 for t in (500, 1000, 2000, 4000)]) == pytest.approx(
        1.5
    )


def test_the_papers_ratios_are_the_practical_times_over_baseline(bench) -> None:
    ratios = {row: seed / bench.SEED_BASELINE_TIME for row, _, seed in bench.SEED_TABLE1}
    assert len(bench.SEED_TABLE1) == 13 and ratios["Baseline (QK)"] == 1.0
    assert ratios["Sign-ALSH"] == pytest.approx(268.9 / 146.8) and ratios["Ours"] == pytest.approx(116.8 / 146.8)


def test_table1_quick_times_every_row(bench, tmp_path) -> None:
    threads = torch.get_num_threads()
    output = tmp_path / "table1.md"
    try:
        bench.main(["--quick", "--threads", "1", "--output", str(output)])
    finally:
        torch.set_num_threads(threads)
    lines = output.read_text().splitlines()
    sections = [i for i, line in enumerate(lines) if line.startswith("#### Width")]
    assert len(sections) == 2  # the two --quick widths
    expected = [(row, label, f"{seed / 146.8:.3f}") for row, label, seed in bench.SEED_TABLE1]
    expected += [(row, label, "-") for row, label in bench.TABLE1_EXTRA]
    for start in sections:
        rows = {cells(line)[0]: cells(line) for line in lines[start:] if line.startswith("| ") and "`" in line}
        for row, label, seed in expected:
            found = rows[row]
            assert found[1] == f"`{label}`" and found[-1] == seed
            values = [float(value) for value in found[2:8]]  # ms and the ratios to mhsa and hf_sdpa
            assert all(math.isfinite(v) and v > 0 for v in values), (row, values)
        assert rows["Baseline (QK)"][4:6] == ["1.00", "1.00"]  # mhsa over itself
    growth = [cells(line) for line in lines if line.startswith("| `") and cells(line)[1] in bench.MODES]
    assert {(row[0].strip("`"), row[1]) for row in growth} == {(g, m) for g in bench.GROWTH for m in bench.MODES}
    assert all(math.isfinite(float(row[-1])) and math.isfinite(float(row[-2])) for row in growth)
    assert sum("growth exponent" in line for line in lines) == 4  # two sparse kinds, two modes
