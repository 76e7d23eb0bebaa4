"""The alignment study's fixture and measurement (recipes/synthetic_demo/alignment_study.py) on a few synthetic clips:
the recordings hold the clips where their truths say, with pauses of 0.1-1.0 s, and about the share of untranscribed
speech asked for; the measurement reads ``prepare align``'s ``alignments.tsv`` against the truths (boundary errors,
lines recovered, kept clips over untranscribed speech)."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
from helpers.recipes import DEMO

from adaptspeech.alignment.corpus import LINE_COLUMNS
from adaptspeech.data.audio import load_audio
from adaptspeech.data.synthetic import build_synthetic_corpus
from adaptspeech.recipes import recipe_module

study = recipe_module(DEMO, "alignment_study.py")


@pytest.fixture(scope="module")
def clips(tmp_path_factory: pytest.TempPathFactory) -> list[tuple[Path, str]]:
    corpus = tmp_path_factory.mktemp("alignment_study") / "corpus"
    build_synthetic_corpus(corpus, ["sk"], 12, seed=0, num_workers=1, progress=False)
    return study.split_clips(corpus, "sk", "train")


def test_the_recordings_hold_the_clips_where_the_truths_say(clips, tmp_path: Path):
    truths = study.build_recordings(clips, 0.2, 0.15, tmp_path)
    waves = {path.name: load_audio(path, 16000) for path, _ in clips}
    placed = 0
    for truth in truths:
        audio, rate = sf.read(tmp_path / truth["recording"], dtype="float32")
        text = (tmp_path / truth["recording"]).with_suffix(".txt").read_text(encoding="utf-8").splitlines()
        assert rate == 16000 and text == [line["sentence"] for line in truth["lines"]]
        for line in truth["lines"]:
            wave = waves[line["clip"]]
            first = round(line["start"] * 16000)
            assert abs(line["end"] - line["start"] - len(wave) / 16000) < 1e-6
            noise = audio[first : first + len(wave)] - wave  # the room noise, at -40 dBFS (and PCM-16 rounding)
            assert 20 * np.log10(np.sqrt(np.mean(noise**2))) == pytest.approx(-40.0, abs=0.5)
            placed += 1
        starts = [line["start"] for line in truth["lines"]] + [a for a, _ in truth["untranscribed"]]
        ends = [line["end"] for line in truth["lines"]] + [b for _, b in truth["untranscribed"]]
        gaps = np.sort(starts)[1:] - np.sort(ends)[:-1]
        assert np.all((gaps >= 0.1 - 1e-3) & (gaps <= 1.0 + 1e-3))
    hidden = sum(b - a for truth in truths for a, b in truth["untranscribed"])
    total = sum(line["end"] - line["start"] for truth in truths for line in truth["lines"]) + hidden
    assert placed + sum(len(t["untranscribed"]) for t in truths) == len(clips)
    assert 0.05 < hidden / total < 0.4


def _alignments(folder: Path, truth: dict, shifts: list[float], dropped: list[str]) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    with (folder / "alignments.tsv").open("w", encoding="utf-8", newline="") as handle:
        writer = csv.DictWriter(handle, LINE_COLUMNS, delimiter="\t", lineterminator="\n")
        writer.writeheader()
        for i, (line, shift, drop) in enumerate(zip(truth["lines"], shifts, dropped, strict=True)):
            writer.writerow({"source": truth["recording"], "line": i + 1, "path": "", "start": line["start"] + shift,
                             "end": line["end"] + shift, "score": -0.1, "margin": 0.0, "cer": 0.0, "cer_folded": 0.0,
                             "dropped": drop, "sentence": line["sentence"], "decoded": line["sentence"]})


def test_the_measurement_reads_boundaries_recovery_and_untranscribed_overlap(tmp_path: Path):
    truth = {"recording": "rec000.wav", "untranscribed": [[14.5, 16.0]],
             "lines": [{"sentence": f"line {i}", "start": 4.0 * i, "end": 4.0 * i + 2.0} for i in range(4)]}
    _alignments(tmp_path, truth, [0.02, -0.04, 0.0, 1.0], ["", "", "cer", ""])
    result = study.measure([truth], tmp_path)
    assert (result["lines"], result["kept"], result["recovered"]) == (4, 3, 0.75)
    assert result["boundary_error_median_ms"] == pytest.approx(40.0)  # 20, 20, 40, 40, 1000, 1000
    assert result["boundary_error_p95_ms"] == pytest.approx(1000.0)
    assert result["kept_over_untranscribed"] == 1  # the last line, placed at 13-15 s, covers 0.5 s of it
    assert json.dumps(result)
