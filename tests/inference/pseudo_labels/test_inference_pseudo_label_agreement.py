"""WeNet NST's agreement filter in ``pseudo_label``: a label is kept only when its LM and its best-path hypotheses
agree (CER below ``max_lm_disagreement``): known pairs kept and dropped, the rows a run keeps are exactly the agreeing
ones of its ``labels.jsonl``, and a filter without an LM or out of (0, 1] is one line."""

from __future__ import annotations

import json

import pytest
import soundfile as sf
from datasets import load_from_disk
from helpers.cli import one_error_line, run_main
from helpers.lm import CORPUS
from helpers.model_folders import audio, model_folder

from adaptspeech.data.pools import feature_extractor_for, prepare_audio_folder
from adaptspeech.inference.pseudo_labels.labelling import DEFAULT_MAX_LM_DISAGREEMENT, lm_agreement, lm_agreement_cer

pytest.importorskip("kenlm")
pytest.importorskip("pyctcdecode")


@pytest.mark.parametrize(("lm_text", "greedy", "cer"), [
    ("abc def", "abc def", 0.0),
    ("abc def", "abc dex", 1 / 7),
    ("abc def", "ab def", 1 / 7),
    ("abcdefghijkl", "abcdefghijkx", 1 / 12),
    ("", "", 0.0),
    ("", "abc", 1.0),
    ("abc", "", 1.0),
])
def test_agreement_cer_of_known_pairs(lm_text, greedy, cer):
    assert lm_agreement_cer(lm_text, greedy) == pytest.approx(cer)


def test_the_filter_keeps_below_the_threshold_and_drops_the_rest():
    records = [{"text": "abc def", "greedy_text": "abc def"}, {"text": "abc def", "greedy_text": "abc dex"},
               {"text": "abcdefghijkl", "greedy_text": "abcdefghijkx"}, {"text": "abc", "greedy_text": ""}]
    assert lm_agreement(records, DEFAULT_MAX_LM_DISAGREEMENT).tolist() == [True, False, True, False]
    assert lm_agreement(records, 0.2).tolist() == [True, True, True, False]
    assert lm_agreement(records, None).tolist() == [True] * 4


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    from adaptspeech.lm.build import build_arpa

    root = tmp_path_factory.mktemp("agreement")
    model = model_folder(root / "model", languages=("ro",))
    (root / "corpus.txt").write_text("\n".join(CORPUS) + "\n", encoding="utf-8")
    build_arpa(root / "corpus.txt", root / "lm", order=2, progress=False)
    clips = root / "clips"
    clips.mkdir()
    for i in range(8):
        sf.write(clips / f"clip{i}.wav", audio(0.8 + 0.2 * i, seed=60 + i), 16000)
    prepare_audio_folder(clips, "ro", root / "pool", feature_extractor_for(processor_dir=str(model)), progress=False)
    return root, model


def test_a_run_keeps_exactly_the_agreeing_labels(setup, tmp_path, capsys):
    root, model = setup
    threshold = 0.5
    code, _, err = run_main(["pseudo-label", "--model", model, "--data", root / "pool", "--out", tmp_path / "q",
                               "--lm", root / "lm", "--beam-size", "4", "--max-lm-disagreement", str(threshold),
                               "--no-progress"], capsys)
    assert code == 0, err
    labels = [json.loads(line) for line in (tmp_path / "q" / "labels.jsonl").read_text().splitlines()]
    expected = {r["index"] for r in labels if r["text"] and lm_agreement_cer(r["text"], r["greedy_text"]) < threshold}
    summary = json.loads((tmp_path / "q" / "pseudo_label.json").read_text())
    assert summary["kept"] == len(expected) == len(load_from_disk(str(tmp_path / "q" / "dataset"))["train"])
    assert summary["max_lm_disagreement"] == threshold and all("greedy_text" in r for r in labels)
    assert 0 < len(expected) < len(labels)  # the filter drops some labels of this pool and keeps others


def test_an_agreement_filter_without_an_lm_is_one_line(setup, tmp_path, capsys):
    root, model = setup
    code, _, err = run_main(["pseudo-label", "--model", model, "--data", root / "pool", "--out", tmp_path / "q",
                             "--max-lm-disagreement", "0.1", "--no-progress"], capsys)
    message = "the agreement filter compares the LM's labels with the best path's; give an LM (--lm)"
    assert code != 0 and message in one_error_line(err) and not (tmp_path / "q").exists()


def test_a_threshold_outside_its_interval_is_one_usage_line(setup, tmp_path, capsys):
    root, model = setup
    code, _, err = run_main(["pseudo-label", "--model", model, "--data", root / "pool", "--out", tmp_path / "q",
                             "--lm", root / "lm", "--max-lm-disagreement", "0"], capsys)
    assert code == 2 and "--max-lm-disagreement: expected a number in (0, 1], got 0" in err
