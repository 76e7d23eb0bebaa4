"""`scripts/confidence_calibration.py` and `scripts/bench_pseudo_label.py` on a tiny model: the calibration figures are
those of the library's metrics over the words the decoders scored (ROC AUC checked against a loop over every
(correct, wrong) pair), the reliability diagram is a PNG, and the throughput table has one row per decoder with the
best path as its own baseline."""

from __future__ import annotations

import importlib.util
import itertools
import json
from pathlib import Path

import pytest
import soundfile as sf
from helpers.lm import CORPUS, DEV_TEXTS, prepared_dev
from helpers.model_folders import audio, model_folder
from helpers.paths import SCRIPTS

from adaptspeech.data.pools import feature_extractor_for, prepare_audio_folder
from adaptspeech.metrics.confidence import word_correctness

pytest.importorskip("kenlm")
pytest.importorskip("pyctcdecode")


def _script(name: str):
    spec = importlib.util.spec_from_file_location(name, SCRIPTS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    from adaptspeech.lm.build import build_arpa

    root = tmp_path_factory.mktemp("st_scripts")
    model = model_folder(root / "model")
    waves = [audio(1.0 + 0.25 * i, seed=40 + i) for i in range(len(DEV_TEXTS))]
    prepared = prepared_dev(root / "prepared", model, waves, DEV_TEXTS)
    (root / "corpus.txt").write_text("\n".join(CORPUS) + "\n", encoding="utf-8")
    build_arpa(root / "corpus.txt", root / "lm", order=2, progress=False)
    clips = root / "clips"
    clips.mkdir()
    for i in range(4):
        sf.write(clips / f"clip{i}.wav", audio(0.8 + 0.2 * i, seed=i), 16000)
    prepare_audio_folder(clips, "ro", root / "pool", feature_extractor_for(processor_dir=str(model)), progress=False)
    return root, model, prepared


def _pairwise_auc(scores: list[float], correct: list[bool]) -> float:
    good = [s for s, c in zip(scores, correct, strict=True) if c]
    bad = [s for s, c in zip(scores, correct, strict=True) if not c]
    wins = sum(1.0 if g > b else 0.5 if g == b else 0.0 for g, b in itertools.product(good, bad))
    return wins / (len(good) * len(bad))


def test_calibration_figures_and_the_reliability_diagram(setup, capsys):
    root, model, prepared = setup
    script = _script("confidence_calibration")
    out = root / "calibration"
    methods = ["max_prob/min", "tsallis_exp@0.33/product", "renyi_lin@0.5/mean"]
    assert script.main(["--model", str(model), "--data", str(prepared), "--lm", str(root / "lm"), "--beam-size", "4",
                        "--out", str(out), "--threads", "1", "--methods", *methods]) == 0
    assert (out / "reliability.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    saved = json.loads((out / "calibration.json").read_text())
    # 3 best-path methods, 3 measures x (T=1, T fitted) of the LM beam, one diagram each
    assert saved["rows"] == len(DEV_TEXTS) and len(saved["methods"]) == 3 + 3 * 2
    assert len(list(out.glob("reliability_*.png"))) == 9
    printed = capsys.readouterr().out
    from adaptspeech.data.prepared_data import load_prepared
    from adaptspeech.decoding.confidence import ConfidenceMethod, best_path_words
    from adaptspeech.inference.pseudo_labels.confidence_comparison import decode_split
    from adaptspeech.modeling import AdaptSpeechForCTC

    dataset, processor = load_prepared(prepared)
    decoded = decode_split(AdaptSpeechForCTC.from_pretrained(model), processor, dataset["dev"])
    for name in methods:
        words = [best_path_words(lp, processor.tokenizer, method=ConfidenceMethod.parse(name))
                 for lp in decoded.log_probs]
        scores = [w.confidence for ws in words for w in ws]
        correct = [f for ws, ref in zip(words, DEV_TEXTS, strict=True)
                   for f in word_correctness(" ".join(w.text for w in ws), ref)]
        result = saved["methods"][f"best path {ConfidenceMethod.parse(name).name}"]
        assert result["words"] == len(scores) == sum(b["count"] for b in result["bins"])
        if 0 < sum(correct) < len(correct):
            assert result["roc_auc"] == pytest.approx(_pairwise_auc(scores, correct), abs=1e-12)  # two summations
        else:  # a random model: one class may be empty, then the AUC is undefined
            assert result["roc_auc"] != result["roc_auc"]
    assert "| best path max_prob/min |" in printed and "ROC AUC" in printed


def test_an_unknown_method_is_one_usage_line(setup, capsys):
    root, model, prepared = setup
    with pytest.raises(SystemExit):
        _script("confidence_calibration").main(["--model", str(model), "--data", str(prepared), "--out",
                                                str(root / "x"), "--methods", "margin/min"])
    assert "--methods: confidence measure 'margin'" in capsys.readouterr().err


def test_throughput_table_has_the_best_path_as_its_baseline(setup, capsys):
    root, model, _ = setup
    script = _script("bench_pseudo_label")
    figures = root / "bench.json"
    assert script.main(["--model", str(model), "--pool", str(root / "pool"), "--lm", str(root / "lm"),
                        "--beam-size", "4", "--threads", "1", "--json", str(figures), "--out", str(root / "b")]) == 0
    printed = capsys.readouterr().out
    rows = [line for line in printed.splitlines() if line.startswith("| CTC best path") or line.startswith("| LM beam")]
    assert len(rows) == 2 and rows[0].split("|")[4].strip() == "1.00"
    saved = json.loads(figures.read_text())["decoders"]
    assert {f["segments"] for f in saved.values()} == {4}
    assert all(f["real_time_factor"] == pytest.approx(f["decode_seconds"] / (60 * f["audio_minutes"]))
               for f in saved.values())
    assert "target <= 0.05" in printed
    assert all(f["cpu_real_time_factor"] > 0 and Path(f["labels"], "labels.jsonl").is_file() for f in saved.values())
