"""``adaptspeech evaluate / transcribe / push / recipe / demo`` on a tiny trained model, and the one-line errors of
every subcommand."""

from __future__ import annotations

import json
import os
import subprocess
import unicodedata
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
import soxr
import torch
from helpers.cli import LANGUAGES, cli, load_prepared_split, run_main, stage_spec, subprocess_env, write_yaml
from transformers import Wav2Vec2Processor

from adaptspeech import AdaptSpeechForCTC
from adaptspeech.cli import DECODING_CHOICES, build_parser, demo_recipe_dir
from adaptspeech.data import DataCollatorCTCWithPadding, load_audio
from adaptspeech.evaluation import transcribe_dataset


def naive_edits(reference: list[str], hypothesis: list[str]) -> int:
    """Levenshtein distance with explicit loops (substitution, deletion, insertion all cost 1)."""
    previous = list(range(len(hypothesis) + 1))
    for i, ref in enumerate(reference, 1):
        current = [i]
        for j, hyp in enumerate(hypothesis, 1):
            current.append(min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + (ref != hyp)))
        previous = current
    return previous[-1]


def canonical(text: str) -> str:
    return " ".join(unicodedata.normalize("NFC", text).split())


def naive_rates(references: list[str], hypotheses: list[str]) -> tuple[float, float]:
    """Corpus-level (CER, WER): summed edits over summed reference lengths."""
    refs, hyps = [canonical(t) for t in references], [canonical(t) for t in hypotheses]
    chars = sum(naive_edits(list(r), list(h)) for r, h in zip(refs, hyps, strict=True)) / sum(len(r) for r in refs)
    words = sum(naive_edits(r.split(), h.split()) for r, h in zip(refs, hyps, strict=True))
    return chars, words / sum(len(r.split()) for r in refs)


def test_decoding_choices_are_the_registered_methods():
    from adaptspeech.decoding import DECODING_METHODS

    assert sorted(DECODING_CHOICES) == sorted(DECODING_METHODS.names())


def test_every_subcommand_is_registered():
    sub = next(a for a in build_parser()._actions if a.dest == "command")
    assert set(sub.choices) == {"prepare", "train", "evaluate", "transcribe", "push", "recipe", "demo", "lm",
                                 "pseudo-label", "export"}


# ---- evaluate ------------------------------------------------------------------------------------------------


def test_evaluate_writes_per_language_rates_that_match_a_naive_count(trained_stage, prepared_corpus, tmp_path, capsys):
    output = tmp_path / "results.json"
    argv = ["evaluate", "--model", trained_stage / "model", "--data", prepared_corpus, "--output", output,
            "--no-progress"]
    code, out, _ = run_main(argv, capsys)
    assert code == 0
    result = json.loads(output.read_text())
    rows, processor = load_prepared_split(prepared_corpus, "test")
    model = AdaptSpeechForCTC.from_pretrained(trained_stage / "model")
    hypotheses = transcribe_dataset(model, rows, processor, progress=False)
    references, languages = list(rows["text"]), list(rows["language"])
    assert result["split"] == "test" and result["method"] == "ctc_greedy"
    assert sorted(result["per_language"]) == sorted(LANGUAGES)
    for lang in LANGUAGES:
        picked = [i for i, code in enumerate(languages) if code == lang]
        cer, wer = naive_rates([references[i] for i in picked], [hypotheses[i] for i in picked])
        entry = result["per_language"][lang]
        assert entry["num_utterances"] == len(picked)
        assert entry["cer"] == pytest.approx(cer) and entry["wer"] == pytest.approx(wer)
        assert f"{lang}\tCER {100 * cer:.2f}%" in out
    cer, wer = naive_rates(references, hypotheses)
    assert result["overall"]["cer"] == pytest.approx(cer) and result["overall"]["wer"] == pytest.approx(wer)
    assert 0 < cer < 1  # the model emits characters: not the all-deletion 100%


