"""`scripts/bench_threads_busy.py`: the table's medians and ratios against the idle 1-thread default-policy
configuration (made-up records: no timing is asserted), and one toy run whose configurations each ran in their own
process with the wait policy they name (libgomp's spin count: 0 passive, 300,000 by default)."""

from __future__ import annotations

import json

import pytest
from helpers.scripts import script_module


@pytest.fixture(scope="module")
def bench():
    yield from script_module("bench_threads_busy")


def record(load: str, policy: str, threads: str, walls: list[float], torch_threads: int, cpus=None) -> dict:
    return {"load": load, "policy": policy, "threads": threads, "walls": walls, "cpus": cpus or walls,
            "torch_threads": torch_threads}


def test_rows_take_medians_over_the_rounds_and_ratios_against_idle_one_thread(bench):
    records = [
        record("idle", "default", "1", [0.30, 0.50], 1),  # round 1
        record("idle", "default", "2", [0.20, 0.20], 2),
        record("busy", "default", "2", [3.0, 5.0, 4.0], 2),
        record("busy", "passive", "auto", [0.8], 1, cpus=[0.7]),
        record("idle", "default", "1", [0.40], 1),  # round 2: the baseline's median is over 0.3, 0.5, 0.4
        record("busy", "passive", "auto", [0.6, 1.0], 1, cpus=[0.5, 0.9]),
    ]
    rows = {(r["load"], r["policy"], r["threads"]): r for r in bench.summarise(records)}
    assert list(rows) == [("idle", "default", "1"), ("idle", "default", "2"), ("busy", "default", "2"),
                          ("busy", "passive", "auto")]
    assert rows["idle", "default", "1"]["wall"] == pytest.approx(0.4)
    assert rows["idle", "default", "1"]["ratio"] == pytest.approx(1.0)
    assert rows["idle", "default", "2"]["ratio"] == pytest.approx(0.5)
    assert rows["busy", "default", "2"]["ratio"] == pytest.approx(10.0)
    auto = rows["busy", "passive", "auto"]
    assert (auto["wall"], auto["cpu"], auto["ratio"], auto["steps"]) == pytest.approx((0.8, 0.7, 2.0, 3))
    text = bench.table(bench.summarise(records))
    assert "| busy | default | 2 | 4.000 | 4.000 | 10.00 |" in text
    assert "| busy | passive | auto -> 1 | 0.800 | 0.700 | 2.00 |" in text


def test_without_the_baseline_no_ratio_is_made_up(bench):
    rows = bench.summarise([record("busy", "passive", "2", [1.0], 2)])
    assert rows[0]["ratio"] is None
    assert bench.table(rows).splitlines()[-1] == "| busy | passive | 2 | 1.000 | 1.000 | - |"


def test_a_toy_run_measures_each_configuration_in_its_own_process(bench, tmp_path, capsys):
    out = tmp_path / "threads.json"
    assert bench.main(["--threads", "1", "--policies", "default,passive", "--loads", "idle", "--steps", "2",
                       "--warmup", "0", "--batch", "2", "--seconds", "0.3", "--json", str(out)]) == 0
    result = json.loads(out.read_text())
    by_policy = {r["policy"]: r for r in result["records"]}
    assert {p: (r["wait_policy"], r["spin_count"], r["torch_threads"]) for p, r in by_policy.items()} == {
        "default": ("default", 300000, 1), "passive": ("PASSIVE", 0, 1)}
    base = sorted(by_policy["default"]["walls"])[0] / 2 + sorted(by_policy["default"]["walls"])[1] / 2
    passive = sum(by_policy["passive"]["walls"]) / 2
    assert [row["ratio"] for row in result["rows"]] == pytest.approx([1.0, passive / base])
    assert result["table"] in capsys.readouterr().out


def test_bad_options_are_refused_in_one_line(bench, capsys):
    for option, value in (("--threads", "0"), ("--policies", "lazy"), ("--loads", "heavy")):
        with pytest.raises(SystemExit):
            bench.main([option, value])
        error = capsys.readouterr().err.strip().splitlines()[-1]
        assert error.startswith("usage:") is False and option in error
