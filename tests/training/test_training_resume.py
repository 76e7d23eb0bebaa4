"""What ``--resume`` may continue from: complete checkpoints only (each file read for its structure, not loaded) and
an unchanged stage spec."""

from __future__ import annotations

import json
from pathlib import Path

import torch
from safetensors.torch import save_file

from adaptspeech.training.resume import changed_settings, checkpoint_problem, last_checkpoint


def checkpoint(folder: Path) -> Path:
    folder.mkdir(parents=True)
    save_file({"w": torch.arange(6.0)}, str(folder / "model.safetensors"))
    torch.save({"state": {}, "param_groups": []}, folder / "optimizer.pt")
    (folder / "trainer_state.json").write_text(json.dumps({"global_step": 1}))
    return folder


def test_a_complete_checkpoint_has_no_problem(tmp_path):
    assert checkpoint_problem(checkpoint(tmp_path / "checkpoint-1")) is None


def test_each_cut_short_file_is_named(tmp_path):
    folder = checkpoint(tmp_path / "checkpoint-1")
    (folder / "trainer_state.json").write_text('{"global_st')
    assert checkpoint_problem(folder) == f"{folder}/trainer_state.json is not valid JSON (cut short)"
    (folder / "trainer_state.json").unlink()
    assert checkpoint_problem(folder) == (
        f"{folder}/trainer_state.json is missing (the run stopped while saving this checkpoint)"
    )

    folder = checkpoint(tmp_path / "checkpoint-2")
    optimizer = (folder / "optimizer.pt").read_bytes()
    (folder / "optimizer.pt").write_bytes(optimizer[: len(optimizer) // 2])
    assert checkpoint_problem(folder) == f"{folder}/optimizer.pt is truncated (not a complete torch archive)"

    folder = checkpoint(tmp_path / "checkpoint-3")
    weights = (folder / "model.safetensors").read_bytes()
    (folder / "model.safetensors").write_bytes(weights[:-4])
    assert checkpoint_problem(folder) == (
        f"{folder}/model.safetensors is truncated ({len(weights) - 4} of {len(weights)} bytes)"
    )
    (folder / "model.safetensors").write_bytes(weights[:5])
    assert checkpoint_problem(folder) == f"{folder}/model.safetensors is truncated (5 bytes)"


def test_last_checkpoint_skips_broken_ones_and_says_why(tmp_path):
    for step in (2, 4, 6):
        checkpoint(tmp_path / f"checkpoint-{step}")
    (tmp_path / "checkpoint-6" / "trainer_state.json").unlink()
    weights = tmp_path / "checkpoint-4" / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:20])
    skipped: list[str] = []
    assert last_checkpoint(tmp_path, report=skipped.append) == str(tmp_path / "checkpoint-2")
    assert [line.split(":")[0] for line in skipped] == ["skipping checkpoint-6", "skipping checkpoint-4"]
    assert last_checkpoint(tmp_path / "missing") is None


def test_resume_compares_settings_not_spelling():
    """An empty section equals an absent one; only settings outside the step budget / logging / evaluation count."""
    before = {"name": "x", "training": {}, "evaluation": {"batch_size": 4}, "data": {"train_languages": ["ro"]}}
    after = {"name": "x", "training": {"max_steps": 9, "logging_steps": 1}, "evaluation": {"method": "ctc_beam"},
             "data": {"train_languages": ["ro"], "max_eval_rows": 5}}
    assert changed_settings(before, after) == []
    after["data"]["train_languages"] = ["ro", "cs"]
    after["training"]["learning_rate"] = 0.1
    assert changed_settings(before, after) == [
        'data.train_languages: ["ro"] -> ["ro", "cs"]', "training.learning_rate: (unset) -> 0.1"
    ]
