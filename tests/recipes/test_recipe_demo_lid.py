"""The synthetic demo's language-ID report (recipes/synthetic_demo/lid_report.py) at toy size: a trained head on a
model with a fusion, the per-language table (accuracy on whole utterances and prefixes, CER known vs routed), the
JSON and the confusion PNG; the LID stage built from stage_lid.yaml over a demo run; ``--lid`` refuses what it does
not combine with."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from helpers.cli import one_error_line, run_main
from helpers.lid import lid_stage, two_language_corpus
from helpers.recipes import DEMO

from adaptspeech import AdaptSpeechForCTC
from adaptspeech.recipes import load_recipe, recipe_module
from adaptspeech.training.stage import StageSpec, run_stage

lid_report = recipe_module(DEMO, "lid_report.py")


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory):
    root = tmp_path_factory.mktemp("demo_lid")
    prepared = two_language_corpus(root / "prepared")
    torch.set_num_threads(1)
    result = run_stage(lid_stage(prepared, root / "run"), progress=False)
    model = AdaptSpeechForCTC.from_pretrained(result.model_dir)
    model.add_fusion(["ro", "cs"], target_language="cs", activate=False)
    model.save_pretrained(result.model_dir)
    out = root / "report"
    return out, lid_report.lid_report(result.model_dir, prepared, "test", out, batch_size=4)


def test_the_report_has_every_language_and_routing_costs_nothing_when_the_language_is_told(report) -> None:
    out, result = report
    assert set(result["accuracy"]) == {"whole", "1s", "3s"}
    rows = result["per_language"]
    assert {lang: row["system"] for lang, row in rows.items()} == {"ro": "adapter", "cs": "fusion"}
    for row in rows.values():
        assert row["utterances"] == 4 and row["lid_accuracy_whole"] == 1.0
        assert row["cer_routed"] == row["cer_known"] and row["cer_difference"] == 0.0  # the same decoding
    assert json.loads((out / "lid_report.json").read_text())["per_language"] == rows
    table = (out / "lid_report.md").read_text()
    assert "| ro | adapter | 4 | 100.00 | 100.00 | 100.00 |" in table
    assert "Confusions (whole utterances, acoustic): none." in table
    assert (out / "lid_confusion.png").stat().st_size > 1000
    # every clip is 0.3 s long: all in the first duration bucket
    assert result["by_duration"]["whole"] == {"0-3 s": {"accuracy": 1.0, "utterances": 8},
                                              "3-5 s": {"accuracy": None, "utterances": 0},
                                              "> 5 s": {"accuracy": None, "utterances": 0}}
    assert "| acoustic | whole | 100.00 (8) | - | - |" in table
    assert "hybrid" not in result and not (out / "lid_confusion_hybrid.png").exists()


def test_with_a_calibration_the_report_adds_the_hybrid_beside_the_acoustic_head(report, tmp_path) -> None:
    import shutil

    from transformers import AutoProcessor

    from adaptspeech.data.prepared_data import load_prepared
    from adaptspeech.inference.language_id.identifiers import HeadIdentifier
    from adaptspeech.lid_evaluation import fit_lid_calibration

    out, acoustic = report
    model_dir, prepared = out.parent / "run" / "model", out.parent / "prepared"
    folder = tmp_path / "model"
    shutil.copytree(model_dir, folder)
    model, processor = AdaptSpeechForCTC.from_pretrained(folder).eval(), AutoProcessor.from_pretrained(folder)
    dev = load_prepared(prepared)[0]["dev"]
    fit_lid_calibration(model, dev, processor, HeadIdentifier(model, processor), top_k=2).save(folder)
    result = lid_report.lid_report(folder, prepared, "test", tmp_path / "report", batch_size=4)
    hybrid = result["hybrid"]
    assert set(hybrid["accuracy"]) == {"whole", "1s", "3s"} and hybrid["routed"]["routing"]["scoring"] == "hybrid"
    assert hybrid["calibration"]["top_k"] == 2
    for language, row in result["per_language"].items():
        assert row["cer_routed_hybrid"] == hybrid["routed_cer"][language]
        assert row["cer_difference_hybrid"] == row["cer_routed_hybrid"] - row["cer_known"]
        assert row["lid_accuracy_whole_hybrid"] == hybrid["accuracy"]["whole"]["per_language"][language]["accuracy"]
        assert row["cer_known"] == acoustic["per_language"][language]["cer_known"]
    table = (tmp_path / "report" / "lid_report.md").read_text()
    assert "**hybrid** (k = 2):" in table and "| hybrid | whole |" in table
    assert (tmp_path / "report" / "lid_confusion_hybrid.png").stat().st_size > 1000


def test_the_lid_stage_of_a_demo_run_trains_the_head_on_the_fusion_model(tmp_path) -> None:
    spec = load_recipe(DEMO, [f"output_dir={tmp_path}"])
    stage = lid_report.lid_stage_spec(DEMO, spec, tmp_path / "prepared", ["training.max_steps=5"])
    assert stage["model"]["path"] == str(tmp_path / "fusion" / "model") and stage["model"]["trainable"] == {"lid": True}
    assert stage["data"]["train_languages"] == ["cs", "pl", "sl", "it", "es", "sk"]
    assert stage["data"]["train_subset"] is None and stage["training"]["max_steps"] == 5  # every labelled clip
    assert StageSpec.from_dict(stage).model["lid"] == {"pooling": "attentive_stats", "layer": 3, "layer_mix": True,
                                                       "attention_dim": 64}
    assert lid_report.split_lid_overrides(["lid.training.max_steps=5", "target=pl"]) == (["target=pl"],
                                                                                        ["training.max_steps=5"])


def test_lid_does_not_combine_with_only(capsys) -> None:
    code, _, err = run_main(["demo", "--lid", "--only", "base"], capsys)
    assert code == 1
    assert one_error_line(err).endswith("--lid reuses a finished run: it does not combine with --dry-run, --only or "
                                        "--curve")


def test_the_settings_study_changes_only_the_pooled_layer_and_the_training_audio(tmp_path) -> None:
    study = recipe_module(DEMO, "lid_settings_study.py")
    base = study.stage_for("runs/demo/base/model", "runs/prepared", tmp_path / "a", 1, "10min", 400)
    deeper = study.stage_for("runs/demo/base/model", "runs/prepared", tmp_path / "b", 3, None, 400)
    for stage in (base, deeper):
        StageSpec.from_dict(stage)  # a valid stage
    assert (base["model"]["lid"]["layer"], deeper["model"]["lid"]["layer"]) == (1, 3)
    assert "layer_mix" not in base["model"]["lid"]  # a single layer, whatever stage_lid.yaml pools
    assert (base["data"]["train_subset"], deeper["data"]["train_subset"]) == ("10min", None)
    assert base["training"] == deeper["training"]
    assert base["model"]["path"] == "runs/demo/base/model" and base["model"]["trainable"] == {"lid": True}


def test_the_hybrid_study_s_heads_are_valid_stages_that_differ_only_in_their_setting(tmp_path) -> None:
    study = recipe_module(DEMO, "lid_hybrid_study.py")
    stages = {name: study.stage_for("runs/demo/fusion/model", "runs/prepared", tmp_path / "x", lid, subset, 400)
              for name, (lid, subset) in study.SETTINGS.items()}
    for stage in stages.values():
        StageSpec.from_dict(stage)  # every setting is a valid stage
        assert stage["training"] == stages["layer 1"]["training"] and stage["seed"] == 0
    assert stages["layer 1"]["model"]["lid"] == {"pooling": "attentive_stats", "layer": 1, "attention_dim": 64}
    last = stages["mix 0..3 + AAM + crops, all audio"]
    assert last["model"]["lid"] == {"pooling": "attentive_stats", "layer": 3, "attention_dim": 64, "layer_mix": True,
                                    "loss": "aam_softmax", "margin": 0.2, "scale": 30.0, "crop_seconds": [1.0, 4.0]}
    assert last["data"]["train_subset"] is None and stages["layer 1"]["data"]["train_subset"] == "10min"
    assert study.stage_for("m", "p", tmp_path, {}, None, 5, use_gpu=True)["training"]["use_cpu"] is False
    pooled = study.stage_for("m", "p", tmp_path, study.MIX, None, 400, extra_audio={"sk": "pools/sk"})
    assert pooled["data"]["lid_extra_audio"] == {"sk": "pools/sk"} and set(study.SETTINGS) >= study.WITH_POOL
    assert StageSpec.from_dict(pooled).data.lid_extra_audio == {"sk": "pools/sk"}
    for name, data in study.DATA_SETTINGS.items():
        assert StageSpec.from_dict(study.stage_for("m", "p", tmp_path, study.MIX, None, 400, data=data)).data.to_dict(
        ).items() >= data.items() and name in study.SETTINGS


def test_the_demo_s_language_lms_are_one_per_language_of_its_transcripts(tmp_path) -> None:
    prepared = two_language_corpus(tmp_path / "prepared", clips=8)
    folders = lid_report.language_lms(prepared, tmp_path / "words", ["ro", "cs"], order=2, unit="word")
    assert set(folders) == {"ro", "cs"}
    for folder in folders.values():
        assert (folder / "lm.arpa").read_text().startswith("\\data\\")
        assert set((folder / "unigrams.txt").read_text().split()) == {"ab", "ba", "abc", "cab"}
        assert not (folder / "unit.txt").exists()
    chars = lid_report.language_lms(prepared, tmp_path / "chars", ["ro", "cs"], order=3)
    for folder in chars.values():
        assert (folder / "unit.txt").read_text() == "char\n"
        assert set((folder / "unigrams.txt").read_text().split()) == {"a", "b", "c"}  # one word a text: no "|"


def test_the_demo_s_hybrid_scoring_is_fitted_on_dev_with_character_lms(report, tmp_path) -> None:
    import shutil

    from adaptspeech.inference.language_id.hybrid import LanguageLMs, LIDCalibration

    out, _ = report
    folder = tmp_path / "lid" / "model"
    shutil.copytree(out.parent / "run" / "model", folder)
    calibration = lid_report.fit_hybrid_scoring(folder, out.parent / "prepared", top_k=2, batch_size=4)
    assert LIDCalibration.load(folder).to_dict() == calibration.to_dict()
    assert calibration.top_k == 2 and set(calibration.weights) == {"lid_log_prob", "ctc_per_frame", "lm_per_char"}
    assert calibration.fitted_on["rows"] == 8  # the dev split
    assert LanguageLMs.from_folder(folder, ["ro", "cs"]).units == {"ro": "char", "cs": "char"}
    assert (tmp_path / "lid" / "lms" / "cs" / "lm.arpa").is_file()


def test_the_demo_s_hybrid_needs_two_candidates(capsys) -> None:
    code, _, err = run_main(["demo", "--lid", "--lid-scoring", "hybrid", "--lid-top-k", "1"], capsys)
    assert code == 1
    assert one_error_line(err).endswith("--lid-top-k 1: the hybrid score needs at least 2 candidates")


def test_the_hybrid_study_runs_end_to_end_and_writes_its_tables(report, tmp_path, monkeypatch, capsys) -> None:
    import shutil

    study = recipe_module(DEMO, "lid_hybrid_study.py")
    out, _ = report
    run = tmp_path / "run"
    shutil.copytree(out.parent / "run" / "model", run / "fusion" / "model")
    shutil.copytree(out.parent / "prepared", run / "prepared")
    fusion = AdaptSpeechForCTC.from_pretrained(run / "fusion" / "model")
    fusion.remove_lid_head()  # a demo's fusion model has none
    fusion.save_pretrained(run / "fusion" / "model")
    monkeypatch.setattr(study, "LANGUAGES", ["ro", "cs"])
    monkeypatch.setattr(study, "SETTINGS", {"layer 0": ({"layer": 0}, None),
                                            "mix 0..1 + AAM": ({"layer": 1, "layer_mix": True, "loss": "aam_softmax"},
                                                               None)})
    with pytest.raises(SystemExit):
        study.main(["--run", str(run), "--output", str(run / "study")])
    assert "inside --run" in capsys.readouterr().err
    assert study.main(["--run", str(run), "--output", str(tmp_path / "study"), "--steps", "5", "--top-k", "2",
                       "--lm-order", "2"]) == 0
    result = json.loads((tmp_path / "study" / "lid_hybrid_study.json").read_text())
    assert [r["setting"] for r in result["heads"]] == ["layer 0", "mix 0..1 + AAM"]
    hybrid = result["hybrid"]
    assert [(f["k"], f["features"]) for f in hybrid["fits"]] == [(2, name) for name in study.FEATURE_SETS]
    assert set(hybrid["reference"]) == {"dev", "test whole", "test 1s", "test 3s"}
    assert hybrid["reference"]["test whole"]["oracle k=2"] == 1.0  # two languages: the truth is always a candidate
    model = tmp_path / "study" / "best_model"
    assert json.loads((model / "lid_calibration.json").read_text())["weights"] == hybrid["chosen"]["weights"]
    assert (model / "language_models" / "cs" / "unit.txt").read_text() == "char\n"
    table = (tmp_path / "study" / "lid_hybrid_study.md").read_text()
    assert "| oracle (truth among the top 2) | 2 |" in table and "| hybrid: head + CTC + LM | 2 |" in table
    reported = json.loads((tmp_path / "study" / "report" / "lid_report.json").read_text())
    assert set(reported["cpu_seconds"]) == {"known", "routed_acoustic", "routed_hybrid"}
    assert all(v > 0 for v in reported["cpu_seconds"].values())
    assert "CPU time over the split" in (tmp_path / "study" / "report" / "lid_report.md").read_text()


def test_the_text_study_s_cached_fit_is_the_library_s_fit(report, tmp_path, monkeypatch) -> None:
    from transformers import AutoProcessor

    from adaptspeech.data.prepared_data import load_prepared
    from adaptspeech.inference.language_id.hybrid import LanguageLMs
    from adaptspeech.inference.language_id.identifiers import HeadIdentifier
    from adaptspeech.lid_evaluation import fit_lid_calibration

    study = recipe_module(DEMO, "lid_text_study.py")
    monkeypatch.setattr(study, "LANGUAGES", ["ro", "cs"])
    out, _ = report
    model_dir, prepared = out.parent / "run" / "model", out.parent / "prepared"
    passes = study.compute_passes(model_dir, str(prepared), batch_size=4)
    assert set(passes["test whole"]["texts"]) == {"ro", "cs", study.BASE_KEY}
    other = AdaptSpeechForCTC.from_pretrained(model_dir)  # another head on the same systems
    with torch.no_grad():
        other.lid_head.classifier.bias.add_(torch.tensor([2.0, -2.0]))
    other.save_pretrained(tmp_path / "other_head")
    AutoProcessor.from_pretrained(model_dir).save_pretrained(tmp_path / "other_head")
    for head, same in ((model_dir, True), (tmp_path / "other_head", False)):
        swapped = study.swap_head(passes, head, str(prepared))
        for name in study.SETS:
            assert swapped[name]["texts"] == passes[name]["texts"] and swapped[name]["truth"] == passes[name]["truth"]
            assert (np.asarray(swapped[name]["log_probs"]) == pytest.approx(np.asarray(passes[name]["log_probs"]),
                                                                            abs=1e-4)) is same, (head, name)
    with pytest.raises(ValueError, match="its head's languages"):
        study.swap_head({**passes, "languages": ["cs", "ro"]}, model_dir, str(prepared))
    result = study.fit_all(passes, str(prepared), tmp_path, [2], [2], lm_fits=("train",))
    assert [(f["variant"], f["features"]) for f in result["fits"]] == [
        (v, f) for v in study.VARIANTS for f in study.FEATURE_SETS]
    assert result["reference"]["test whole"]["oracle k=2"] == 1.0  # two languages: the truth is always a candidate
    model = AdaptSpeechForCTC.from_pretrained(model_dir).eval()
    processor = AutoProcessor.from_pretrained(model_dir)
    lms = LanguageLMs.from_folder(tmp_path / "lms" / "char2" / "model", ["ro", "cs"])
    dev = load_prepared(str(prepared))[0]["dev"]
    for variant in ("own", "shared", "base"):  # the cache and the fit give the weights the library's fit gives
        fitted = fit_lid_calibration(model, dev, processor, HeadIdentifier(model, processor), 2, lms, batch_size=4,
                                     text_score=variant)
        cached = next(f for f in result["fits"] if f["variant"] == variant and f["features"] == "head + CTC + LM")
        assert cached["weights"] == pytest.approx(dict(fitted.weights), rel=1e-4, abs=1e-6)
        assert cached["dev"]["accuracy"] == pytest.approx(fitted.fitted_on["accuracy_hybrid"])
    assert "| acoustic head | | | 1 |" in study.markdown(result)
    only = study.text_only(passes, str(prepared), tmp_path, [2])["char 2-gram"]
    # both toy languages say the same words: their LMs score a text alike, the first language (ro) wins each row
    assert only["test whole"]["reference"] == 0.5 and only["dev"]["reference"] == 0.5
    assert set(only["dev"]) == set(study.TEXT_ONLY) and {"dev", "test whole"} <= set(only)
    for name, asked in only.items():
        assert all(0.0 <= value <= 1.0 for value in asked.values()), name  # no nan: no head errors, no row


def test_the_text_study_s_word_list_text_is_the_lm_rows_text(tmp_path, monkeypatch) -> None:
    import dataclasses

    from adaptspeech.data.synthetic import CONFIG_FILE, SyntheticConfig
    from adaptspeech.recipes.simadapter.spec import CorpusSettings

    study = recipe_module(DEMO, "lid_text_study.py")
    lm_rows = recipe_module(DEMO, "lm_rows.py")
    monkeypatch.setattr(study, "LANGUAGES", ["sk"])
    (tmp_path / CONFIG_FILE).write_text(json.dumps({"config": dataclasses.asdict(SyntheticConfig())}))
    drawn = study.word_list_texts(tmp_path, 300, exclude=set())
    expected, _ = lm_rows.lm_text("sk", CorpusSettings(type="synthetic", clips_per_language=1000, seed=0),
                                  lm_rows.LMSettings(enabled=True, sentences=300, seed=1), set())
    assert drawn == {"sk": expected} and len(expected) == 300
    assert study.word_list_texts(tmp_path, 300, exclude={expected[3]})["sk"] == expected[:3] + expected[4:]


def test_the_text_check_tells_each_reference_transcript_s_language(tmp_path) -> None:
    study = recipe_module(DEMO, "lid_hybrid_study.py")
    prepared = two_language_corpus(tmp_path / "prepared", clips=8)
    study_languages, study.LANGUAGES = study.LANGUAGES, ["ro", "cs"]
    try:
        result = study.text_check(str(prepared), tmp_path / "out", (("word", 2), ("char", 2)))
    finally:
        study.LANGUAGES = study_languages
    # both toy languages say the same four words: no LM can tell them apart, each row goes to the first language
    for name in ("word 2-gram", "char 2-gram"):
        for split in ("dev", "test"):
            assert result[name][split]["rows"] == 8
            assert result[name][split]["accuracy"] == 0.5 and result[name][split]["confusions"] == {"cs -> ro": 4}
    assert "| char 2-gram | 50.00 | 50.00 | cs -> ro 4 |" in study.text_check_markdown(result)


def test_a_head_trained_on_the_base_is_grafted_onto_the_model_on_the_same_encoder_only(report, tmp_path) -> None:
    study = recipe_module(DEMO, "lid_hybrid_study.py")
    out, _ = report
    head_model = out.parent / "run" / "model"
    base = AdaptSpeechForCTC.from_pretrained(head_model)
    base.remove_lid_head()
    base.remove_fusion()
    base.save_pretrained(tmp_path / "base")
    grafted = AdaptSpeechForCTC.from_pretrained(study.graft_head(head_model, tmp_path / "base", tmp_path / "g")).eval()
    trained = AdaptSpeechForCTC.from_pretrained(head_model).eval()
    assert grafted.config.lid.to_dict() == trained.config.lid.to_dict()
    clip = torch.randn(1, 8000)
    with torch.no_grad():
        assert torch.allclose(grafted.lid_logits(clip), trained.lid_logits(clip), atol=1e-6)
    with torch.no_grad():  # another encoder: refused, nothing written
        next(p for n, p in base.named_parameters() if "layers.0." in n and "adapter" not in n).add_(0.5)
    base.save_pretrained(tmp_path / "other")
    with pytest.raises(ValueError, match=r"encoder \(without adapters\) is not the one of .*other; train the heads"):
        study.graft_head(head_model, tmp_path / "other", tmp_path / "g2")
    assert not (tmp_path / "g2").exists()