def test_evaluate_one_language_with_beam_search(trained_stage, prepared_corpus, tmp_path, capsys):
    output = tmp_path / "ro.json"
    argv = ["evaluate", "--model", trained_stage / "model", "--data", prepared_corpus, "--languages", "ro",
            "--method", "ctc_beam", "--beam-size", "4", "--output", output, "--no-progress"]
    assert run_main(argv, capsys)[0] == 0
    result = json.loads(output.read_text())
    assert list(result["per_language"]) == ["ro"] and result["method"] == "ctc_beam"
    assert result["options"] == {"beam_size": 4}


# ---- transcribe ----------------------------------------------------------------------------------------------


def test_transcribe_reads_mp3_wav_and_flac_like_the_prepared_data(trained_stage, prepared_corpus, tmp_path, capsys):
    """The clip's mp3, a float wav of the same samples and a stereo copy must give exactly the text decoded from the
    prepared dataset; a 16-bit wav and a 16-bit flac of the same integer samples must agree with each other."""
    rows, processor = load_prepared_split(prepared_corpus, "test")
    model = AdaptSpeechForCTC.from_pretrained(trained_stage / "model")
    decoded = transcribe_dataset(model, rows, processor, progress=False)
    index = max(range(len(rows)), key=lambda i: len(decoded[i]))
    assert decoded[index], "the tiny model should emit characters"
    row = rows[index]
    mp3 = prepared_corpus.parent / "corpus" / row["language"] / "clips" / row["path"]
    wave = load_audio(mp3, 16000)
    files = {
        "mp3": mp3,
        "wav_float": tmp_path / "clip_float.wav",
        "stereo": tmp_path / "clip_stereo.wav",
        "wav16": tmp_path / "clip16.wav",
        "flac16": tmp_path / "clip16.flac",
        "wav22k": tmp_path / "clip22k.wav",
    }
    sf.write(files["wav_float"], wave, 16000, subtype="FLOAT")
    sf.write(files["stereo"], np.stack([wave, wave], axis=1), 16000, subtype="FLOAT")
    pcm = np.round(np.clip(wave, -1, 1) * 32767).astype(np.int16)
    sf.write(files["wav16"], pcm, 16000)
    sf.write(files["flac16"], pcm, 16000)
    sf.write(files["wav22k"], soxr.resample(wave, 16000, 22050), 22050, subtype="FLOAT")

    code, out, err = run_main(["transcribe", "--model", trained_stage / "model", *files.values(), "--no-progress"],
                              capsys)
    assert code == 0, err
    lines = out.splitlines()
    assert [line.split("\t")[0] for line in lines] == [str(p) for p in files.values()]
    text = {name: line.split("\t", 1)[1] for name, line in zip(files, lines, strict=True)}
    assert text["mp3"] == text["wav_float"] == text["stereo"] == decoded[index]
    assert text["wav16"] == text["flac16"]
    assert text["wav22k"]  # resampled back to 16 kHz by soxr: still speech to the model


def test_transcribe_routes_a_multilingual_adapter_model_by_language(trained_stage, tmp_path, capsys):
    model = AdaptSpeechForCTC.from_pretrained(trained_stage / "model")
    torch.manual_seed(0)
    for lang in ("ro", "cs"):
        model.add_language_adapter(lang, bottleneck=8)
    model.set_active_languages(["ro", "cs"])
    folder = tmp_path / "routed"
    model.save_pretrained(folder)
    Wav2Vec2Processor.from_pretrained(trained_stage / "model").save_pretrained(folder)
    clip = tmp_path / "clip.wav"
    sf.write(clip, 0.1 * np.sin(np.arange(16000) * 0.05).astype(np.float32), 16000, subtype="FLOAT")
    code, _, err = run_main(["transcribe", "--model", folder, clip, "--no-progress"], capsys)
    assert code == 1 and "pass --language" in err
    code, out, _ = run_main(["transcribe", "--model", folder, clip, "--language", "cs", "--no-progress"], capsys)
    assert code == 0 and out.startswith(f"{clip}\t")


