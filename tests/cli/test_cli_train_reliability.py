"""Faults during ``adaptspeech train``: each ends with one line, without a traceback, without a silently
wrong result and without losing the last complete checkpoint.

* the disk fills up while a checkpoint is written;
* a checkpoint holds a truncated safetensors file;
* ``--resume`` with settings that changed since the first start;
* two runs writing the same output_dir (and a lock left by a dead run);
* the loss becomes NaN;
* a language code that is not ISO-like;
* a plain re-run into an output_dir that holds another run, and ``--resume`` from another run's checkpoint;
* a count, a rate or a backbone dimension out of its range, and a model too large for the memory of the machine.
"""

from __future__ import annotations

import errno
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from helpers.cli import one_error_line, run_main, stage_spec, write_yaml
from helpers.files import folder_bytes

from adaptspeech.cli import main
from adaptspeech.run_lock import LOCK_FILE
from adaptspeech.training.resume import checkpoint_problem

pytestmark = pytest.mark.slow


def config(prepared: Path, tmp_path: Path, **training) -> Path:
    spec = stage_spec(prepared, tmp_path / "run", **{"max_steps": 6, "save_steps": 2, **training})
    return write_yaml(tmp_path / "stage.yaml", spec)


def checkpoints(tmp_path: Path) -> list[str]:
    return sorted(p.name for p in (tmp_path / "run" / "checkpoints").glob("checkpoint-*"))


def test_a_full_disk_while_saving_keeps_the_previous_checkpoint(prepared_corpus, tmp_path, capsys, monkeypatch):
    real_save = torch.save

    def disk_full_at_step_4(obj, path, *args, **kwargs):
        if "checkpoint-4" in str(path):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))
        return real_save(obj, path, *args, **kwargs)

    stage = config(prepared_corpus, tmp_path)
    monkeypatch.setattr(torch, "save", disk_full_at_step_4)
    code, _, err = run_main(["train", "--config", stage, "--no-progress"], capsys)
    assert code == 1
    run = tmp_path / "run"
    assert one_error_line(err) == (
        f"adaptspeech: error: step 4: writing checkpoint {run}/checkpoints/checkpoint-4 failed (No space left on "
        f"device); the incomplete folder was removed, the last complete checkpoint is "
        f"{run}/checkpoints/checkpoint-2 (resume with --resume)"
    )
    assert checkpoints(tmp_path) == ["checkpoint-2"]
    assert checkpoint_problem(run / "checkpoints" / "checkpoint-2") is None
    assert not (run / "model").exists() and not (run / LOCK_FILE).exists()

    monkeypatch.setattr(torch, "save", real_save)  # space freed
    code, out, _ = run_main(["train", "--config", stage, "--no-progress", "--resume"], capsys)
    assert code == 0 and f"resuming from {run}/checkpoints/checkpoint-2" in out
    assert json.loads((run / "stage_summary.json").read_text())["global_step"] == 6


def test_a_full_disk_while_saving_the_model_leaves_no_half_written_model(prepared_corpus, tmp_path, capsys,
                                                                         monkeypatch):
    import transformers.modeling_utils as modeling_utils

    real_save = modeling_utils.safe_save_file

    def disk_full_for_the_model(tensors, filename, *args, **kwargs):
        if "checkpoint-" not in str(filename):
            with open(filename, "wb") as handle:  # a few bytes reach the disk, then it is full
                handle.write(b"\0" * 16)
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(filename))
        return real_save(tensors, filename, *args, **kwargs)

    stage = config(prepared_corpus, tmp_path, max_steps=2)
    monkeypatch.setattr(modeling_utils, "safe_save_file", disk_full_for_the_model)
    code, _, err = run_main(["train", "--config", stage, "--no-progress"], capsys)
    assert code == 1
    run = tmp_path / "run"
    assert one_error_line(err) == (
        f"adaptspeech: error: writing the trained model to {run}/model failed (No space left on device); nothing was "
        f"left half-written, the last complete checkpoint is {run}/checkpoints/checkpoint-2: free space and run again "
        "with --resume"
    )
    assert sorted(p.name for p in run.iterdir() if "model" in p.name) == []
    monkeypatch.setattr(modeling_utils, "safe_save_file", real_save)
    assert run_main(["train", "--config", stage, "--no-progress", "--resume"], capsys)[0] == 0
    assert (run / "model" / "model.safetensors").is_file()


