"""The synthetic demo's n-gram LM rows (recipes/synthetic_demo/lm_rows.py) at toy scale: the demo recipe with its ``lm``
section on (a 2-gram LM of 300 wordfreq sentences, a 2 x 2 grid) adds one row per system with the tuned weights, the
paired bootstrap against the same system without the LM, and ``only=["lm"]`` re-evaluates a finished run without
training; at alpha = beta = 0 an LM row is pyctcdecode's beam search without an LM. The LM text is wordfreq's word
frequencies and never a dev / test sentence; the section is validated."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from helpers.recipes import DEMO, TINY

from adaptspeech.recipes import RecipeError, load_recipe, recipe_module, run_recipe
from adaptspeech.recipes.simadapter.spec import CorpusSettings

lm_rows = recipe_module(DEMO, "lm_rows.py")
VS_NO_LM_COLUMN, LMSettings, lm_text = lm_rows.VS_NO_LM_COLUMN, lm_rows.LMSettings, lm_rows.lm_text

pytest.importorskip("kenlm")
pytest.importorskip("pyctcdecode")

ADAPTER, FUSION = "target adapter alone", "SimAdapter fusion (on the target adapter)"
LM_ROWS = [f"{ADAPTER} + 2-gram LM", f"{FUSION} + 2-gram LM"]


def _overrides(out: Path) -> list[str]:
    """The toy run: one source language, no baselines, 3 steps a stage, a 2-gram LM of 300 sentences."""
    overrides = [
        f"output_dir={out}", "progress=false", "sources=[cs]", "target=sk", "target_subset=8utt", "baselines={}",
        "corpus.clips_per_language=20",
        f"base.model.config={json.dumps(TINY)}",
        "source_adapters.model.add_adapters={cs: {bottleneck: 8}}",
        "source_adapters.model.active_languages=[cs]",
        "source_adapters.model.trainable={adapters: [cs]}",
        "target_adapter.model.add_adapters={sk: {bottleneck: 8}}",
        "fusion.model.fusion={languages: [cs, sk], target_language: sk, residual: none}",
        "lm.enabled=true", "lm.sentences=300", "lm.order=2", "lm.alphas=[0, 1]", "lm.betas=[0, 1]", "lm.beam_size=8",
    ]
    for stage in ("base", "source_adapters", "target_adapter", "fusion"):
        overrides += [f"{stage}.training.max_steps=3", f"{stage}.training.save_steps=3",
                      f"{stage}.training.per_device_train_batch_size=4", f"{stage}.training.eval_strategy=no"]
    return overrides


@pytest.fixture(scope="module")
def lm_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("demo_lm")
    return out, run_recipe(load_recipe("recipes/synthetic_demo", _overrides(out)))


def test_lm_rows_with_tuned_weights_and_the_bootstrap_against_no_lm(lm_run):
    out, result = lm_run
    rows = {row["system"]: row for row in result["rows"]}
    assert list(rows) == ["base, zero-shot (no target training)", ADAPTER, FUSION, *LM_ROWS]
    saved = json.loads((out / "results.json").read_text())
    assert saved["rows"] == json.loads(json.dumps(result["rows"]))
    md = (out / "results.md").read_text()
    assert VS_NO_LM_COLUMN in md and "### 2-gram LM (sk)" in md
    lm = saved["lm"]
    assert lm["text"]["sentences"] + lm["text"]["dropped"] == 300
    for system, name in zip((ADAPTER, FUSION), LM_ROWS, strict=True):
        row, plain, tuned = rows[name], rows[system], lm["systems"][system]
        for key in ("trainable_params", "trainable_share", "train_seconds"):  # the LM trains nothing acoustic
            assert row[key] == plain[key]
        grid = tuned["grid"]  # every (alpha, beta) on dev, best first; the row decodes the test set with the best
        assert sorted((g["alpha"], g["beta"]) for g in grid) == [(0, 0), (0, 1), (1, 0), (1, 1)]
        assert [(g["wer"], g["cer"]) for g in grid] == sorted((g["wer"], g["cer"]) for g in grid)
        assert (row["alpha"], row["beta"]) == (tuned["alpha"], tuned["beta"]) == (grid[0]["alpha"], grid[0]["beta"])
        zero = next(g for g in grid if g["alpha"] == 0 and g["beta"] == 0)
        assert tuned["dev_no_lm"] == {"cer": zero["cer"], "wer": zero["wer"]}
        assert tuned["test_lm"] == {"cer": row["cer"], "wer": row["wer"]}
        assert tuned["test_no_lm"] == {"cer": plain["cer"], "wer": plain["wer"]}
        versus = lm["significance_vs_no_lm"][name]
        assert versus["cer_delta"] == pytest.approx(row["cer"] - plain["cer"])
        assert versus["ci_low"] <= versus["cer_delta"] <= versus["ci_high"]
        assert row[VS_NO_LM_COLUMN].startswith(f"{100 * versus['cer_delta']:+.2f} [")
        against_adapter = saved["significance"][name]
        assert against_adapter["cer_delta"] == pytest.approx(row["cer"] - rows[ADAPTER]["cer"])
    assert VS_NO_LM_COLUMN not in rows[ADAPTER]  # "-" in the table


def test_lm_text_holds_no_dev_or_test_sentence(lm_run):
    out, result = lm_run
    from datasets import load_from_disk

    dataset = load_from_disk(str(out / "prepared" / "dataset"))
    held = {t for split in ("dev", "test") for t, lang in zip(dataset[split]["text"], dataset[split]["language"])
            if lang == "sk"}
    lines = (out / "lm" / "text.txt").read_text(encoding="utf-8").splitlines()
    assert len(lines) == result["lm"]["text"]["sentences"] and not held & set(lines)
    assert 0.0 <= result["lm"]["text"]["test_word_coverage"] <= 1.0


def test_only_lm_reevaluates_without_training_and_zero_weights_are_no_lm(lm_run, tmp_path):
    """``only=["lm"]`` on a copy of the run: no stage trains, the LM is reused; with the grid (0, 0) the LM rows are
    pyctcdecode's beam search without an LM, decoded here independently."""
    from adaptspeech.data.prepared_data import load_prepared, select_languages
    from adaptspeech.evaluation import evaluate_dataset
    from adaptspeech.lm.decoder import LMDecoder, build_decoder
    from adaptspeech.modeling import AdaptSpeechForCTC

    source, first = lm_run
    out = tmp_path / "copy"
    shutil.copytree(source, out, ignore=shutil.ignore_patterns("corpus"))
    summaries = {p: p.read_text() for p in out.glob("*/stage_summary.json")}
    recipe = load_recipe("recipes/synthetic_demo", [*_overrides(out), "lm.alphas=[0]", "lm.betas=[0]"])
    again = run_recipe(recipe, only=["lm"])
    assert {p: p.read_text() for p in out.glob("*/stage_summary.json")} == summaries and len(summaries) == 4
    assert again["lm"]["text"]["reused"] is True
    assert again["rows"][:3] == first["rows"][:3]  # the systems without the LM: the same models, the same figures
    dataset, processor = load_prepared(out / "prepared")
    test = select_languages(dataset["test"], ["sk"], "test", "test")
    plain = LMDecoder(build_decoder(processor.tokenizer, None), beam_width=8)
    rows = {row["system"]: row for row in again["rows"]}
    for stage, name in zip(("target_adapter", "fusion"), LM_ROWS, strict=True):
        assert (rows[name]["alpha"], rows[name]["beta"]) == (0.0, 0.0)
        model = AdaptSpeechForCTC.from_pretrained(out / stage / "model")
        expected = evaluate_dataset(model, test, processor, progress=False, lm_decoder=plain)["overall"]
        assert (rows[name]["cer"], rows[name]["wer"]) == (expected["cer"], expected["wer"])


