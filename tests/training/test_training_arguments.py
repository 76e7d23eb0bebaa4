"""The ``TrainingArguments`` a stage builds: every stage file of the recipes (``recipes/synthetic_demo``,
``recipes/common_voice``) gives exactly the arguments recorded in ``tests/fixtures/training_arguments`` (recorded
from the stage runner's code while the ``training`` section was still a plain mapping), and the section reads its
settings by attribute with adaptspeech's defaults."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch
from transformers import TrainingArguments

from adaptspeech.modeling import AdaptSpeechForCTC
from adaptspeech.overrides import load_yaml
from adaptspeech.testing import tiny_config
from adaptspeech.training.stage import StageSpec, _training_arguments

ROOT = Path(__file__).resolve().parents[2]
FIXTURE = ROOT / "tests" / "fixtures" / "training_arguments" / "recipe_stages.json"
STAGE_FILES = sorted([*(ROOT / "recipes" / "synthetic_demo").glob("stage_*.yaml"),
                      *(ROOT / "recipes" / "common_voice").glob("stage_*.yaml")])
RUNS = ((False, None), (True, ["lid_targets"]))
"""``(progress bars, label names)`` of the two builds of every stage (None: the model's ``labels``)."""
PATHS = ("output_dir", "logging_dir")


def stage_dict(path: Path) -> dict[str, Any]:
    """The stage file at ``path`` with what a recipe adds (name, output folder, data, the previous model), on a CPU
    (the bf16 stages of ``recipes/common_voice`` build their arguments there too)."""
    stage = load_yaml(path)
    stage.setdefault("name", path.stem)
    stage.setdefault("output_dir", f"out/{path.parent.name}/{path.stem}")
    data = stage.setdefault("data", {})
    data.setdefault("prepared_dir", "prepared")
    data.setdefault("train_languages", ["ro"])
    stage.setdefault("training", {}).setdefault("use_cpu", True)
    model = stage.setdefault("model", {})
    if model.get("init", "pretrained") in ("pretrained", "backbone"):
        model.setdefault("init", "pretrained")
        model.setdefault("path", "previous/model")
    return stage


def built_arguments() -> dict[str, dict[str, Any]]:
    """``"<stage file>|progress=<bool>|labels=<names>"`` -> the ``TrainingArguments`` the stage builds (as a dict,
    its paths and the settings equal to transformers' defaults left out), with a tiny model for the DDP defaults."""
    defaults = TrainingArguments(output_dir="unused").to_dict()
    torch.manual_seed(0)
    model = AdaptSpeechForCTC(tiny_config("fbank_conformer"))
    built = {}
    for path in STAGE_FILES:
        spec = StageSpec.from_dict(stage_dict(path))
        for progress, labels in RUNS:
            args = json.loads(json.dumps(_training_arguments(spec, model, {}, progress, labels).to_dict(), default=str))
            key = f"{path.relative_to(ROOT)}|progress={progress}|labels={labels}"
            built[key] = {k: v for k, v in args.items() if k not in PATHS and v != defaults.get(k)}
    return built


def test_every_recipe_stage_builds_the_recorded_training_arguments():
    """Typing the ``training`` section changed no number: the same arguments, stage by stage."""
    recorded = json.loads(FIXTURE.read_text())
    built = built_arguments()
    assert sorted(built) == sorted(recorded) and len(built) == 2 * len(STAGE_FILES) >= 28
    for key in recorded:
        assert built[key] == recorded[key], key


if __name__ == "__main__":  # record the fixture (only when the arguments are meant to change)
    FIXTURE.write_text(json.dumps(built_arguments(), indent=1, sort_keys=True) + "\n")
