"""`scripts/confidence_calibration.py` and `scripts/bench_pseudo_label.py` on a tiny model: the calibration figures are
those of the library's metrics over the words the decoders scored (ROC AUC checked against a loop over every
(correct, wrong) pair), the reliability diagram is a PNG, the learned confidence is cross-fitted, saved and labels a
pool (`pseudo-label --confidence-method learned`), and the throughput table has one row per decoder with the best path
as its own baseline."""

from __future__ import annotations

import importlib.util
import itertools
import json
from pathlib import Path

import pytest
import soundfile as sf
from helpers.cli import one_error_line, run_main
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
    # 3 best-path methods, 3 measures x (T=1, T fitted) of the LM beam, the learned one of each decoder (skipped when
    # a fold has no correct or no wrong word), one diagram each
    assert saved["rows"] == len(DEV_TEXTS) and len(saved["methods"]) == 3 + 3 * 2 + 2
    fitted = [name for name, r in saved["methods"].items() if "skipped" not in r]
    assert len(list(out.glob("reliability_*.png"))) == len(fitted) >= 9
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
    for name, result in saved["methods"].items():  # a learned one not fitted (one class of words) says why, once
        if "skipped" in result:
            assert printed.count(f"{name}: not fitted (cannot fit a word confidence on ") == 1


def test_an_unknown_method_is_one_usage_line(setup, capsys):
    root, model, prepared = setup
    with pytest.raises(SystemExit):
        _script("confidence_calibration").main(["--model", str(model), "--data", str(prepared), "--out",
                                                str(root / "x"), "--methods", "margin/min"])
    assert "--methods: confidence measure 'margin'" in capsys.readouterr().err


def test_the_learned_confidence_is_cross_fitted_saved_and_labels_a_pool(setup, tmp_path, capsys):
    from adaptspeech.data.prepared_data import load_prepared
    from adaptspeech.decoding.confidence_estimator import DEFAULT_FEATURES, load_estimator
    from adaptspeech.inference.pseudo_labels.confidence_comparison import decode_split
    from adaptspeech.lm.decoder import LMDecoder, build_decoder
    from adaptspeech.modeling import AdaptSpeechForCTC

    root, model, _ = setup
    waves = [audio(0.9 + 0.2 * i, seed=70 + i) for i in range(12)]
    first = prepared_dev(tmp_path / "first", model, waves, ["abc def"] * len(waves))
    dataset, processor = load_prepared(first)
    decoder = LMDecoder(build_decoder(processor.tokenizer, root / "lm"), 4)
    texts = decode_split(AdaptSpeechForCTC.from_pretrained(model), processor, dataset["dev"], decoder, 4).lm_texts
    # references: the LM's own text for every other row with words of each fold (even / odd rows), "zzz" (its words
    # wrong) for the rest: right and wrong words in each fold
    references, seen = [], [0, 0]
    for i, text in enumerate(texts):
        references.append(text if text and seen[i % 2] % 2 == 0 else "zzz")
        seen[i % 2] += bool(text)
    assert min(seen) >= 2
    prepared = prepared_dev(tmp_path / "prepared", model, waves, references)
    script = _script("confidence_calibration")
    out, estimator_file = tmp_path / "calibration", tmp_path / "model_copy"
    assert script.main(["--model", str(model), "--data", str(prepared), "--lm", str(root / "lm"), "--beam-size", "4",
                        "--out", str(out), "--threads", "1", "--methods", "max_prob/min",
                        "--save-estimator", str(estimator_file)]) == 0
    learned = json.loads((out / "calibration.json").read_text())["methods"]["LM beam learned"]
    assert "skipped" not in learned and learned["fitted"] == "two-fold on the split"
    assert [e["fitted_on"]["fold"] for e in learned["estimators"]] == [0, 1]  # each half scored by the other's
    assert learned["words"] == sum(len(t.split()) for t in texts)
    saved = load_estimator(estimator_file)  # a folder: its confidence_estimator.json
    assert saved.decoder == "lm_beam" and saved.features == DEFAULT_FEATURES["lm_beam"]
    assert saved.fitted_on["rows"] == sum(1 for t in texts if t.split())
    code, _, err = run_main(["pseudo-label", "--model", model, "--data", root / "pool", "--out", tmp_path / "q",
                             "--lm", root / "lm", "--beam-size", "4", "--no-progress", "--confidence-method",
                             f"learned:{estimator_file / 'confidence_estimator.json'}"], capsys)
    assert code == 0, err
    labels = [json.loads(line) for line in (tmp_path / "q" / "labels.jsonl").read_text().splitlines()]
    words = [c for r in labels for _, c in r["words"]]
    assert words and all(0 < c < 1 for c in words)
    summary = json.loads((tmp_path / "q" / "pseudo_label.json").read_text())
    assert summary["confidence_method"].startswith("learned:")
    # an LM beam estimator without --lm, and `learned` with no estimator beside the model: one line each
    code, _, err = run_main(["pseudo-label", "--model", model, "--data", root / "pool", "--out", tmp_path / "r",
                             "--no-progress", "--confidence-method", f"learned:{estimator_file}"], capsys)
    assert code != 0 and "fitted on lm_beam words, these are best_path words; it scores words decoded with an LM " \
        "(--lm)" in one_error_line(err) and not (tmp_path / "r").exists()
    code, _, err = run_main(["pseudo-label", "--model", model, "--data", root / "pool", "--out", tmp_path / "r",
                             "--lm", root / "lm", "--no-progress", "--confidence-method", "learned"], capsys)
    line = one_error_line(err)
    assert code != 0 and f"confidence estimator {Path(model) / 'confidence_estimator.json'}: no such file" in line


