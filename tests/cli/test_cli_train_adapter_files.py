"""A stage loads adapter files (``model.load_adapters``), trains language heads (``model.trainable.heads``) and
checks that the head it trains has the prepared vocabulary's size; a prepared folder without prepare's completion
marker is refused."""

from __future__ import annotations

import shutil
from pathlib import Path

import torch
from helpers.cli import run_main, stage_spec, write_yaml

from adaptspeech import AdaptSpeechForCTC
from adaptspeech.data.prepared_data import load_prepared
from adaptspeech.training.model_setup import build_model


def base_model(tmp_path: Path, prepared: Path) -> Path:
    """A saved model of the stage's tiny shape and vocabulary, and an adapter file for `ro` beside it."""
    _, processor = load_prepared(prepared)
    spec = stage_spec(prepared, tmp_path / "unused")["model"]
    torch.manual_seed(0)
    model = build_model({**spec, "config": {**spec["config"], "adapter_languages": ["ro"],
                                           "adapter_defaults": {"bottleneck": 8}}}, processor)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if ".adapters.ro." in name:
                param.add_(0.05)
    model.save_adapter("ro", tmp_path / "adapters", include_head=True)
    model.remove_language_adapter("ro")
    model.save_pretrained(tmp_path / "base")
    return tmp_path


def train(tmp_path: Path, spec: dict, capsys) -> tuple[int, str]:
    """``adaptspeech train`` on ``spec`` -> (exit code, stderr), with what the setup printed cleared first."""
    capsys.readouterr()
    code, _, err = run_main(["train", "--config", str(write_yaml(tmp_path / "s.yaml", spec)), "--no-progress"],
                            capsys)
    return code, err


def test_a_stage_loads_adapter_files_and_trains_them(prepared_corpus, tmp_path, capsys):
    base_model(tmp_path, prepared_corpus)
    spec = stage_spec(prepared_corpus, tmp_path / "run", max_steps=2)
    spec["data"]["train_languages"] = ["ro"]
    spec["model"] = {"init": "pretrained", "path": str(tmp_path / "base"),
                     "load_adapters": {"ro": {"path": str(tmp_path / "adapters"), "load_head": False}},
                     "trainable": {"adapters": ["ro"]}}
    code, err = train(tmp_path, spec, capsys)
    assert code == 0, err
    trained = AdaptSpeechForCTC.from_pretrained(tmp_path / "run" / "model")
    source = AdaptSpeechForCTC.from_pretrained(tmp_path / "base")
    source.load_adapter("ro", tmp_path / "adapters", load_head=False)
    changed = [n for n, p in trained.named_parameters() if not torch.equal(p, source.state_dict()[n])]
    assert changed and all(".adapters.ro." in n for n in changed)  # the loaded adapter trained, nothing else


def test_a_bad_adapter_file_in_a_stage_is_one_line(prepared_corpus, tmp_path, capsys):
    base_model(tmp_path, prepared_corpus)
    spec = stage_spec(prepared_corpus, tmp_path / "run", max_steps=2)
    spec["model"] = {"init": "pretrained", "path": str(tmp_path / "base"),
                     "load_adapters": {"cs": str(tmp_path / "adapters")}, "trainable": {"adapters": ["cs"]}}
    code, err = train(tmp_path, spec, capsys)
    assert code == 1 and len(err.strip().splitlines()) == 1
    assert "model.load_adapters.cs:" in err and "adapter.cs" in err


def test_mms_language_needs_init_backbone(prepared_corpus, tmp_path, capsys):
    spec = stage_spec(prepared_corpus, tmp_path / "run", max_steps=2)
    spec["model"]["mms_language"] = "eng"
    code, err = train(tmp_path, spec, capsys)
    assert code == 1 and "model.mms_language" in err and "model.init: backbone" in err


def test_a_head_of_another_vocabulary_size_is_refused_before_training(prepared_corpus, tmp_path, capsys):
    base_model(tmp_path, prepared_corpus)
    model = AdaptSpeechForCTC.from_pretrained(tmp_path / "base")
    model.add_language_adapter("cs", bottleneck=8)
    model.add_language_head("cs", vocab_size=model.config.vocab_size + 5)
    model.save_pretrained(tmp_path / "heads")
    spec = stage_spec(prepared_corpus, tmp_path / "run", max_steps=2)
    spec["data"]["train_languages"] = ["cs"]
    spec["model"] = {"init": "pretrained", "path": str(tmp_path / "heads"),
                     "trainable": {"adapters": ["cs"], "heads": ["cs"]}}
    code, err = train(tmp_path, spec, capsys)
    assert code == 1
    assert f"cs's CTC head ({model.config.vocab_size + 5} tokens) does not match the prepared vocabulary" in err
    spec["model"]["trainable"]["heads"] = ["pl"]
    code, err = train(tmp_path, spec, capsys)
    assert code == 1 and "model.trainable.heads: no language head for ['pl']" in err


def test_a_prepared_folder_without_the_completion_marker_is_refused(prepared_corpus, tmp_path, capsys):
    partial = tmp_path / "prepared"
    shutil.copytree(prepared_corpus, partial)
    (partial / "prepare_config.json").unlink()
    spec = stage_spec(partial, tmp_path / "run", max_steps=2)
    code, err = train(tmp_path, spec, capsys)
    assert code == 1 and "has no prepare_config.json" in err and "did not finish" in err