def test_a_truncated_safetensors_file_is_skipped_or_refused(prepared_corpus, tmp_path, capsys):
    stage = config(prepared_corpus, tmp_path, max_steps=4)
    assert run_main(["train", "--config", stage, "--no-progress"], capsys)[0] == 0
    latest = tmp_path / "run" / "checkpoints" / "checkpoint-4" / "model.safetensors"
    size = latest.stat().st_size
    with latest.open("r+b") as handle:
        handle.truncate(size // 2)

    code, _, err = run_main(["train", "--config", stage, "--no-progress", "--resume", latest.parent], capsys)
    assert code == 1
    assert one_error_line(err) == (
        f"adaptspeech: error: --resume {latest.parent}: not a complete checkpoint: {latest} is truncated "
        f"({size // 2} of {size} bytes)"
    )

    code, out, err = run_main(["train", "--config", stage, "--no-progress", "--resume", "training.max_steps=6"],
                              capsys)
    assert code == 0
    assert f"adaptspeech: skipping checkpoint-4: {latest} is truncated ({size // 2} of {size} bytes)" in err
    assert f"resuming from {latest.parent.parent}/checkpoint-2" in out
    assert json.loads((tmp_path / "run" / "stage_summary.json").read_text())["global_step"] == 6


def test_resume_with_changed_settings_lists_them(prepared_corpus, tmp_path, capsys):
    stage = config(prepared_corpus, tmp_path, max_steps=2)
    assert run_main(["train", "--config", stage, "--no-progress"], capsys)[0] == 0
    before = (tmp_path / "run" / "model" / "model.safetensors").read_bytes()
    argv = ["train", "--config", stage, "--no-progress", "--resume", "training.learning_rate=0.01",
            "model.trainable.backbone=false", "training.max_steps=4"]
    code, _, err = run_main(argv, capsys)
    assert code == 1
    assert one_error_line(err) == (
        f"adaptspeech: error: --resume: the stage spec changed since the first start ({tmp_path}/run/stage_spec.json): "
        "model.trainable.backbone: true -> false; training.learning_rate: 0.005 -> 0.01; restore these settings or "
        "train into a new output_dir (only the step budget, logging, saving and evaluation may change)"
    )
    assert (tmp_path / "run" / "model" / "model.safetensors").read_bytes() == before  # nothing overwritten
    # the step budget and the evaluation may change
    argv = ["train", "--config", stage, "--no-progress", "--resume", "training.max_steps=4", "evaluation.batch_size=4"]
    assert run_main(argv, capsys)[0] == 0


def test_a_second_run_into_the_same_output_dir_is_refused(prepared_corpus, tmp_path, capsys):
    stage = config(prepared_corpus, tmp_path, max_steps=2)
    lock = tmp_path / "run" / LOCK_FILE
    lock.parent.mkdir(parents=True)
    # a live run (this test's own process stands for it)
    lock.write_text(json.dumps({"pid": os.getpid(), "host": os.uname().nodename, "started": "2026-01-01 10:00:00"}))
    code, _, err = run_main(["train", "--config", stage, "--no-progress"], capsys)
    assert code == 1
    assert one_error_line(err) == (
        f"adaptspeech: error: output_dir {tmp_path}/run is in use by another run (process {os.getpid()}, started "
        f"2026-01-01 10:00:00); wait for it to finish or pick another output_dir (if that run is over, delete {lock})"
    )
    assert not (tmp_path / "run" / "checkpoints").exists()

    # a lock left by a run that died is taken over, and released at the end
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    lock.write_text(json.dumps({"pid": int(dead.stdout), "host": os.uname().nodename, "started": "x"}))
    assert run_main(["train", "--config", stage, "--no-progress"], capsys)[0] == 0
    assert not lock.exists() and (tmp_path / "run" / "model" / "model.safetensors").is_file()


def test_a_nan_loss_stops_at_its_step_and_keeps_the_last_checkpoint(prepared_corpus, tmp_path, capsys):
    """One training clip with NaN features (row 9): with sequential batches of 4 it is in step 3."""
    from datasets import load_from_disk

    prepared = tmp_path / "prepared"
    shutil.copytree(prepared_corpus / "processor", prepared / "processor")
    dataset = load_from_disk(str(prepared_corpus / "dataset"))
    poisoned = dataset["train"].map(
        lambda row, i: {"input_features": (np.asarray(row["input_features"]) * np.nan).tolist()} if i == 9 else {},
        with_indices=True,
    )
    dataset["train"] = poisoned
    dataset.save_to_disk(str(prepared / "dataset"))
    shutil.copy(prepared_corpus / "prepare_config.json", prepared / "prepare_config.json")  # prepare's last file
    spec = stage_spec(prepared, tmp_path / "run", max_steps=6, save_steps=1, train_sampling_strategy="sequential")
    stage = write_yaml(tmp_path / "stage.yaml", spec)
    code, _, err = run_main(["train", "--config", stage, "--no-progress"], capsys)
    assert code == 1
    run = tmp_path / "run"
    assert one_error_line(err) == (
        "adaptspeech: error: step 3: the training loss is nan (loss_ctc=nan) on this process or another; stopped "
        f"before the optimizer step, the last complete checkpoint is {run}/checkpoints/checkpoint-2. Check the data "
        "of this step (NaN features?) or lower training.learning_rate"
    )
    assert checkpoints(tmp_path) == ["checkpoint-1", "checkpoint-2"]
    assert checkpoint_problem(run / "checkpoints" / "checkpoint-2") is None
    assert not (run / "model").exists()


def test_a_language_code_that_is_not_iso_like_is_one_line(prepared_corpus, tmp_path, capsys):
    spec = stage_spec(prepared_corpus, tmp_path / "run")
    spec["data"]["train_languages"] = ["ro", "Romanian"]
    stage = write_yaml(tmp_path / "stage.yaml", spec)
    code, _, err = run_main(["train", "--config", stage, "--no-progress"], capsys)
    assert code == 1
    assert one_error_line(err) == (
        f"adaptspeech: error: {stage}: data.train_languages: expected a list of language codes (ISO 639: 2 or 3 "
        "lower-case letters, optionally with subtags: ro, pt-BR, zh-CN), got ['ro', 'Romanian']"
    )


# ---- a used output_dir and checkpoints of another run --------------------------------------------------------------


def other_run(prepared: Path, output_dir: Path, tmp_path: Path, **training) -> Path:
    """A stage of other settings than :func:`config`'s: named ``other``, trained on cs only."""
    spec = stage_spec(prepared, output_dir, **{"max_steps": 2, "save_steps": 1, **training})
    spec["name"] = "other"
    spec["data"]["train_languages"] = ["cs"]
    return write_yaml(tmp_path / "other.yaml", spec)


def test_a_plain_rerun_into_a_used_output_dir_is_refused_and_keeps_the_earlier_run(prepared_corpus, tmp_path, capsys):
    """Before: the second run replaced the first's model and stage_spec.json and its checkpoints were rotated away."""
    run = tmp_path / "run"
    first = config(prepared_corpus, tmp_path, max_steps=4)
    assert run_main(["train", "--config", first, "--no-progress"], capsys)[0] == 0
    before = folder_bytes(run)

    other = other_run(prepared_corpus, run, tmp_path)
    code, _, err = run_main(["train", "--config", other, "--no-progress"], capsys)
    assert code == 1
    assert one_error_line(err) == (
        f"adaptspeech: error: output_dir {run} holds another run: stage 'tiny' (checkpoint-2, checkpoint-4, model/), "
        'whose settings differ from this one\'s: data.train_languages: ["ro", "cs", "pl"] -> ["cs"]; name: "tiny" -> '
        '"other"; training.max_steps: 4 -> 2; training.save_steps: 2 -> 1. Replace it with --overwrite or pick another '
        "output_dir"
    )
    assert folder_bytes(run) == before  # byte for byte

    code, _, err = run_main(["train", "--config", first, "--no-progress"], capsys)  # the same settings again
    assert code == 1
    assert one_error_line(err) == (
        f"adaptspeech: error: output_dir {run} holds another run: stage 'tiny' (checkpoint-2, checkpoint-4, model/), "
        "of the same settings. Continue it with --resume, replace it with --overwrite, or pick another output_dir"
    )
    assert folder_bytes(run) == before

    # a setting refused before training leaves it whole, --overwrite or not
    argv = ["train", "--config", other, "--no-progress", "--overwrite", "model.config.backbone_config.num_mel_bins=40"]
    assert run_main(argv, capsys)[0] == 1
    assert folder_bytes(run) == before

    # --overwrite replaces it: none of its checkpoints is left for --resume to adopt
    assert run_main(["train", "--config", other, "--no-progress", "--overwrite"], capsys)[0] == 0
    assert checkpoints(tmp_path) == ["checkpoint-1", "checkpoint-2"]
    assert json.loads((run / "stage_spec.json").read_text())["name"] == "other"
    assert json.loads((run / "stage_summary.json").read_text())["stage"] == "other"


def test_overwrite_and_resume_exclude_each_other(prepared_corpus, tmp_path, capsys):
    stage = config(prepared_corpus, tmp_path)
    with pytest.raises(SystemExit) as info:
        main(["train", "--config", str(stage), "--resume", "--overwrite"])
    assert info.value.code == 2
    assert "--overwrite: not allowed with argument --resume" in capsys.readouterr().err


def test_resume_refuses_a_checkpoint_written_with_other_settings(prepared_corpus, tmp_path, capsys):
    """Before: a checkpoint of another run was continued (its output_dir had no stage_spec.json to compare with)."""
    first = config(prepared_corpus, tmp_path, max_steps=2)
    assert run_main(["train", "--config", first, "--no-progress"], capsys)[0] == 0
    checkpoint = tmp_path / "run" / "checkpoints" / "checkpoint-2"

    other = other_run(prepared_corpus, tmp_path / "b", tmp_path, max_steps=4)
    code, _, err = run_main(["train", "--config", other, "--no-progress", "--resume", checkpoint], capsys)
    assert code == 1
    assert one_error_line(err) == (
        f"adaptspeech: error: --resume: {checkpoint} was written by a run of other settings "
        f'({checkpoint}/stage_spec.json): data.train_languages: ["ro", "cs", "pl"] -> ["cs"]; name: "tiny" -> '
        '"other"; restore these settings or train into a new output_dir (only the step budget, logging, saving and '
        "evaluation may change)"
    )
    assert not (tmp_path / "b" / "model").exists()

    # the same settings may continue it in another output_dir (more steps)
    branch = write_yaml(tmp_path / "branch.yaml", stage_spec(prepared_corpus, tmp_path / "c", max_steps=4,
                                                             save_steps=2))
    code, out, _ = run_main(["train", "--config", branch, "--no-progress", "--resume", checkpoint], capsys)
    assert code == 0 and f"resuming from {checkpoint}" in out
    assert json.loads((tmp_path / "c" / "stage_summary.json").read_text())["global_step"] == 4
    assert json.loads((tmp_path / "c" / "stage_spec.json").read_text())["output_dir"] == str(tmp_path / "c")


# ---- settings out of their range -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("training.max_steps=-5", "training.max_steps: expected a positive integer (or -1: train "
                                  "training.num_train_epochs), got -5"),
        ("training.gradient_accumulation_steps=0", "training.gradient_accumulation_steps: expected a positive "
                                                   "integer, got 0"),
        ("training.learning_rate=.inf", "training.learning_rate: expected a finite number > 0, got inf"),
        ("model.config.backbone_config.hidden_size=-4", "model.config.backbone_config.hidden_size: expected a positive "
                                                        "integer, got -4"),
        ("model.config.backbone_config.num_attention_heads=0", "model.config.backbone_config.num_attention_heads: "
                                                               "expected a positive integer, got 0"),
    ],
)
def test_a_setting_out_of_its_range_is_one_line_before_anything_is_written(prepared_corpus, tmp_path, capsys,
                                                                           override, message):
    """Before: -5 steps trained 12 steps, 0 ended in ZeroDivisionError, -4 in a traceback, inf in a NaN loss that
    blamed the data."""
    stage = config(prepared_corpus, tmp_path, max_steps=2)
    code, _, err = run_main(["train", "--config", stage, "--no-progress", override], capsys)
    assert code == 1
    assert one_error_line(err) == f"adaptspeech: error: {stage}: {message}"  # the stage file, then the setting
    assert not (tmp_path / "run").exists()


