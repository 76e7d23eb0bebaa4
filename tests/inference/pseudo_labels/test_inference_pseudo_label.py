"""Pseudo-labelling an untranscribed pool (adaptspeech/inference/pseudo_labels/labelling.py,
adaptspeech/cli/pseudo_label.py, adaptspeech/data/pseudo_labelled.py): the labels are the decoder's text with its
confidence and the model's id, the filter keeps what it says, a run stopped half-way resumes without decoding a row
twice and ends as an uninterrupted run, a filter that keeps nothing / a vocabulary that lacks target characters / a pool
of other inputs are one line, and a pool whose files lie far below the dev split's confidence is reported naming
them."""

from __future__ import annotations

import json
import math
import shutil

import numpy as np
import pytest
import soundfile as sf
from datasets import DatasetDict, load_from_disk
from helpers.cli import one_error_line, run_main
from helpers.files import folder_bytes
from helpers.model_folders import audio, model_folder

from adaptspeech.data.pools import feature_extractor_for, load_pool, prepare_audio_folder
from adaptspeech.data.prepared_corpus import COMPLETE_MARKER
from adaptspeech.data.pseudo_labelled import ConfidenceFilter, load_pseudo_labelled
from adaptspeech.inference.pseudo_labels.labelling import pseudo_label, reference_check

ROWS = 12


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    """A random tiny model (ro) and a pool of 12 chirps of 0.8 to 2 s prepared with its feature extractor."""
    root = tmp_path_factory.mktemp("pseudo")
    model = model_folder(root / "model", languages=("ro",))
    clips = root / "clips"
    clips.mkdir()
    for i in range(ROWS):
        sf.write(clips / f"clip{i:02d}.wav", audio(0.8 + 0.1 * i, seed=i), 16000)
    prepare_audio_folder(clips, "ro", root / "pool", feature_extractor_for(processor_dir=str(model)), progress=False)
    return root, model


def _load(model_dir):
    from transformers import Wav2Vec2Processor

    from adaptspeech import AdaptSpeechForCTC

    return AdaptSpeechForCTC.from_pretrained(model_dir), Wav2Vec2Processor.from_pretrained(model_dir)