# ---- push ----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("variable", "value", "message"),
    [("HF_HUB_OFFLINE", "1", "HF_HUB_OFFLINE is set"), ("HF_ENDPOINT", "http://127.0.0.1:9", "unreachable")],
)
def test_push_offline_is_one_line_and_the_folder_loads_back(
    variable, value, message, trained_stage, prepared_corpus, tmp_path, capsys, monkeypatch
):
    model = AdaptSpeechForCTC.from_pretrained(trained_stage / "model")
    torch.manual_seed(0)
    model.add_language_adapter("ro", bottleneck=8)
    with torch.no_grad():  # not the identity: the adapter must matter for the comparison below
        for param in model._named_groups()["adapter:ro"]:
            param[1].normal_(0, 0.2)
    model.set_active_languages(["ro"])
    model.save_pretrained(tmp_path / "with_ro")
    metrics = tmp_path / "results.json"
    metrics.write_text(json.dumps({"split": "test", "overall": {"cer": 0.5, "wer": 0.9, "num_utterances": 9},
                                   "per_language": {"ro": {"cer": 0.25, "wer": 0.75, "num_utterances": 3}}}))
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setenv(variable, value)
    folder = tmp_path / "upload"
    argv = ["push", "--model", tmp_path / "with_ro", "--language", "ro", "--repo-id", "me/adaptspeech-ro",
            "--folder", folder, "--metrics", metrics]
    code, out, err = run_main(argv, capsys)
    assert code == 1 and out == ""
    assert err.count("\n") == 1 and err.startswith("adaptspeech: error: cannot push to me/adaptspeech-ro")
    assert message in err and str(folder) in err

    assert {"adapter.ro.safetensors", "adapter.ro.json", "README.md"} <= set(os.listdir(folder))
    card = (folder / "README.md").read_text()
    assert "| test_cer | 0.25 |" in card and "| test_wer | 0.75 |" in card and "- ro" in card

    rows, processor = load_prepared_split(prepared_corpus, "test")
    batch = DataCollatorCTCWithPadding(processor, feature_type="fbank")([rows[i] for i in range(3)])
    batch.pop("labels")
    base = AdaptSpeechForCTC.from_pretrained(trained_stage / "model").eval()
    with torch.no_grad():
        without = base(**batch).logits
        base.load_adapter("ro", folder)
        loaded = base(**batch).logits
        expected = model.eval()(**batch).logits
    torch.testing.assert_close(loaded, expected, rtol=0, atol=0)  # the adapter through its files: the same model
    assert not torch.allclose(without, expected)


# ---- recipe / demo -------------------------------------------------------------------------------------------


@pytest.fixture
def fake_run_recipe(monkeypatch):
    """Replace the long run by one that records its arguments and writes a results table."""
    calls: dict = {}

    def run_recipe(recipe, only=None):
        calls.update(recipe=recipe, only=only)
        out = recipe.output_dir
        out.mkdir(parents=True, exist_ok=True)
        (out / "results.md").write_text("| system | CER % |\n| --- | --- |\n| SimAdapter | 12.34 |\n")
        (out / "fusion_heatmap.png").write_bytes(b"\x89PNG")
        return {"rows": []}

    monkeypatch.setattr("adaptspeech.recipes.engine.run_recipe", run_recipe)
    return calls


def test_demo_runs_the_synthetic_recipe_with_overrides(fake_run_recipe, tmp_path, capsys):
    argv = ["demo", f"output_dir={tmp_path / 'demo'}", "target_subset=5min", "base.training.max_steps=7",
            "--only", "base,fusion", "--no-progress"]
    code, out, err = run_main(argv, capsys)
    assert code == 0, err
    recipe = fake_run_recipe["recipe"]
    assert recipe.folder.resolve() == demo_recipe_dir().resolve()
    assert recipe.target_subset == "5min" and recipe.progress is False
    assert recipe.stages["base"]["training"]["max_steps"] == 7
    assert fake_run_recipe["only"] == ["base", "fusion"]
    assert "| SimAdapter | 12.34 |" in out and str(tmp_path / "demo" / "fusion_heatmap.png") in out


