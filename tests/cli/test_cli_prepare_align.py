"""``adaptspeech prepare align`` end to end with a tiny random model (the plumbing: clips, TSVs, report, output folder
rule) and its bad inputs, each ending in one line naming the file."""

from __future__ import annotations

import csv
import json
import re
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
from helpers.model_folders import audio, model_folder

from adaptspeech.cli import main

LENIENT = ["--min-score", "-1e9", "--max-cer", "1e9", "--min-seconds", "0.01", "--chars-per-second", "0,1e9",
           "--min-matched", "0", "--no-progress"]

@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return model_folder(tmp_path_factory.mktemp("align_model") / "model", languages=("ro",))

def _recording(folder: Path, name: str = "rec", seconds: float = 6.0, lines: str = "abc def\nghi jab\n") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    sf.write(folder / f"{name}.wav", audio(seconds), 16000)
    (folder / f"{name}.txt").write_text(lines, encoding="utf-8")
    return folder / f"{name}.wav"

def _run(args: list[str]) -> int:
    return main(["prepare", "align", *args])

def test_clips_and_manifest_in_the_common_voice_layout(tiny_model: Path, tmp_path: Path, capsys):
    wav = _recording(tmp_path / "in")
    out = tmp_path / "out"
    argv = ["--audio", str(wav), "--text", str(wav.with_suffix(".txt")), "--model", str(tiny_model),
            "--language", "ro", "--out", str(out), *LENIENT]
    assert _run(argv) == 0
    report = json.loads((out / "align_report.json").read_text())
    assert (report["lines"], report["kept"]) == (2, 2)
    with (out / "ro" / "train.tsv").open() as handle:
        rows = list(csv.DictReader(handle, delimiter="\t"))
    assert [r["sentence"] for r in rows] == ["abc def", "ghi jab"]
    for row in rows:
        data, rate = sf.read(out / "ro" / "clips" / row["path"])
        assert rate == 16000 and len(data) > 0
    with (out / "ro" / "alignments.tsv").open() as handle:
        lines = list(csv.DictReader(handle, delimiter="\t"))
    assert [float(r["start"]) < float(r["end"]) for r in lines] == [True, True]
    assert float(lines[0]["end"]) <= float(lines[1]["start"]) and lines[0]["source"] == "rec.wav"
    assert _run(argv) == 1  # an earlier output is kept
    assert "pass --overwrite" in capsys.readouterr().err
    assert _run([*argv, "--overwrite"]) == 0

def test_default_filters_drop_and_count_by_reason(tiny_model: Path, tmp_path: Path):
    wav = _recording(tmp_path / "in")
    out = tmp_path / "out"
    argv = ["--audio-dir", str(wav.parent), "--model", str(tiny_model), "--language", "ro", "--out", str(out),
            "--min-score", "-1e9", "--min-matched", "0", "--no-progress"]
    assert _run(argv) == 0
    report = json.loads((out / "align_report.json").read_text())
    assert report["kept"] + sum(report["dropped"].values()) == 2
    assert report["kept"] == 0 and set(report["dropped"]) <= {"cer", "too_short"}  # a random model reads nothing

def test_a_multilingual_base_without_adapters_aligns_any_language(tmp_path: Path):
    base = model_folder(tmp_path / "base", languages=())  # the demo's base: one shared head, no adapter
    wav = _recording(tmp_path / "in")
    out = tmp_path / "out"
    argv = ["--audio", str(wav), "--text", str(wav.with_suffix(".txt")), "--model", str(base), "--language", "sk",
            "--out", str(out), *LENIENT]
    assert _run(argv) == 0
    assert json.loads((out / "align_report.json").read_text())["kept"] == 2

@pytest.mark.parametrize(("case", "expected"), [
    ("empty_text", r"rec\.txt: no text"),
    ("short_audio", r"rec\.txt:2: the audio .*rec\.wav \(0\.5 s\) is shorter than its text"),
    ("unreadable", r"rec\.wav: the audio cannot be used: unreadable"),
    ("language", r"--language 'sk': the model .* has no adapter for it; languages with one: ro"),
])
def test_bad_inputs_end_in_one_line(tiny_model: Path, tmp_path: Path, capsys, case: str, expected: str):
    folder = tmp_path / "in"
    lines = "abc def\n" * (40 if case == "short_audio" else 2)
    wav = _recording(folder, seconds=0.5 if case == "short_audio" else 3.0, lines="" if case == "empty_text" else
                     lines)
    if case == "unreadable":
        wav.write_bytes(b"RIFF not really a wave file")
    language = "sk" if case == "language" else "ro"
    argv = ["--audio", str(wav), "--text", str(wav.with_suffix(".txt")), "--model", str(tiny_model),
            "--language", language, "--out", str(tmp_path / "out"), *LENIENT]
    assert _run(argv) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1

    assert re.search(expected, err[0]), err[0]
    assert not (tmp_path / "out").exists()

def test_folder_form_reports_a_refused_recording_and_keeps_the_others(tiny_model: Path, tmp_path: Path, capsys):
    folder = tmp_path / "in"
    _recording(folder, "a")
    _recording(folder, "b", lines="")
    out = tmp_path / "out"
    argv = ["--audio-dir", str(folder), "--model", str(tiny_model), "--language", "ro", "--out", str(out), *LENIENT]
    assert _run(argv) == 1
    report = json.loads((out / "align_report.json").read_text())
    assert report["kept"] == 2 and list(report["recordings_refused"]) == ["b.wav"]
    assert "refused b.wav: " in capsys.readouterr().out
    assert np.all([p.name.startswith("a_") for p in (out / "ro" / "clips").iterdir()])


@pytest.mark.parametrize(("option", "value", "expected"), [
    ("--max-cer", "nan", r"argument --max-cer: expected a finite number"),
    ("--edge-pad", "-0.1", r"argument --edge-pad: expected a non-negative number"),
])
def test_bad_filter_settings_end_in_one_line(tmp_path: Path, capsys, option: str, value: str, expected: str):
    argv = ["--audio", "rec.wav", "--text", "rec.txt", "--model", "m", "--language", "sk", "--out",
            str(tmp_path / "out"), option, value]
    with pytest.raises(SystemExit) as exit_info:
        _run(argv)
    assert exit_info.value.code == 2
    errors = [line for line in capsys.readouterr().err.splitlines() if "error:" in line]
    assert len(errors) == 1 and re.search(expected, errors[0]), errors


def test_folded_cer_and_margin_are_listed_for_every_line(tiny_model: Path, tmp_path: Path):
    wav = _recording(tmp_path / "in", lines="Ăbc def\nghi jab\n")
    out = tmp_path / "out"
    argv = ["--audio", str(wav), "--text", str(wav.with_suffix(".txt")), "--model", str(tiny_model),
            "--language", "ro", "--out", str(out), "--fold-cer", "--edge-pad", "0", *LENIENT]
    assert _run(argv) == 0
    with (out / "ro" / "alignments.tsv").open() as handle:
        lines = list(csv.DictReader(handle, delimiter="\t"))
    assert len(lines) == 2
    for line in lines:
        assert float(line["margin"]) <= 0 and 0 <= float(line["cer_folded"]) <= float(line["cer"]) + 1e-9
    filters = json.loads((out / "align_settings.json").read_text())["settings"]["filters"]
    assert filters["fold_cer"] is True
