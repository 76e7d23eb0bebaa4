"""A declared, trainable adapter is trained: without ``model.active_languages`` the trainable adapters are
the active ones; an explicit ``active_languages`` that leaves one out is refused in one line. Before, the stage
reported ``adapter:ro`` as trainable and left it unchanged, or (backbone frozen) crashed with "element 0 of tensors
does not require grad". Also: ``init: pretrained`` loads a saved ``las`` model as what it is."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from helpers.cli import load_prepared_split, stage_spec, write_yaml
from transformers import set_seed

from adaptspeech.cli import main
from adaptspeech.saved_model import load_saved_model, saved_head
from adaptspeech.training.model_setup import build_model

pytestmark = pytest.mark.slow


def adapter_stage(prepared: Path, out: Path, backbone: bool, adapters: list[str], **model: object) -> dict:
    spec = stage_spec(prepared, out, max_steps=4)
    spec["model"]["config"]["adapter_languages"] = ["ro", "cs", "pl"]
    spec["model"]["config"]["adapter_defaults"] = {"bottleneck": 8}
    spec["model"]["trainable"] = {"backbone": backbone, "head": True, "adapters": adapters}
    spec["model"].update(model)
    return spec


def train(spec: dict, tmp_path: Path, capsys: pytest.CaptureFixture | None = None) -> int:
    config = write_yaml(tmp_path / "stage.yaml", spec)
    return main(["train", "--config", str(config), "--no-progress"])


def changed_groups(spec: dict, prepared: Path) -> dict[str, bool]:
    """Per group: did any tensor change between the stage's initial model and the saved one?"""
    _, processor = load_prepared_split(prepared)
    set_seed(spec["seed"])
    initial = dict(build_model(spec["model"], processor).named_parameters())
    path = Path(spec["output_dir"]) / "model"
    trained = load_saved_model(path)
    changed: dict[str, bool] = {}
    for group, params in trained._named_groups().items():
        changed[group] = any(not torch.equal(p, initial[name]) for name, p in params)
    return changed


@pytest.mark.parametrize("backbone", [True, False])
def test_a_trainable_adapter_without_active_languages_is_trained(prepared_corpus, tmp_path, backbone):
    spec = adapter_stage(prepared_corpus, tmp_path / "run", backbone, ["ro"])
    assert train(spec, tmp_path) == 0
    summary = json.loads((tmp_path / "run" / "stage_summary.json").read_text())
    assert summary["trainable"]["groups"]["adapter:ro"]["trainable"] > 0
    changed = changed_groups(spec, prepared_corpus)
    assert changed["adapter:ro"], "the trainable adapter was not trained"
    assert changed["backbone"] is backbone and changed["head"]
    assert not changed["adapter:cs"] and not changed["adapter:pl"]
    assert summary["active_languages"] == ["ro"]


def test_several_trainable_adapters_are_routed_per_utterance(prepared_corpus, tmp_path):
    spec = adapter_stage(prepared_corpus, tmp_path / "run", False, ["ro", "cs", "pl"])
    assert train(spec, tmp_path) == 0
    summary = json.loads((tmp_path / "run" / "stage_summary.json").read_text())
    assert summary["active_languages"] == ["ro", "cs", "pl"]
    changed = changed_groups(spec, prepared_corpus)
    assert changed["adapter:ro"] and changed["adapter:cs"] and changed["adapter:pl"] and not changed["backbone"]


def test_active_languages_that_leave_a_trainable_adapter_out_are_refused(prepared_corpus, tmp_path, capsys):
    spec = adapter_stage(prepared_corpus, tmp_path / "run", False, ["ro"], active_languages=["cs"])
    assert train(spec, tmp_path) == 1
    err = capsys.readouterr().err.strip()
    assert err == (
        "adaptspeech: error: model.trainable.adapters ['ro'] would not train: they are not among "
        "model.active_languages ['cs']; add them there or remove them from model.trainable.adapters"
    )
    assert not (tmp_path / "run" / "model").exists()


def test_a_trainable_adapter_outside_the_fusion_is_refused(prepared_corpus, tmp_path, capsys):
    spec = adapter_stage(prepared_corpus, tmp_path / "run", False, ["ro"],
                         fusion={"languages": ["cs", "pl"], "target_language": "cs"})
    assert train(spec, tmp_path) == 1
    err = capsys.readouterr().err
    assert "model.trainable.adapters ['ro'] would not train: they are not among the fusion's languages" in err


def test_a_trainable_fusion_that_active_languages_switch_off_is_refused_naming_both_settings(
    prepared_corpus, tmp_path, capsys
):
    spec = adapter_stage(prepared_corpus, tmp_path / "run", False, [], active_languages=["cs"],
                         fusion={"languages": ["cs", "pl"], "target_language": "cs"})
    spec["model"]["trainable"]["fusion"] = True
    assert train(spec, tmp_path) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("adaptspeech: error: model.trainable.fusion: the fusion would not train: "
                              "model.active_languages ['cs'] switches it off"), err
    assert not (tmp_path / "run").exists() or not any((tmp_path / "run").glob("checkpoint-*"))


@pytest.mark.parametrize("head", ["las", "ctc_las", "ctc"])
def test_a_saved_model_of_every_head_loads_with_init_pretrained(prepared_corpus, tmp_path, head):
    method = "attention_greedy" if head == "las" else "ctc_greedy"
    first = stage_spec(prepared_corpus, tmp_path / "first", max_steps=2)
    first["model"]["config"]["head"] = head
    first["model"]["config"]["las"] = {"decoder_hidden": 32, "embedding_dim": 16, "attention_dim": 16,
                                       "max_target_length": 200}
    first["evaluation"] = {"method": method, "batch_size": 8}
    assert train(first, tmp_path) == 0
    second = stage_spec(prepared_corpus, tmp_path / "again", max_steps=2)
    second["model"] = {"init": "pretrained", "path": str(tmp_path / "first" / "model"),
                       "trainable": {"backbone": False, "head": True}}
    second["evaluation"] = {"method": method, "batch_size": 8}
    assert train(second, tmp_path) == 0
    assert saved_head(tmp_path / "again" / "model") == head
    changed = changed_groups(second, prepared_corpus)
    assert changed["head"] and not changed["backbone"]
