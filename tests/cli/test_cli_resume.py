"""Kill ``adaptspeech train`` (SIGKILL) after a checkpoint, resume it with ``--resume``, and check that it ends at the
same step with the same weights and the same loss curve as an uninterrupted run with the same seed."""

from __future__ import annotations

import json
import signal
import subprocess
import time

import pytest
import torch
from helpers.cli import cli, run_command, stage_spec, subprocess_env, write_yaml
from safetensors.torch import load_file

pytestmark = pytest.mark.slow

MAX_STEPS, SAVE_STEPS = 30, 5


def _wait_for(path, proc: subprocess.Popen, timeout: float = 180.0) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        if proc.poll() is not None:
            pytest.fail(f"training ended (exit {proc.returncode}) before {path} appeared")
        if time.monotonic() > deadline:
            proc.kill()
            pytest.fail(f"{path} did not appear within {timeout:.0f} s")
        time.sleep(0.01)


def test_killed_run_resumes_to_the_uninterrupted_result(prepared_corpus, tmp_path):
    # dropout and SpecAugment are on in the tiny stage, so the RNG state must be restored too
    training = {"max_steps": MAX_STEPS, "save_steps": SAVE_STEPS}
    reference = write_yaml(tmp_path / "reference.yaml", stage_spec(prepared_corpus, tmp_path / "reference", **training))
    # the reference runs as the killed and resumed runs do: a subprocess on one thread (in this process it would run
    # on ADAPTSPEECH_TEST_THREADS threads, and other reduction orders move the batch-norm statistics past 1e-5)
    run_command(cli("train", "--config", str(reference), "--no-progress"), cwd=tmp_path)

    config = write_yaml(tmp_path / "stage.yaml", stage_spec(prepared_corpus, tmp_path / "run", **training))
    run = tmp_path / "run"
    with open(tmp_path / "killed.log", "w") as log:
        proc = subprocess.Popen(cli("train", "--config", str(config), "--no-progress"), cwd=tmp_path,
                                env=subprocess_env(), stdout=log, stderr=subprocess.STDOUT)
        # the adapter-only copy is written by the on_save callback, after the full checkpoint: it marks a complete one
        _wait_for(run / "checkpoints" / f"checkpoint-{SAVE_STEPS}" / "trainable.json", proc)
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=60)
    assert proc.returncode == -signal.SIGKILL
    assert not (run / "model").exists(), "the run finished before it was killed"

    done = run_command(cli("train", "--config", str(config), "--no-progress", "--resume"), cwd=tmp_path)
    resumed_from = done.stdout.split("resuming from ", 1)[1].split()[0]
    resumed_step = int(resumed_from.rsplit("-", 1)[1])
    assert SAVE_STEPS <= resumed_step < MAX_STEPS and resumed_step % SAVE_STEPS == 0
    # only the remaining steps ran (the Trainer prints one log line per step: logging_steps=1)
    assert done.stdout.count("'loss_ctc'") == MAX_STEPS - resumed_step

    summaries = [json.loads((tmp_path / name / "stage_summary.json").read_text()) for name in ("reference", "run")]
    assert summaries[0]["global_step"] == summaries[1]["global_step"] == MAX_STEPS
    expected = load_file(tmp_path / "reference" / "model" / "model.safetensors")
    actual = load_file(run / "model" / "model.safetensors")
    assert set(expected) == set(actual)
    for name, tensor in expected.items():
        torch.testing.assert_close(actual[name], tensor, rtol=1e-5, atol=1e-6, msg=name)

    # the same loss at every step, before the kill (restored history) and after it (recomputed)
    histories = [json.loads((tmp_path / name / "log_history.json").read_text()) for name in ("reference", "run")]
    curves = [{h["step"]: h["loss"] for h in history if "loss" in h} for history in histories]
    assert sorted(curves[0]) == sorted(curves[1]) == list(range(1, MAX_STEPS + 1))
    for step in curves[0]:
        assert curves[1][step] == pytest.approx(curves[0][step], rel=1e-5), step