@pytest.mark.parametrize("flag", [["--no-progress"], ["progress=false"]])
def test_a_recipe_without_progress_hides_the_library_bars_and_restores_them(flag, monkeypatch, tmp_path, capsys):
    """``progress: false`` hid our bars only: datasets' map / filter bars still filled the demo's log."""
    import datasets
    from transformers.utils import logging as hf_logging

    seen: dict = {}

    def run_recipe(recipe, only=None):
        seen.update(datasets=datasets.is_progress_bar_enabled(), hf=hf_logging.is_progress_bar_enabled())
        out = recipe.output_dir
        out.mkdir(parents=True, exist_ok=True)
        (out / "results.md").write_text("| system | CER % |\n")

    monkeypatch.setattr("adaptspeech.recipes.engine.run_recipe", run_recipe)
    datasets.enable_progress_bars()
    hf_logging.enable_progress_bar()
    code, _, err = run_main(["demo", f"output_dir={tmp_path / 'demo'}", *flag], capsys)
    assert code == 0, err
    assert seen == {"datasets": False, "hf": False}
    assert datasets.is_progress_bar_enabled() and hf_logging.is_progress_bar_enabled()
    code, _, err = run_main(["demo", f"output_dir={tmp_path / 'demo'}"], capsys)
    assert code == 0, err
    assert seen == {"datasets": True, "hf": True}


def test_demo_only_lm_re_evaluates_with_the_lm(fake_run_recipe, tmp_path, capsys):
    code, _, err = run_main(["demo", f"output_dir={tmp_path / 'demo'}", "--only", "lm", "--no-progress"], capsys)
    assert code == 0, err
    assert fake_run_recipe["only"] == ["lm"]


def test_recipe_takes_a_folder(fake_run_recipe, tmp_path, capsys):
    folder = demo_recipe_dir()
    code, _, err = run_main(["recipe", folder, f"output_dir={tmp_path / 'r'}", "seed=3"], capsys)
    assert code == 0, err
    assert fake_run_recipe["recipe"].seed == 3 and fake_run_recipe["only"] is None


# ---- errors --------------------------------------------------------------------------------------------------

USAGE_ERRORS = [
    ["train", "--config", "{config}", "--bogus"],
    ["train", "--config", "{config}", "--threads", "0"],
    ["train"],
    ["evaluate", "--model", "{model}", "--data", "{prepared}", "--method", "viterbi"],
    ["transcribe", "--model", "{model}"],
    ["push", "--model", "{model}", "--language", "ro"],
]