def test_labels_are_the_best_path_with_confidence_and_model_id(setup, tmp_path, capsys):
    root, model_dir = setup
    code, out, _ = run_main(["pseudo-label", "--model", model_dir, "--data", root / "pool", "--out", tmp_path / "q",
                             "--keep-fraction", "0.5", "--batch-size", "4", "--no-progress"], capsys)
    assert code == 0 and f"labelled {ROWS} segments" in out and "real-time factor" in out
    labels = [json.loads(line) for line in (tmp_path / "q" / "labels.jsonl").read_text().splitlines()]
    assert sorted(r["index"] for r in labels) == list(range(ROWS))
    dataset = load_from_disk(str(tmp_path / "q" / "dataset"))["train"]
    summary = json.loads((tmp_path / "q" / "pseudo_label.json").read_text())
    assert len(dataset) == summary["kept"] == ROWS // 2 and (tmp_path / "q" / COMPLETE_MARKER).is_file()
    kept = sorted((r for r in labels if r["text"]), key=lambda r: -r["confidence"])[: ROWS // 2]
    assert sorted(dataset["confidence"]) == pytest.approx(sorted(r["confidence"] for r in kept))
    assert set(dataset["labelled_by"]) == {summary["model"]} and summary["model"].startswith(str(model_dir.resolve()))
    # the text is what transcribe writes for the same audio (same segment, CTC greedy)
    from adaptspeech.inference.transcriber import transcribe

    model, processor = _load(model_dir)
    pool, _ = load_pool(root / "pool")
    by_path = {p: i for i, p in enumerate(pool["path"])}
    for row in dataset.select(range(2)):
        wave = audio(0.8 + 0.1 * int(row["path"][4:6]), seed=int(row["path"][4:6]))
        assert by_path[row["path"]] >= 0
        result = transcribe(model, processor, [sf.read(row["source_file"], dtype="float32")[0]], confidence=True)[0]
        assert len(wave) > 0 and row["text"] == result.text
        assert row["confidence"] == pytest.approx(result.extra["confidence"], abs=1e-5)  # batched vs alone, float32
        assert row["labels"] == processor.tokenizer(row["text"]).input_ids


def test_a_stopped_run_resumes_without_decoding_twice(setup, tmp_path, capsys):
    root, model_dir = setup
    model, processor = _load(model_dir)

    def stop(done: int) -> None:
        if done >= 4:
            raise KeyboardInterrupt  # as a kill half-way: the batches written so far stay

    with pytest.raises(KeyboardInterrupt):
        pseudo_label(model, processor, root / "pool", tmp_path / "q", model_id="m", batch_size=4, progress=False,
                     on_batch=stop)
    assert not (tmp_path / "q").exists()
    work = tmp_path / ".q.labelling" / "labels.jsonl"
    assert len(work.read_text().splitlines()) == 4
    resumed = pseudo_label(model, processor, root / "pool", tmp_path / "q", model_id="m", batch_size=4,
                           progress=False)
    assert resumed.summary["decoded_this_run"] == ROWS - 4 and not work.parent.exists()
    fresh = pseudo_label(model, processor, root / "pool", tmp_path / "fresh", model_id="m", batch_size=4,
                         progress=False)
    assert sorted(resumed.dataset["text"]) == sorted(fresh.dataset["text"])
    assert sorted(resumed.dataset["confidence"]) == sorted(fresh.dataset["confidence"])  # the same computation
    with pytest.raises(KeyboardInterrupt):
        pseudo_label(model, processor, root / "pool", tmp_path / "r", model_id="m", batch_size=4, progress=False,
                     on_batch=stop)
    code, _, err = run_main(["pseudo-label", "--model", model_dir, "--data", root / "pool", "--out", tmp_path / "r",
                             "--no-progress"], capsys)  # another model id: the work folder is not continued
    assert code == 1 and "holds the labels of a run with another model" in one_error_line(err)


def test_a_half_written_last_line_is_cut_before_the_rerun_appends(setup, tmp_path):
    """A SIGKILL while a batch is written leaves half a line at the end of ``labels.jsonl``; the rerun appended its
    first record to that half line (one broken line in the middle of the file)."""
    root, model_dir = setup
    model, processor = _load(model_dir)

    def stop(done: int) -> None:
        if done >= 4:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        pseudo_label(model, processor, root / "pool", tmp_path / "q", model_id="m", batch_size=4, progress=False,
                     on_batch=stop)
    work = tmp_path / ".q.labelling" / "labels.jsonl"
    with work.open("a", encoding="utf-8") as handle:
        handle.write('{"index": 9, "text": "hal')  # the kill came in the middle of a record
    resumed = pseudo_label(model, processor, root / "pool", tmp_path / "q", model_id="m", batch_size=4,
                           progress=False)
    assert resumed.summary["decoded_this_run"] == ROWS - 4
    lines = (tmp_path / "q" / "labels.jsonl").read_text(encoding="utf-8").splitlines()
    assert sorted(json.loads(line)["index"] for line in lines) == list(range(ROWS))  # each line whole, each row once


def test_a_complete_earlier_output_is_kept_unless_overwrite(setup, tmp_path, capsys):
    root, model_dir = setup
    out = tmp_path / "q"
    argv = ["pseudo-label", "--model", model_dir, "--data", root / "pool", "--out", out, "--no-progress"]
    assert run_main([*argv, "--keep-fraction", "0.5"], capsys)[0] == 0
    before = folder_bytes(out)
    code, printed, err = run_main(argv, capsys)
    assert code == 1 and printed == ""  # refused before decoding
    assert one_error_line(err) == (
        f"adaptspeech: error: --out {out} already holds an earlier adaptspeech pseudo-label output "
        f"({COMPLETE_MARKER}): pass --overwrite to replace it, or choose another --out")
    assert folder_bytes(out) == before and sorted(p.name for p in tmp_path.iterdir()) == ["q"]
    code, printed, _ = run_main([*argv, "--overwrite"], capsys)
    assert code == 0 and f"labelled {ROWS} segments" in printed
    assert json.loads((out / "pseudo_label.json").read_text())["keep_fraction"] is None


def test_a_filter_keeping_nothing_is_one_line_with_the_quantiles(setup, tmp_path, capsys):
    root, model_dir = setup
    code, _, err = run_main(["pseudo-label", "--model", model_dir, "--data", root / "pool", "--out", tmp_path / "q",
                             "--min-confidence", "1", "--no-progress"], capsys)
    line = one_error_line(err)
    assert code == 1 and "every pseudo-label was filtered out by the minimum confidence 1 (12 labels" in line
    assert "confidence quantiles: min " in line and "50% " in line and not (tmp_path / "q").exists()
    assert ConfidenceFilter(keep_fraction=0.25).keep([0.1, 0.9, 0.5, 0.95], ["a", "b", "", "c"]).tolist() == \
        [False, False, False, True]
    with pytest.raises(ValueError, match="not both"):
        ConfidenceFilter(0.5, 0.5)


def test_refused_vocabulary_and_inputs(setup, tmp_path, capsys):
    root, model_dir = setup
    from adaptspeech.data.processor import build_processor
    from adaptspeech.data.text import build_vocab

    target = tmp_path / "target"
    build_processor(build_vocab(["abc žľť"]), target / "processor", feature_type="fbank")
    DatasetDict({"train": load_pool(root / "pool")[0]}).save_to_disk(str(target / "dataset"))
    (target / COMPLETE_MARKER).write_text("{}")
    code, _, err = run_main(["pseudo-label", "--model", model_dir, "--data", root / "pool", "--out", tmp_path / "q",
                             "--target", target, "--no-progress"], capsys)
    line = one_error_line(err)
    assert code == 1 and "lacks 3 character(s) of the target's: 'ľ' 'ť' 'ž'" in line
    other = tmp_path / "pool80"
    prepare_audio_folder(root / "clips", "ro", other, feature_extractor_for("fbank"), progress=False)
    code, _, err = run_main(["pseudo-label", "--model", model_dir, "--data", other, "--out", tmp_path / "q",
                             "--no-progress"], capsys)
    assert code == 1 and "the pool holds FbankFeatures(" in one_error_line(err)


def test_a_pool_far_below_the_dev_confidence_is_named(setup, tmp_path, capsys):
    """The target's dev split is the pool's three most confident segments: most of the pool lies below them."""
    root, model_dir = setup
    code, _, _ = run_main(["pseudo-label", "--model", model_dir, "--data", root / "pool", "--out", tmp_path / "q",
                           "--no-progress"], capsys)
    labelled = load_from_disk(str(tmp_path / "q" / "dataset"))["train"]
    best = np.argsort(-np.asarray(labelled["confidence"]))[:3]
    target = tmp_path / "target"
    shutil.copytree(tmp_path / "q" / "processor", target / "processor")
    DatasetDict({"dev": labelled.select(best)}).save_to_disk(str(target / "dataset"))
    (target / COMPLETE_MARKER).write_text("{}")
    code, _, err = run_main(["pseudo-label", "--model", model_dir, "--data", root / "pool", "--out", tmp_path / "r",
                             "--target", target, "--no-progress"], capsys)
    assert code == 0 and "adaptspeech: warning: " in err and "is the pool another language or noise?" in err
    summary = json.loads((tmp_path / "r" / "pseudo_label.json").read_text())
    reference = summary["reference"]
    assert reference["mostly_far_below"] and len(reference["files_far_below"]) >= ROWS - 3
    assert all(f"clip{i:02d}.wav" in err for i in range(ROWS) if str(root / "clips" / f"clip{i:02d}.wav") in
               reference["files_far_below"][:10])
    assert set(summary["per_file"]) == {str(root / "clips" / f"clip{i:02d}.wav") for i in range(ROWS)}
    check = reference_check({"a": {"mean_confidence": 0.9, "seconds": 3.0}, "b": {"mean_confidence": 0.2,
                                                                                   "seconds": 1.0}},
                            np.array([0.8, 0.85, 0.9, 0.95]))
    assert check["files_far_below"] == ["b"] and check["audio_share_far_below"] == 0.25 and not check[
        "mostly_far_below"]


def test_a_stage_reads_the_kept_rows_with_its_own_threshold(setup, tmp_path, capsys):
    root, model_dir = setup
    run_main(["pseudo-label", "--model", model_dir, "--data", root / "pool", "--out", tmp_path / "q",
              "--no-progress"], capsys)
    _, processor = _load(model_dir)
    labels = json.loads((tmp_path / "q" / "pseudo_label.json").read_text())
    median = labels["confidence_quantiles"]["median"]
    rows = load_pseudo_labelled(tmp_path / "q", "ro", processor.tokenizer, ConfidenceFilter(min_confidence=median))
    assert 0 < len(rows) < ROWS and min(rows["confidence"]) >= median - 1e-6
    with pytest.raises(ValueError, match="every pseudo-label was filtered out by the minimum confidence 1"):
        load_pseudo_labelled(tmp_path / "q", "ro", processor.tokenizer, ConfidenceFilter(min_confidence=1.0))


@pytest.mark.parametrize(
    ("option", "value", "interval"),
    [("--min-confidence", "1.5", "[0, 1]"), ("--min-confidence", "nan", "[0, 1]"),
     ("--keep-fraction", "0", "(0, 1]"), ("--keep-fraction", "x", "(0, 1]")],
)
def test_a_threshold_outside_its_interval_is_one_usage_line(option, value, interval, tmp_path, capsys):
    code, _, err = run_main(["pseudo-label", "--model", str(tmp_path), "--data", str(tmp_path), "--out",
                             str(tmp_path / "out"), option, value], capsys)
    assert code == 2 and f"{option}: expected a number in {interval}" in err and "Traceback" not in err


def test_language_picks_the_adapter_of_a_routed_model(setup, tmp_path, capsys):
    """``--language`` on a model that routes several languages labels with that language's adapter alone (what
    ``--help`` documents): the labels are those of the model set to that language."""
    root, _ = setup
    routed = model_folder(tmp_path / "routed", languages=("ro", "cs"), active_languages=["ro", "cs"])
    model, processor = _load(routed)
    assert model.config.active_languages == ["ro", "cs"] and not model.config.fusion_active
    code, _, err = run_main(["pseudo-label", "--model", routed, "--data", root / "pool", "--out", tmp_path / "q",
                             "--no-progress"], capsys)
    assert code == 1 and "routes several languages (ro, cs): pass --language" in one_error_line(err)
    code, out, _ = run_main(["pseudo-label", "--model", routed, "--data", root / "pool", "--out", tmp_path / "q",
                             "--language", "cs", "--no-progress"], capsys)
    assert code == 0 and f"labelled {ROWS} segments" in out
    model.set_active_languages(["cs"])
    pseudo_label(model, processor, root / "pool", tmp_path / "alone", model_id="m", progress=False)
    labelled = [json.loads(line) for line in (tmp_path / "q" / "labels.jsonl").read_text().splitlines()]
    expected = [json.loads(line) for line in (tmp_path / "alone" / "labels.jsonl").read_text().splitlines()]
    assert [(r["index"], r["text"]) for r in labelled] == [(r["index"], r["text"]) for r in expected]
    assert any(r["text"] for r in expected)


@pytest.mark.parametrize("kind", ["file", "folder of other files"])
def test_a_bad_out_is_refused_before_the_pool_is_decoded(setup, tmp_path, capsys, kind):
    root, model_dir = setup
    out = tmp_path / "out"
    if kind == "file":
        out.write_text("notes")
    else:
        out.mkdir()
        (out / "notes.txt").write_text("mine")
    decoded = []
    model, processor = _load(model_dir)
    with pytest.raises((NotADirectoryError, FileExistsError), match=f"--out {out}: "):
        pseudo_label(model, processor, root / "pool", out, model_id="m", progress=False, on_batch=decoded.append)
    assert decoded == [] and not (tmp_path / ".out.labelling").exists()  # nothing decoded, no work folder
    code, _, err = run_main(["pseudo-label", "--model", model_dir, "--data", root / "pool", "--out", out,
                             "--no-progress"], capsys)
    assert code == 1 and one_error_line(err).startswith(f"adaptspeech: error: --out {out}: ")
    assert not (tmp_path / ".out.labelling").exists()
    assert (out.read_text() == "notes") if kind == "file" else ((out / "notes.txt").read_text() == "mine")


def test_a_model_that_decodes_nothing_is_named_so(setup, tmp_path, capsys):
    """Every label empty: the line says the model decoded nothing, not that the filter removed every label."""
    import torch

    root, model_dir = setup
    model, processor = _load(model_dir)
    with torch.no_grad():
        model.ctc_head.lm_head.bias[model.config.pad_token_id] += 100.0  # the blank on every frame
    model.save_pretrained(tmp_path / "blank")
    processor.save_pretrained(tmp_path / "blank")
    code, _, err = run_main(["pseudo-label", "--model", tmp_path / "blank", "--data", root / "pool", "--out",
                             tmp_path / "q", "--keep-fraction", "0.8", "--no-progress"], capsys)
    assert code == 1 and one_error_line(err) == (f"adaptspeech: error: --data {root / 'pool'}: the labelling model "
                                                 f"decoded nothing: empty text for all {ROWS} utterances (is it "
                                                 "trained, and on this language?)")


def _estimator_file(path, weight: float) -> str:
    """A best-path estimator reading the word length alone: ``sigmoid(weight * (chars - 3) / 2 + 0.5)``."""
    path.write_text(json.dumps({"format": "adaptspeech word confidence estimator", "version": 1,
                                "decoder": "best_path", "features": ["chars"], "mean": [3.0], "scale": [2.0],
                                "weights": [weight], "bias": 0.5}), encoding="utf-8")
    return f"learned:{path}"


def test_the_learned_confidence_scores_the_labels_and_a_refit_is_not_resumed(setup, tmp_path):
    from adaptspeech.decoding.confidence import ConfidenceMethod

    root, model_dir = setup
    model, processor = _load(model_dir)
    method = ConfidenceMethod.parse(_estimator_file(tmp_path / "est.json", 1.5))
    result = pseudo_label(model, processor, root / "pool", tmp_path / "q", model_id="m", batch_size=4,
                          progress=False, confidence_method=method)
    labels = [json.loads(line) for line in (tmp_path / "q" / "labels.jsonl").read_text().splitlines()]
    words = [(text, c) for r in labels for text, c in r["words"]]
    assert words and result.summary["confidence_method"] == method.name
    for text, confidence in words:  # the estimator's formula on each word's length
        assert confidence == pytest.approx(1 / (1 + math.exp(-(1.5 * (len(text) - 3) / 2 + 0.5))), abs=1e-6)

    def stop(done: int) -> None:
        if done >= 4:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        pseudo_label(model, processor, root / "pool", tmp_path / "r", model_id="m", batch_size=4, progress=False,
                     confidence_method=method, on_batch=stop)
    refit = ConfidenceMethod.parse(_estimator_file(tmp_path / "est.json", -1.0))  # the same file, fitted anew
    with pytest.raises(ValueError, match="holds the labels of a run with another confidence"):
        pseudo_label(model, processor, root / "pool", tmp_path / "r", model_id="m", batch_size=4, progress=False,
                     confidence_method=refit)