def test_a_bad_estimator_file_is_one_usage_line(setup, tmp_path, capsys):
    root, model, _ = setup
    bad = tmp_path / "estimator.json"
    bad.write_text("[]", encoding="utf-8")
    code, _, err = run_main(["pseudo-label", "--model", model, "--data", root / "pool", "--out", tmp_path / "q",
                             "--confidence-method", f"learned:{bad}"], capsys)
    assert code == 2 and f"confidence estimator {bad}: not an adaptspeech word confidence estimator" in err
    assert not (tmp_path / "q").exists()


def test_kept_cer_is_the_corpus_cer_of_the_most_confident_share():
    import numpy as np

    kept_cer = _script("pseudo_label_filter_quality").kept_cer
    texts, truths = ["abc", "abd", "xyz"], ["abc", "abc", "abc"]
    assert kept_cer(texts, truths, np.array([0, 1, 2]), 1 / 3) == 0.0
    assert kept_cer(texts, truths, np.array([0, 1, 2]), 2 / 3) == pytest.approx(1 / 6)
    assert kept_cer(texts, truths, np.array([2, 1, 0]), 0.0) == 1.0  # at least one utterance
    assert kept_cer(texts, truths, np.array([0, 1, 2]), 1.0) == pytest.approx(4 / 9)


def test_filter_quality_ranks_the_methods_beside_the_oracle(setup, tmp_path, capsys):
    from adaptspeech.data.pools import load_pool

    root, model, _ = setup
    rows, _ = load_pool(root / "pool")
    truth = tmp_path / "sentences.tsv"
    truth.write_text("path\tsentence\n" + "".join(f"{p}\tabc def\n" for p in rows["path"]), encoding="utf-8")
    figures = tmp_path / "quality.json"
    script = _script("pseudo_label_filter_quality")
    assert script.main(["--model", str(model), "--pool", str(root / "pool"), "--truth", str(truth), "--lm",
                        str(root / "lm"), "--beam-size", "4", "--methods", "max_prob/min", "entropy/product",
                        "--fractions", "0.5", "1.0", "--json", str(figures)]) == 0
    saved = json.loads(figures.read_text())
    kept = saved["kept_cer"]
    assert set(kept) == {"max_prob/min", "entropy/product", "oracle (lowest true CER)"}
    for by_fraction in kept.values():  # keeping everything is the baseline; the oracle is never worse
        assert by_fraction["1.0"] == pytest.approx(saved["cer_all"])
        assert kept["oracle (lowest true CER)"]["0.5"] <= by_fraction["0.5"] + 1e-12
    assert "| max_prob/min |" in capsys.readouterr().out
    truth.write_text("path\tsentence\nnone.wav\tabc\n", encoding="utf-8")
    with pytest.raises(SystemExit):
        script.main(["--model", str(model), "--pool", str(root / "pool"), "--truth", str(truth), "--lm",
                     str(root / "lm")])
    assert f"--truth {truth}: no sentence for 4 pool clips" in capsys.readouterr().err


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