def test_a_model_too_large_for_memory_is_refused_with_its_parameter_count(prepared_corpus, tmp_path, capsys,
                                                                          monkeypatch):
    """Before: ``hidden_size: 1000000000000`` ended in the allocator's traceback asking for 960 TB."""
    stage = config(prepared_corpus, tmp_path, max_steps=2)
    code, _, err = run_main(["train", "--config", stage, "--no-progress",
                             "model.config.backbone_config.hidden_size=1000000000000"], capsys)
    assert code == 1
    line = one_error_line(err)
    assert line.startswith(
        "adaptspeech: error: model.config.backbone_config (hidden_size: 1000000000000, intermediate_size: 64, "
        "num_hidden_layers: 2): the model would have at least "
    )
    assert " parameters (" in line and "in float32), more than the memory of this machine (" in line
    assert not (tmp_path / "run" / "checkpoints").exists()

    # the estimate is exact for a model whose tensors can be counted: the tiny one against 100 kB of memory
    from adaptspeech.training import model_size

    monkeypatch.setattr(model_size, "machine_memory_bytes", lambda: 100_000)
    code, _, err = run_main(["train", "--config", stage, "--no-progress"], capsys)
    assert code == 1
    assert re.fullmatch(
        r"adaptspeech: error: model\.config\.backbone_config \(hidden_size: 32, intermediate_size: 64, "
        r"num_hidden_layers: 2\): the model would have 4\d,\d{3} parameters \(\d+ kB in float32\), more than the "
        r"memory of this machine \(100 kB\); make the model smaller",
        one_error_line(err),
    ), err