def test_lm_text_follows_wordfreq_frequencies_and_its_seed():
    from adaptspeech.data.synthetic import load_word_list

    corpus = CorpusSettings(type="synthetic", clips_per_language=1000, seed=0)
    settings = LMSettings(enabled=True, sentences=3000, seed=1)
    sentences, stats = lm_text("sk", corpus, settings, exclude=set())
    again, _ = lm_text("sk", corpus, settings, exclude={sentences[0], sentences[5]})
    assert again == [s for i, s in enumerate(sentences) if i not in (0, 5)]  # same seed, same text; dropped ones
    other, _ = lm_text("sk", corpus, LMSettings(enabled=True, sentences=3000, seed=2), exclude=set())
    assert other != sentences
    words, freqs = load_word_list("sk", corpus.synthetic_config())
    lengths = [len(s.split()) for s in sentences]
    assert min(lengths) >= 3 and max(lengths) <= 10
    tokens = [w for s in sentences for w in s.split()]
    assert set(tokens) <= set(words) and stats["words"] == len(tokens)
    # the most frequent words appear at their wordfreq probability (within 4 binomial standard deviations)
    probs = freqs / freqs.sum()
    counts = {w: 0 for w in words[:5]}
    for w in tokens:
        if w in counts:
            counts[w] += 1
    for w, p in zip(words[:5], probs[:5], strict=True):
        assert abs(counts[w] - len(tokens) * p) <= 4 * np.sqrt(len(tokens) * p * (1 - p)), w


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("lm.order=7", r"lm\.order: expected an integer from 2 to 5, got 7"),
        ("lm.alphas=[]", r"lm\.alphas: expected a non-empty list of numbers >= 0"),
        ("lm.alphas=[-1]", r"lm\.alphas: expected a non-empty list of numbers >= 0"),
        ("lm.sentences=10", r"lm\.sentences: expected an integer >= 100, got 10"),
        ("lm.systems=[base]", r"lm\.systems: expected a non-empty list of target stages"),
        ("lm.enabled=yes", r"lm\.enabled: expected true or false, got 'yes'"),
        ("lm.beamsize=8", r"lm: unknown setting\(s\) beamsize \(did you mean beam_size\?\)"),
    ],
)
def test_lm_section_is_validated(override, message):
    with pytest.raises(RecipeError, match=message):
        load_recipe("recipes/synthetic_demo", [override])


def test_lm_section_defaults_and_baselines():
    with pytest.raises(RecipeError, match=r"recipe: unknown setting\(s\) lm"):  # the demo's own section
        load_recipe("recipes/common_voice", ["lm.enabled=true"])
    demo = load_recipe("recipes/synthetic_demo").lm
    assert demo.enabled and demo.label == "4-gram LM" and demo.systems == ("target_adapter", "fusion")
    with pytest.raises(RecipeError, match=r"lm\.systems: finetune is not trained by this recipe"):
        load_recipe("recipes/synthetic_demo", ["baselines={}", "lm.systems=[finetune]"])
