"""scripts/gpu_check.py at toy size on the CPU (its real run needs a CUDA GPU): every section runs and reports what
it checked, and its checks fail when they should."""

import json
import math
import subprocess
import sys

import pytest
import torch
from helpers.paths import REPO

sys.path.insert(0, str(REPO / "scripts"))

import gpu_check


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("gpu_check")
    done = subprocess.run(
        [sys.executable, str(REPO / "scripts" / "gpu_check.py"), "--device", "cpu", "--tiny", "--out", str(out)],
        cwd=REPO, capture_output=True, text=True, timeout=600, check=False,
    )
    return done, out


def test_every_section_runs_and_passes_at_toy_size(tiny_run):
    done, out = tiny_run
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    report = json.loads((out / "gpu_check.json").read_text())
    assert report["failures"] == []
    assert list(report["sections"]) == list(gpu_check.SECTIONS)
    text = (out / "gpu_check.md").read_text()
    assert text.strip() in done.stdout  # the tables are printed as written
    for number, name in enumerate(gpu_check.SECTIONS, 1):
        assert f"### {number}. " in text, name


def test_every_head_and_attention_kind_trained_with_audited_gradients(tiny_run):
    from adaptspeech.attention import ATTENTION
    from adaptspeech.heads import HEADS

    _, out = tiny_run
    rows = json.loads((out / "gpu_check.json").read_text())["sections"]["heads"]["figures"]
    assert {(r["head"], r["kind"]) for r in rows} == {(h, k) for h in HEADS.names() for k in ATTENTION.names()}
    for row in rows:
        assert row["ok"] is True, row
        assert len(row["losses"]) == gpu_check.Scale.tiny().steps
        assert all(math.isfinite(x) and x > 0 for x in row["losses"])


def test_training_rows_cover_every_configuration_with_and_without_checkpointing(tiny_run):
    _, out = tiny_run
    results = json.loads((out / "gpu_check.json").read_text())["sections"]["training"]["figures"]
    seen = {(r["config"], r["checkpointing"]) for r in results}
    assert seen == {(c, ckpt) for c in gpu_check.TRAINING_CONFIGS for ckpt in (False, True)}
    for r in results:
        assert "error" not in r, r
        assert r["median_seconds"] > 0 and r["audio_seconds_per_second"] > 0
        assert r["trainable"] > 0
    by = {(r["config"], r["checkpointing"]): r for r in results}
    # equal adapter size: our bottleneck adapter and the MMS adapters (with biases and the CTC head) within 5%
    ours, peer = by[("adapter", False)]["trainable"], by[("mms", False)]["trainable"]
    head = 40 * (gpu_check.Scale.tiny().width_300m + 1)  # the peer's trainable CTC head (vocabulary 40)
    assert abs((peer - head) - ours) / ours < 0.05
    assert by[("full", False)]["trainable"] > by[("fusion", False)]["trainable"] > ours


def test_attention_and_decoding_figures(tiny_run):
    import bench_attention as ba

    _, out = tiny_run
    sections = json.loads((out / "gpu_check.json").read_text())["sections"]
    measured = {(m["label"], m["frames"]) for m in sections["attention"]["figures"] if "error" not in m}
    scale = gpu_check.Scale.tiny()
    for label in (*ba.OURS, *ba.TABLE1_KINDS, *ba.BASELINES, *ba.REL_BASELINES):
        for frames in scale.attention_lengths:
            assert (label, frames) in measured
    assert ("rel_pos_blockwise", scale.long_length) in measured
    decoding = sections["decoding"]["figures"]
    assert len(decoding) == 4
    for per_device in decoding.values():
        assert per_device["cpu"]["utt_per_s"] > 0 and per_device["cpu"]["cer"] >= 0


def test_the_demo_ran_and_wrote_its_table(tiny_run):
    _, out = tiny_run
    demo = json.loads((out / "gpu_check.json").read_text())["sections"]["demo"]["figures"]
    systems = [row["system"] for row in demo["results"]["rows"]]
    assert "target adapter alone" in systems and "SimAdapter fusion (on the target adapter)" in systems


def test_the_gradient_audit_finds_missing_stray_nonfinite_and_unfrozen_gradients():
    model = torch.nn.ModuleDict({"trained": torch.nn.Linear(2, 2), "frozen": torch.nn.Linear(2, 2)})
    model["frozen"].requires_grad_(False)
    marker = "frozen."
    assert any("no gradient on trainable 2" in p for p in gpu_check.gradient_audit(model, marker))
    model["trained"](torch.ones(1, 2)).sum().backward()
    assert gpu_check.gradient_audit(model, marker) == []
    model["frozen"].weight.grad = torch.zeros(2, 2)
    assert any("gradient on frozen 1" in p for p in gpu_check.gradient_audit(model, marker))
    model["frozen"].weight.grad = None
    model["trained"].bias.grad[0] = float("nan")
    assert any("non-finite gradient on 1" in p for p in gpu_check.gradient_audit(model, marker))
    model["trained"].bias.grad = torch.zeros(2)
    model["frozen"].bias.requires_grad_(True)
    problems = gpu_check.gradient_audit(model, marker)
    assert any("should be frozen" in p for p in problems)


def test_the_ranking_line_tells_a_changed_ranking():
    cpu = {"rows": [{"system": "a", "cer": 0.1}, {"system": "b", "cer": 0.2}]}
    assert "the same" in gpu_check.ranking_line({"rows": [{"system": "a", "cer": 0.15}, {"system": "b", "cer": 0.3}]},
                                                cpu)
    line = gpu_check.ranking_line({"rows": [{"system": "a", "cer": 0.3}, {"system": "b", "cer": 0.2}]}, cpu)
    assert "differs" in line and "b < a" in line


def test_a_training_target_line_with_a_zero_baseline_peak_says_no_memory_ratio():
    """At toy sizes the full fine-tuning peak RSS can stay at the import baseline (0 MiB above it): the target line
    said nothing and the section ended in ZeroDivisionError."""
    a = {"median_seconds": 0.5, "peak_above_baseline_mib": 3.0}
    b = {"median_seconds": 1.0, "peak_above_baseline_mib": 0.0}
    line = gpu_check.training_target_line("adapter", "full", 0.6, False, a, b, "peak_above_baseline_mib")
    assert line == "- adapter <= 0.6x full, checkpointing off: 0.50x met (memory -)"
    b["peak_above_baseline_mib"] = 2.0
    assert gpu_check.training_target_line("adapter", "full", 0.4, True, a, b, "peak_above_baseline_mib") == (
        "- adapter <= 0.4x full, checkpointing on: 0.50x **missed** (memory 1.50x)")
