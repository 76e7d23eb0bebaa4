"""The attention study (recipes/attention_study/study.py, a task of its own) end to end at toy scale through the CLI:
three kinds on a tiny synthetic corpus, a first run with --only, then the rest (the finished kind is skipped, not
retrained), the table, the figures, the settings check on a finished kind."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from helpers.recipes import STUDY, TINY
from PIL import Image

from adaptspeech.cli import main
from adaptspeech.data import build_synthetic_corpus
from adaptspeech.data.prepared_corpus import prepare_corpus
from adaptspeech.recipes import load_recipe, recipe_module

study_module = recipe_module(STUDY, "study.py")
StudyError = study_module.StudyError

KINDS = {
    "mhsa": {"label": "Baseline (QK)", "attention": {"kind": "mhsa"}},
    "lsh_xbox": {"label": "XBOX", "attention": {"kind": "lsh_xbox", "lsh_num_keys": 4}},
    "ldsa_hybrid": {"label": "LDSA + MHSA", "attention": {"kind": "ldsa", "context_width": 3, "hybrid": True}},
}


@pytest.fixture(scope="module")
def prepared(tmp_path_factory):
    root = tmp_path_factory.mktemp("study_data")
    build_synthetic_corpus(root / "corpus", ["cs", "pl"], 12, seed=0, num_workers=1, progress=False)
    prepare_corpus(root / "corpus", ["cs", "pl"], root / "prepared", feature_type="fbank", max_seconds=12)
    return root / "prepared"


def _overrides(out, prepared) -> list[str]:
    return [
        f"output_dir={out}",
        f"prepared_from={prepared}",
        "sources=[cs, pl]",
        f"kinds={json.dumps(KINDS)}",
        f"stage.model.config={json.dumps(TINY)}",
        "stage.training.max_steps=3",
        "stage.training.save_steps=3",
        "stage.training.warmup_steps=1",
        "stage.training.per_device_train_batch_size=4",
        "stage.training.logging_steps=1",
        "stage.data.max_eval_rows=4",
        "attention_maps.seconds=2.0",
    ]


@pytest.fixture(scope="module")
def study(prepared, tmp_path_factory):
    out = tmp_path_factory.mktemp("study")
    overrides = _overrides(out, prepared)
    assert main(["recipe", "recipes/attention_study", "--no-progress", "--only", "mhsa", *overrides]) == 0
    first = json.loads((out / "results.json").read_text())
    mhsa_result = (out / "kinds" / "mhsa" / "kind_result.json").read_text()
    assert main(["recipe", "recipes/attention_study", "--no-progress", *overrides]) == 0
    return out, first, mhsa_result


def _png_size(path) -> tuple[int, int]:
    with Image.open(path) as image:
        image.verify()
    with Image.open(path) as image:
        return image.size


def test_only_runs_the_named_kinds_and_lists_the_others(study):
    _, first, _ = study
    assert [row["kind"] for row in first["rows"]] == ["mhsa"]
    assert first["missing"] == ["lsh_xbox", "ldsa_hybrid"]


def test_table_has_a_row_per_kind_with_finite_numbers(study):
    out, _, _ = study
    saved = json.loads((out / "results.json").read_text())
    assert [row["kind"] for row in saved["rows"]] == list(KINDS)
    assert saved["missing"] == []
    md = (out / "results.md").read_text()
    for name, entry in KINDS.items():
        assert f"| {name} | {entry['label']} |" in md
    assert "| cs CER % | pl CER % |" in md
    for row in saved["rows"]:
        assert set(row["cer_per_language"]) == {"cs", "pl"}
        assert all(math.isfinite(v) and v >= 0 for v in row["cer_per_language"].values())
        assert row["cer_average"] == pytest.approx(np.mean(list(row["cer_per_language"].values())))
        assert row["steps"] == 3
        assert row["train_seconds"] > 0 and row["train_cpu_seconds"] > 0
        assert row["test_seconds"] > 0 and row["test_utterances"] > 0
        assert 0 < row["attention_parameters"] < row["parameters"]
    by_kind = {row["kind"]: row for row in saved["rows"]}
    # the hybrid holds an LDSA and an MHSA per layer: more attention parameters than MHSA alone
    assert by_kind["ldsa_hybrid"]["attention_parameters"] > by_kind["mhsa"]["attention_parameters"]
    assert by_kind["lsh_xbox"]["spec"]["model"]["config"]["attention"] == KINDS["lsh_xbox"]["attention"]


def test_attention_maps_are_exact_and_plotted(study):
    out, _, _ = study
    saved = {row["kind"]: row for row in json.loads((out / "results.json").read_text())["rows"]}
    labels = {kind: [m["label"] for m in row["attention_maps"]["modules"]] for kind, row in saved.items()}
    assert labels == {"mhsa": ["L0", "L1"], "lsh_xbox": ["L0", "L1"], "ldsa_hybrid": ["L0", "L0 mhsa", "L1", "L1 mhsa"]}
    for kind, row in saved.items():
        assert all(m["reconstruction_error"] < 1e-4 for m in row["attention_maps"]["modules"])
        frames = row["attention_maps"]["utterance"]["frames"]
        with np.load(out / "kinds" / kind / "attention_maps.npz") as maps:
            for label in labels[kind]:
                weights = maps[label].astype(np.float32)
                assert weights.shape == (2, frames, frames)
                assert np.allclose(weights.sum(-1), 1.0, atol=2e-3)  # stored in float16
        png = out / "attention_maps" / f"{kind}.png"
        width, height = _png_size(png)
        assert width > 100 and height > 100
        assert png.stat().st_size < 300_000
    with np.load(out / "kinds" / "lsh_xbox" / "attention_maps.npz") as maps:
        assert ((maps["L0"] > 0).sum(-1) <= 4).all()  # at most C = 4 keys per query
    for name in ("summary.png", "training_curves.png", "attention_maps/overview.png"):
        _png_size(out / name)


def test_rerun_skips_finished_kinds(study, prepared, capsys):
    out, _, mhsa_result = study
    # the second run of the fixture did not retrain mhsa
    assert (out / "kinds" / "mhsa" / "kind_result.json").read_text() == mhsa_result
    results = {k: (out / "kinds" / k / "kind_result.json").read_text() for k in KINDS}
    weights = {k: (out / "kinds" / k / "model" / "model.safetensors").stat().st_mtime_ns for k in KINDS}
    assert main(["recipe", "recipes/attention_study", "--no-progress", *_overrides(out, prepared)]) == 0
    printed = capsys.readouterr().out
    assert all(f"{k}: finished before, skipped" in printed for k in KINDS)
    assert {k: (out / "kinds" / k / "kind_result.json").read_text() for k in KINDS} == results
    assert {k: (out / "kinds" / k / "model" / "model.safetensors").stat().st_mtime_ns for k in KINDS} == weights
    assert not (out / "kinds" / "mhsa" / "checkpoints").exists()  # removed once the kind finished


def test_finished_kind_with_changed_settings_is_refused(study, prepared, capsys):
    out, _, _ = study
    overrides = [*_overrides(out, prepared), "stage.training.max_steps=4"]
    assert main(["recipe", "recipes/attention_study", "--no-progress", "--only", "mhsa", *overrides]) == 1
    error = capsys.readouterr().err
    assert "kinds.mhsa: finished with other settings (training.max_steps: 3 -> 4)" in error


def test_bad_settings_are_one_line_errors(prepared, tmp_path, capsys):
    overrides = _overrides(tmp_path, prepared)
    assert main(["recipe", "recipes/attention_study", "--only", "nope", *overrides]) == 1
    assert "--only: unknown kind(s) nope; allowed values: mhsa, lsh_xbox, ldsa_hybrid" in capsys.readouterr().err
    with pytest.raises(StudyError, match=r"kinds.bad: unknown setting\(s\) size"):
        load_recipe("recipes/attention_study", [*overrides, "kinds.bad={attention: {kind: mhsa}, size: 2}"])
    with pytest.raises(StudyError, match=r"kinds.bad: attention.kind: unknown attention 'nope'"):
        load_recipe("recipes/attention_study", [*overrides, "kinds.bad={attention: {kind: nope}}"])
    with pytest.raises(StudyError, match=r"kinds.mhsa: .*learning_rate"):
        load_study_and_specs([*overrides, "stage.training.learning_rate=fast"], prepared)
    with pytest.raises(StudyError, match=r"stage.model.config.attention: set by each entry of kinds"):
        load_recipe("recipes/attention_study", [*overrides, "stage.model.config.attention={kind: mhsa}"])


def load_study_and_specs(overrides: list[str], prepared) -> None:
    study = load_recipe("recipes/attention_study", overrides)
    for kind in study.kinds:
        study_module.kind_spec(study, kind, prepared)


def test_the_committed_study_covers_every_kind():
    """The real recipe lists every registered attention kind (and the fixed-pattern and hybrid variants)."""
    from adaptspeech.attention import ATTENTION

    plan = load_recipe("recipes/attention_study").kinds
    kinds = {k.attention["kind"] for k in plan}
    assert kinds == set(ATTENTION.names())
    assert any(k.attention.get("synthesizer_init") == "fixed_patterns" for k in plan)
    assert any(k.attention.get("hybrid") for k in plan)
    assert len(plan) == 16
