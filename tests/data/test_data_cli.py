"""``adaptspeech prepare``: the synthetic builder and the Common Voice preparation from the command line."""

from __future__ import annotations

import json

import pytest
import soundfile as sf
from datasets import load_from_disk
from transformers import Wav2Vec2Processor

from adaptspeech.cli import SUBCOMMANDS, build_parser, main
from adaptspeech.data import SkipReport


def test_prepare_synthetic_prints_its_speed(tmp_path, capsys):
    out = tmp_path / "corpus"
    argv = ["prepare", "synthetic", "--out", str(out), "--languages", "ro", "--clips-per-language", "4"]
    assert main([*argv, "--seed", "3", "--workers", "1", "--no-progress"]) == 0
    printed = capsys.readouterr().out
    assert "wrote 4 clips (kept 0 already on disk) for 1 languages" in printed and "clips/s with 1 workers" in printed
    clips = sorted((out / "ro" / "clips").glob("*.mp3"))
    assert len(clips) == 4 and sf.info(str(clips[0])).samplerate == 16000  # the default rate
    assert json.loads((out / "synthetic_config.json").read_text())["config"]["seed"] == 3
    assert main([*argv, "--seed", "3", "--workers", "1", "--no-progress"]) == 0
    assert "wrote 0 clips (kept 4 already on disk)" in capsys.readouterr().out


def test_prepare_common_voice_writes_processor_dataset_and_report(synthetic_corpus, tmp_path, capsys):
    out = tmp_path / "prepared"
    argv = ["prepare", "common-voice", "--root", str(synthetic_corpus[0]), "--languages", "ro,cs", "--out", str(out)]
    assert main([*argv, "--feature-type", "fbank", "--train-subset", "6utt"]) == 0
    printed = capsys.readouterr().out
    assert '"train": 12' in printed and "skipped 0" in printed
    processor = Wav2Vec2Processor.from_pretrained(out / "processor")
    assert processor.feature_extractor.feature_type == "fbank"
    dataset = load_from_disk(str(out / "dataset"))
    assert {k: len(v) for k, v in dataset.items()} == {"train": 12, "dev": 4, "test": 4}
    assert "input_features" in dataset["train"].column_names
    assert SkipReport.from_json(out / "skip_report.json").skipped == []
    assert json.loads((out / "prepare_config.json").read_text())["train_subset"] == "6 utterances"


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["prepare", "common-voice", "--root", "/no/such/folder", "--languages", "ro", "--out", "x"], "no such folder"),
        (["prepare", "synthetic", "--out", "{tmp}", "--languages", "ro,hr"], "no wordfreq list or espeak-ng voice"),
        (["prepare", "common-voice", "--root", "{tmp}", "--languages", "ro", "--out", "x", "--splits", "tain"],
         "allowed values: train, dev"),
        (["prepare", "common-voice", "--root", "{corpus}", "--languages", "ro", "--out", "{tmp}/o",
          "--train-subset", "9 parsecs"], "expected a number and a unit"),
    ],
)  # fmt: skip
def test_expected_errors_end_with_one_line(argv, message, tmp_path, synthetic_corpus, capsys):
    argv = [a.format(tmp=tmp_path, corpus=synthetic_corpus[0]) for a in argv]
    assert main(argv) == 1
    err = capsys.readouterr().err
    assert err.startswith("adaptspeech: error: ") and message in err
    assert err.count("\n") == 1 and "Traceback" not in err


@pytest.mark.parametrize(
    "argv",
    [
        ["prepare", "synthetic", "--out", "x", "--speed", "3"],
        ["prepare", "synthetic", "--out", "x", "--clips-per-language", "0"],
        ["prepare", "synthetic"],
        ["prepare"],
        ["frobnicate"],
    ],
)
def test_usage_errors_are_argparse_errors(argv, capsys):
    with pytest.raises(SystemExit) as info:
        main(argv)
    assert info.value.code == 2
    assert "error:" in capsys.readouterr().err


def test_subcommands_are_one_function_each():
    parser = build_parser()
    sub = next(a for a in parser._actions if a.dest == "command")
    assert "prepare" in sub.choices and len(sub.choices) == len(SUBCOMMANDS)