EXPECTED_ERRORS = [
    (["train", "--config", "{tmp}/missing.yaml"], "missing.yaml not found"),
    (["train", "--config", "{config}", "model.init=foo"], "allowed values: config, pretrained, backbone"),
    (["train", "--config", "{config}", "training.max_stepz=3"],
     "error: {config}: training: unknown setting(s) max_stepz (did you mean max_steps?); allowed settings: the fields "
     "of transformers.TrainingArguments"),
    (["train", "--config", "{config}", "seed=1", "--threads", "1", "training.max_stepz=3"], "max_stepz"),
    (["train", "--config", "{config}", "--resume", "training.max_stepz=3"], "max_stepz"),
    (["train", "--config", "{config}", "training.learning_rate=fast"], "training.learning_rate: expected a number"),
    (["train", "--config", "{config}", "model.config.backbone_config.num_attention_heads=3"],
     "hidden_size 32 is not a multiple of num_attention_heads 3"),
    (["train", "--config", "{config}", "model.config.backbone_config.num_mel_bins=40"],
     "num_mel_bins is 40 but the prepared data have 80"),
    (["train", "--config", "{config}", "model.config.head=las", "evaluation.method=ctc_greedy"],
     "evaluation.method 'ctc_greedy' does not fit a model with head='las'; allowed values: attention_greedy"),
    (["train", "--config", "{config}", "data.train_languages=[de]"], "language(s) ['de'] are not in the train split"),
    (["train", "--config", "{config}", "training.activation_checkpointing=true",
      "training.activation_checkpointing_kwargs={use_reentrant: true}"], "use_reentrant=true is not supported"),
    (["train", "--config", "{config}", "--resume", "{tmp}"], "not a complete checkpoint: "),
    (["evaluate", "--model", "{tmp}", "--data", "{prepared}"], "no config.json there"),
    (["evaluate", "--model", "{model}", "--data", "{prepared}", "--split", "tset"],
     "prepared splits: dev, test, train"),
    (["evaluate", "--model", "{model}", "--data", "{tmp}"], "has no dataset/ folder"),
    (["evaluate", "--model", "{model}", "--data", "{prepared}", "--method", "attention_beam"],
     "needs an attention (LAS) head"),
    (["evaluate", "--model", "{model}", "--data", "{prepared}", "--beam-size", "4"], "--beam-size applies to"),
    (["transcribe", "--model", "{model}", "{tmp}/missing.wav"], "missing.wav: missing"),
    (["transcribe", "--model", "{model}", "{config}"], "unreadable"),
    (["transcribe", "--model", "{model}", "{config}", "--language", "xx"], "no adapter for it"),
    (["push", "--model", "{model}", "--repo-id", "me/x"], "--language, or pass --fusion"),
    (["push", "--model", "{model}", "--language", "ro", "--repo-id", "me/x", "--folder", "{tmp}/f"],
     "no adapter for language(s) ['ro']"),
    (["push", "--model", "{model}", "--language", "ro", "--repo-id", "not a repo"], "is not of the form ORG/NAME"),
    (["recipe", "{tmp}/no_recipe"], "no_recipe: no such recipe folder"),
    (["demo", "--only", "bse"], "--only: unknown stage(s) bse; allowed values: base"),
    (["demo", "no_such_setting=1"], "unknown setting(s) no_such_setting"),
]  # fmt: skip


@pytest.fixture
def error_paths(prepared_corpus, trained_stage, tmp_path):
    config = write_yaml(tmp_path / "stage.yaml", stage_spec(prepared_corpus, tmp_path / "never", max_steps=1))
    return {"config": config, "model": trained_stage / "model", "prepared": prepared_corpus, "tmp": tmp_path}


def fill(argv: list[str], paths: dict[str, Path]) -> list[str]:
    """Replace the ``{name}`` placeholders of ``argv`` by ``paths`` (other braces are YAML)."""
    out = []
    for arg in argv:
        for name, path in paths.items():
            arg = arg.replace("{" + name + "}", str(path))
        out.append(arg)
    return out


@pytest.mark.parametrize("argv", USAGE_ERRORS)
def test_usage_errors_are_one_line_with_status_2(argv, error_paths, capsys):
    code, out, err = run_main(fill(argv, error_paths), capsys)
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and err.startswith("adaptspeech") and "error:" in err and "Traceback" not in err
    assert f"adaptspeech {argv[0]}" in err  # names the subcommand whose --help to read


@pytest.mark.parametrize(("argv", "message"), EXPECTED_ERRORS)
def test_expected_errors_are_one_line_with_status_1(argv, message, error_paths, capsys):
    code, _, err = run_main(fill(argv, error_paths), capsys)
    assert code == 1, err
    assert err.startswith("adaptspeech: error: ") and err.count("\n") == 1 and "Traceback" not in err
    assert fill([message], error_paths)[0] in err
    assert not (error_paths["tmp"] / "never" / "model").exists()  # stopped before any training


def test_a_real_process_prints_one_line_and_no_traceback(tmp_path):
    done = subprocess.run(cli("train", "--config", str(tmp_path / "nope.yaml")), env=subprocess_env(),
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 1
    assert done.stderr == f"adaptspeech: error: config file {tmp_path / 'nope.yaml'} not found\n"

