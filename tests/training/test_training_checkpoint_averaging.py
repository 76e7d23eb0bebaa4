"""Top-N checkpoint averaging (adaptspeech/training/checkpoint_averaging.py): checkpoints ranked by the dev CER their
trainer state logs at their step, the average equal to the mean of the chosen state dicts, written as a model folder
that loads; too few checkpoints is one line."""

from __future__ import annotations

import json
import shutil

import pytest
import torch
from helpers.model_folders import model_folder
from safetensors.torch import load_file

from adaptspeech.saved_model import load_saved_model
from adaptspeech.training.checkpoint_averaging import (
    average_state_dicts,
    average_top_checkpoints,
    ranked_checkpoints,
)


def _checkpoints(root, cers: dict[int, float]):
    """A model folder and one ``checkpoint-<step>`` per entry of ``cers``: its weights the model's plus ``step``
    times a fixed noise, its trainer state logging ``eval_cer`` at that step (and another step's, to be ignored)."""
    model_dir = model_folder(root / "model", languages=("ro",))
    model = load_saved_model(model_dir, progress_bar=False)
    noise = {k: torch.randn_like(v) for k, v in model.state_dict().items() if v.is_floating_point()}
    base = {k: v.clone() for k, v in model.state_dict().items()}
    checkpoints = root / "checkpoints"
    for step, cer in cers.items():
        with torch.no_grad():
            for key, value in model.state_dict().items():
                if key in noise:
                    value.copy_(base[key] + step * noise[key])
        folder = checkpoints / f"checkpoint-{step}"
        model.save_pretrained(folder)
        history = [{"step": step - 1, "eval_cer": 0.0}, {"step": step, "loss": 1.0}, {"step": step, "eval_cer": cer}]
        (folder / "trainer_state.json").write_text(json.dumps({"log_history": history}))
    (checkpoints / "checkpoint-99").mkdir()  # no trainer state: not ranked
    return model_dir, checkpoints


def test_the_top_checkpoints_are_averaged_into_a_model_folder(tmp_path):
    model_dir, checkpoints = _checkpoints(tmp_path, {1: 0.30, 2: 0.20, 3: 0.25, 4: 0.20})
    ranked = ranked_checkpoints(checkpoints)
    assert [(f.name, c) for f, c in ranked] == [("checkpoint-4", 0.20), ("checkpoint-2", 0.20),
                                                ("checkpoint-3", 0.25), ("checkpoint-1", 0.30)]
    out = tmp_path / "averaged"
    record = average_top_checkpoints(checkpoints, 3, model_dir, out)
    assert record == {"averaged": ["checkpoint-4", "checkpoint-2", "checkpoint-3"], "metrics": [0.20, 0.20, 0.25],
                      "metric": "eval_cer"}
    chosen = [load_file(str(checkpoints / name / "model.safetensors")) for name in record["averaged"]]
    written = load_file(str(out / "model.safetensors"))
    for key, value in written.items():
        if value.is_floating_point():
            torch.testing.assert_close(value, (chosen[0][key] + chosen[1][key] + chosen[2][key]) / 3)
    assert load_saved_model(out, progress_bar=False) is not None and (out / "processor_config.json").is_file()


def test_average_state_dicts_keeps_integer_buffers_and_refuses_other_shapes():
    a = {"w": torch.tensor([1.0, 2.0]), "n": torch.tensor(3)}
    b = {"w": torch.tensor([3.0, 6.0]), "n": torch.tensor(5)}
    out = average_state_dicts([a, b])
    assert out["w"].tolist() == [2.0, 4.0] and out["n"].item() == 3
    with pytest.raises(ValueError, match=r"state dict 1: w is \(3,\), the first's \(2,\)"):
        average_state_dicts([a, {"w": torch.zeros(3), "n": torch.tensor(1)}])
    with pytest.raises(ValueError, match="no state dict"):
        average_state_dicts([])


def test_too_few_checkpoints_is_one_line(tmp_path):
    model_dir, checkpoints = _checkpoints(tmp_path, {1: 0.3})
    shutil.rmtree(checkpoints / "checkpoint-99")
    with pytest.raises(ValueError, match="1 checkpoints log eval_cer, 2 are to be averaged"):
        average_top_checkpoints(checkpoints, 2, model_dir, tmp_path / "out")
    assert not (tmp_path / "out").exists()
