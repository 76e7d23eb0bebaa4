"""Bad input to ``adaptspeech transcribe / evaluate`` and the options every decoding command shares: files that cannot
be read among good ones, decoding methods the head cannot run, ``--device``, ``--version``."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
from importlib.metadata import version
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import soundfile as sf
import torch
from helpers.cli import load_prepared_split, one_error_line, run_main

from adaptspeech.cli.common import CommandError, _decoding_options, _resolve_device


def corpus_clips(prepared: Path, count: int = 2) -> list[Path]:
    """The mp3 files of the first ``count`` test rows of the CLI corpus."""
    rows, _ = load_prepared_split(prepared, "test")
    return [prepared.parent / "corpus" / rows[i]["language"] / "clips" / rows[i]["path"] for i in range(count)]


@pytest.fixture
def bad_files(tmp_path: Path) -> dict[str, tuple[Path, str]]:
    """``{name: (path, expected message fragment)}`` of files transcribe cannot read."""
    folder = tmp_path / "a_folder"
    folder.mkdir()
    empty = tmp_path / "empty.wav"
    empty.write_bytes(b"")
    corrupt = tmp_path / "corrupt.mp3"
    sf.write(corrupt, (0.3 * np.sin(np.arange(16000) * 0.05)).astype(np.float32), 16000, format="MP3")
    corrupt.write_bytes(corrupt.read_bytes()[:200] + bytes(3000))
    silent = tmp_path / "silent.wav"
    sf.write(silent, np.zeros(16000, dtype=np.float32), 16000)
    text = tmp_path / "notes.wav"
    text.write_text("not audio\n" * 10)
    return {
        "missing": (tmp_path / "missing.wav", "missing.wav: missing (no such file)"),
        "folder": (folder, "a_folder: missing (a folder, not an audio file)"),
        "empty": (empty, "empty.wav: empty (zero-byte file)"),
        "corrupt": (corrupt, "corrupt.mp3: unreadable (soundfile cannot decode it: no audio stream that libsndfile"),
        "silent": (silent, "silent.wav: silent (peak amplitude 0.00e+00"),
        "text": (text, "notes.wav: unreadable (soundfile cannot decode it: "),
    }


# ---- transcribe: what can be read is transcribed ---------------------------------------------------------------------


def test_transcribe_goes_past_files_it_cannot_read(trained_stage, prepared_corpus, bad_files, capfd):
    """Good files among bad ones get exactly the text they get alone; each bad file is one line on stderr naming it
    and the reason; the exit status is 1; mpg123's notes never reach the terminal."""
    good = corpus_clips(prepared_corpus)
    model = trained_stage / "model"
    code, alone, err = run_main(["transcribe", "--model", model, *good, "--no-progress"], capfd)
    assert code == 0 and err == ""
    assert [line.split("\t")[0] for line in alone.splitlines()] == [str(p) for p in good]

    bad = [path for path, _ in bad_files.values()]
    argv = ["transcribe", "--model", model, bad[0], good[0], *bad[1:4], good[1], *bad[4:], "--no-progress"]
    code, out, err = run_main(argv, capfd)
    assert code == 1
    assert out == alone
    lines = err.splitlines()
    assert len(lines) == len(bad_files) and all(line.startswith("adaptspeech: error: ") for line in lines)
    for line, (path, fragment) in zip(lines, bad_files.values(), strict=True):
        assert str(path) in line and fragment in line, line
    assert "Traceback" not in err  # and no line of mpg123's: every line is one of ours


@pytest.mark.parametrize("name", ["missing", "folder", "empty", "corrupt"])
def test_transcribe_of_only_a_bad_file_is_one_line(name, trained_stage, bad_files, capfd):
    path, fragment = bad_files[name]
    code, out, err = run_main(["transcribe", "--model", trained_stage / "model", path, "--no-progress"], capfd)
    assert (code, out) == (1, "")
    assert err.count("\n") == 1 and err.startswith("adaptspeech: error: ") and fragment in err


# ---- decoding methods the head cannot run -------------------------------------------------------------------------


def decoding_args(**values) -> argparse.Namespace:
    return argparse.Namespace(**{"method": None, "beam_size": None, "ctc_weight": None, **values})


def fake_model(head: str) -> SimpleNamespace:
    return SimpleNamespace(
        config=SimpleNamespace(head=head),
        ctc_head=object() if "ctc" in head else None,
        las_head=object() if "las" in head else None,
    )


@pytest.mark.parametrize(
    ("head", "method", "message"),
    [
        ("ctc", "joint", "--method joint needs a CTC head and an attention (LAS) head; this model has head='ctc', "
                         "which supports: ctc_greedy, ctc_beam"),
        ("ctc", "attention_beam", "--method attention_beam needs an attention (LAS) head; this model has head='ctc', "
                                  "which supports: ctc_greedy, ctc_beam"),
        ("las", "joint", "--method joint needs a CTC head and an attention (LAS) head; this model has head='las', "
                         "which supports: attention_greedy, attention_beam"),
        ("las", "ctc_greedy", "--method ctc_greedy needs a CTC head; this model has head='las', which supports: "
                              "attention_greedy, attention_beam"),
        ("my_ctc", "joint", "--method joint needs a CTC head and an attention (LAS) head; this model has "
                            "head='my_ctc', which supports: ctc_greedy, ctc_beam"),
    ],
)  # fmt: skip
def test_a_method_the_head_cannot_run_names_the_head_and_its_methods(head, method, message):
    with pytest.raises(CommandError) as info:
        _decoding_options(decoding_args(method=method), fake_model(head))
    assert str(info.value) == message


@pytest.mark.parametrize(
    ("head", "values", "expected"),
    [
        ("ctc", {}, ("ctc_greedy", {})),
        ("las", {}, ("attention_beam", {})),
        ("ctc_las", {"method": "joint", "beam_size": 4, "ctc_weight": 0.3}, ("joint", {"beam_size": 4,
                                                                                        "ctc_weight": 0.3})),
        ("my_las", {}, ("attention_beam", {})),  # a head the registry does not know: read from the model's layers
    ],
)  # fmt: skip
def test_the_default_method_and_options(head, values, expected):
    assert _decoding_options(decoding_args(**values), fake_model(head)) == expected


@pytest.mark.parametrize("command", ["evaluate", "transcribe"])
def test_every_decoding_command_says_what_joint_needs(command, trained_stage, prepared_corpus, capfd):
    target = ["--data", prepared_corpus] if command == "evaluate" else [corpus_clips(prepared_corpus, 1)[0]]
    argv = [command, "--model", trained_stage / "model", *target, "--method", "joint", "--no-progress"]
    code, out, err = run_main(argv, capfd)
    assert (code, out) == (1, "")
    assert err == (
        "adaptspeech: error: --method joint needs a CTC head and an attention (LAS) head; this model has head='ctc', "
        "which supports: ctc_greedy, ctc_beam\n"
    )


# ---- --device ------------------------------------------------------------------------------------------------------


def test_evaluate_and_transcribe_on_the_cpu_match_the_default(trained_stage, prepared_corpus, tmp_path, capfd):
    model = trained_stage / "model"
    results = {}
    for name, device in (("default", []), ("cpu", ["--device", "cpu"])):
        output = tmp_path / f"{name}.json"
        argv = ["evaluate", "--model", model, "--data", prepared_corpus, "--output", output, "--no-progress", *device]
        assert run_main(argv, capfd)[0] == 0
        results[name] = json.loads(output.read_text())
        code, out, _ = run_main(["transcribe", "--model", model, *corpus_clips(prepared_corpus), "--no-progress",
                                 *device], capfd)  # fmt: skip
        assert code == 0
        results[name]["transcripts"] = out
    assert results["cpu"]["overall"] == results["default"]["overall"]
    assert results["cpu"]["per_language"] == results["default"]["per_language"]
    assert results["cpu"]["transcripts"] == results["default"]["transcripts"] != ""


@pytest.mark.parametrize(
    ("device", "message"),
    [
        ("gpu", "--device 'gpu': not a device"),
        ("cuda:x", "--device 'cuda:x': not a device"),
        ("", "--device '': not a device"),
        ("meta", "--device 'meta': unsupported device type 'meta'"),
    ],
)
@pytest.mark.parametrize("command", ["evaluate", "transcribe"])
def test_an_invalid_device_is_one_line(command, device, message, trained_stage, prepared_corpus, capfd):
    target = ["--data", prepared_corpus] if command == "evaluate" else [corpus_clips(prepared_corpus, 1)[0]]
    code, out, err = run_main([command, "--model", trained_stage / "model", *target, "--device", device], capfd)
    assert (code, out) == (1, "")
    assert err.startswith("adaptspeech: error: ") and err.count("\n") == 1 and message in err
    assert "available here: cpu" in err or "unsupported" not in message


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA")
def test_cuda_on_a_machine_without_it_is_one_line(trained_stage, prepared_corpus, capfd):
    clip = corpus_clips(prepared_corpus, 1)[0]
    code, _, err = run_main(["transcribe", "--model", trained_stage / "model", clip, "--device", "cuda"], capfd)
    assert (
        code == 1
        and err == "adaptspeech: error: --device 'cuda': CUDA is not available on this machine; available here: cpu\n"
    )


def test_the_default_device_is_the_best_available(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert _resolve_device(None) == torch.device("cuda")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: True)
    assert _resolve_device(None) == torch.device("mps")
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: False)
    assert _resolve_device(None) == torch.device("cpu")
    assert _resolve_device("cpu") == torch.device("cpu")


def test_a_cuda_index_beyond_the_machine_is_one_line(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    assert _resolve_device("cuda:1") == torch.device("cuda", 1)
    with pytest.raises(CommandError) as info:
        _resolve_device("cuda:2")
    assert str(info.value) == "--device 'cuda:2': this machine has 2 CUDA device(s) (cuda:0..cuda:1)"


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_transcripts_on_cuda_match_the_cpu(trained_stage, prepared_corpus, capfd):
    clips = corpus_clips(prepared_corpus, 3)
    texts = {}
    for device in ("cpu", "cuda"):
        code, out, _ = run_main(["transcribe", "--model", trained_stage / "model", *clips, "--device", device,
                                 "--no-progress"], capfd)  # fmt: skip
        assert code == 0
        texts[device] = out
    assert texts["cuda"] == texts["cpu"]


# ---- --version -----------------------------------------------------------------------------------------------------


def test_version_prints_the_installed_version_and_exits_0(capsys):
    code, out, err = run_main(["--version"], capsys)
    assert (code, out, err) == (0, f"adaptspeech {version('adaptspeech')}\n", "")


# ---- evaluate --output ---------------------------------------------------------------------------------------------

ROOT_SKIP = pytest.mark.skipif(
    os.geteuid() == 0, reason="root writes into read-only folders (the variant under a file runs as root too)"
)


@pytest.mark.parametrize(
    ("output", "message"),
    [
        ("{tmp}", "is a folder; give a file name"),
        ("{tmp}/file.txt/results.json", "file.txt is a file, not a folder"),
        pytest.param("{tmp}/ro/results.json", "{tmp}/ro/results.json: cannot write into {tmp}/ro", marks=ROOT_SKIP),
        pytest.param("{tmp}/ro/new/results.json", "cannot write into {tmp}/ro", marks=ROOT_SKIP),
    ],
)
def test_a_bad_output_is_refused_before_evaluating(output, message, trained_stage, prepared_corpus, tmp_path, capfd,
                                                   monkeypatch):  # fmt: skip
    import adaptspeech.evaluation

    (tmp_path / "file.txt").write_text("x")
    (tmp_path / "ro").mkdir(mode=0o555)
    calls = []
    monkeypatch.setattr(adaptspeech.evaluation, "evaluate_dataset", lambda *a, **k: calls.append(1))
    argv = ["evaluate", "--model", trained_stage / "model", "--data", prepared_corpus, "--output",
            output.format(tmp=tmp_path)]  # fmt: skip
    code, out, err = run_main(argv, capfd)
    assert (code, out, calls) == (2, "", [])
    assert err.count("\n") == 1 and "argument --output: " in err and message.format(tmp=tmp_path) in err


def test_the_output_folders_are_created(trained_stage, prepared_corpus, tmp_path, capfd):
    output = tmp_path / "new" / "folder" / "results.json"
    argv = ["evaluate", "--model", trained_stage / "model", "--data", prepared_corpus, "--output", output,
            "--max-rows", "2", "--no-progress"]  # fmt: skip
    code, _, _ = run_main(argv, capfd)
    assert code == 0 and json.loads(output.read_text())["overall"]["num_utterances"] == 2


def test_an_existing_output_is_kept_unless_overwrite(trained_stage, prepared_corpus, tmp_path, capfd):
    """Before: ``--output`` replaced any file, even one that is no evaluate output."""
    argv = ["evaluate", "--model", trained_stage / "model", "--data", prepared_corpus, "--no-progress", "--output"]
    notes = tmp_path / "notes.json"
    notes.write_text('{"mine": 1}')
    for extra in ([], ["--overwrite"]):
        code, out, err = run_main([*argv, notes, "--max-rows", "2", *extra], capfd)
        assert (code, out) == (1, "") and one_error_line(err) == (
            f"adaptspeech: error: --output {notes}: the file is not an adaptspeech evaluate output (JSON with overall "
            "and per_language rates; --overwrite replaces only those); remove it or choose another --output")
    assert notes.read_text() == '{"mine": 1}'
    results = tmp_path / "results.json"
    assert run_main([*argv, results, "--max-rows", "2"], capfd)[0] == 0
    first = results.read_text()
    code, out, err = run_main([*argv, results, "--max-rows", "3"], capfd)
    assert (code, out) == (1, "") and one_error_line(err) == (
        f"adaptspeech: error: --output {results} already holds an earlier adaptspeech evaluate output: pass "
        "--overwrite to replace it, or choose another --output")
    assert results.read_text() == first
    assert run_main([*argv, results, "--max-rows", "3", "--overwrite"], capfd)[0] == 0
    assert json.loads(results.read_text())["overall"]["num_utterances"] == 3


# ---- negative numbers as option values ------------------------------------------------------------------------------


def _single_value_options(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()) -> list[tuple[tuple, str]]:
    """``[(subcommand path, option), ...]`` of every option that takes one value, in every (nested) subcommand."""
    found = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                found.extend(_single_value_options(sub, (*path, name)))
        elif action.option_strings and action.nargs is None and action.option_strings[0].startswith("--"):
            found.append((path, action.option_strings[0]))
    return found


@pytest.mark.parametrize("value", ["-1e9", "-5,1e9", "-.5", "-3"])
def test_a_negative_number_is_the_value_of_every_option(value, capsys):
    """``--beta -1e9``, ``--alphas -5,1e9``, ``--noise-snr-db -5,10`` ...: argparse took a value like ``-1e9`` for an
    option ("expected one argument"). Every option of every subcommand now takes it as its value (the option's own
    type may still refuse it, naming the option)."""
    from adaptspeech.cli import build_parser

    options = _single_value_options(build_parser())
    assert ((), "--version") not in options and (("lm", "tune"), "--alphas") in options and len(options) > 30
    for path, option in options:
        with contextlib.suppress(SystemExit):  # a value the option's type refuses, or missing required options
            build_parser().parse_args([*path, option, value])
        err = capsys.readouterr().err
        assert "expected one argument" not in err, (path, option, err)


@pytest.mark.parametrize(
    ("argv", "attribute", "expected"),
    [
        (["evaluate", "--model", "m", "--data", "d", "--lm", "l", "--beta", "-1e9"], "beta", -1e9),
        (["transcribe", "--model", "m", "x.wav", "--alpha", "-.5"], "alpha", -0.5),
        (["lm", "tune", "--model", "m", "--data", "d", "--lm", "l", "--alphas", "-5,1e9"], "alphas", [-5.0, 1e9]),
        (["prepare", "synthetic", "--out", "o", "--languages", "ro", "--noise-snr-db", "-5,10"], "noise_snr_db",
         (-5.0, 10.0)),
    ],
)
def test_negative_values_are_parsed(argv, attribute, expected):
    from adaptspeech.cli import build_parser

    assert getattr(build_parser().parse_args(argv), attribute) == expected


# ---- transcribe: file names and standard input ---------------------------------------------------------------------


def _random_fbank_model(folder: Path) -> Path:
    """A tiny random fbank CTC model with its processor (its text is a guess, but a fixed one)."""
    from adaptspeech import AdaptSpeechForCTC
    from adaptspeech.data.processor import build_processor
    from adaptspeech.data.text import build_vocab
    from adaptspeech.testing import tiny_config

    vocab = build_vocab(["abc def", "ghi jkl"])
    build_processor(vocab, folder, feature_type="fbank", n_mels=16)
    torch.manual_seed(0)
    AdaptSpeechForCTC(tiny_config("fbank_conformer", vocab_size=len(vocab))).save_pretrained(folder)
    return folder


def _chirp(seconds: float = 1.0) -> np.ndarray:
    t = np.arange(int(seconds * 16000)) / 16000
    return (0.3 * np.sin(2 * np.pi * (200 + 300 * t) * t)).astype(np.float32)


def test_transcribe_escapes_tabs_and_newlines_in_file_names(tmp_path, capfd):
    """``PATH<TAB>TEXT`` broke for a file name holding a tab or a newline: backslash, tab, newline and carriage
    return are written as ``\\\\``, ``\\t``, ``\\n``, ``\\r`` (in the stderr lines too), one line per file."""
    model = _random_fbank_model(tmp_path / "model")
    paths = [tmp_path / name for name in ("tab\there.wav", "new\nline.wav", "back\\slash\r.wav", "plain.wav")]
    for path in paths:
        sf.write(path, _chirp(), 16000)
    code, out, err = run_main(["transcribe", "--model", model, *paths, tmp_path / "gone\nmissing.wav",
                               "--no-progress", "--device", "cpu"], capfd)
    assert code == 1
    lines = out.split("\n")
    assert lines[-1] == "" and len(lines) == 5 and all(line.count("\t") == 1 for line in lines[:-1])
    fields = [line.split("\t") for line in lines[:-1]]
    assert [field[0] for field in fields] == [f"{tmp_path}/tab\\there.wav", f"{tmp_path}/new\\nline.wav",
                                              f"{tmp_path}/back\\\\slash\\r.wav", f"{tmp_path}/plain.wav"]
    assert [field[0].encode().decode("unicode_escape") for field in fields] == [str(p) for p in paths]
    assert len({field[1] for field in fields}) == 1  # the same audio, the same text
    assert err == f"adaptspeech: error: {tmp_path}/gone\\nmissing.wav: missing (no such file)\n"


def test_transcribe_reads_standard_input(tmp_path, capfd, monkeypatch):
    """``cat x.wav | adaptspeech transcribe /dev/stdin`` said "missing (no such file)": ``-`` and ``/dev/stdin`` (a
    pipe) read the audio from standard input and give the file's text."""
    import io
    import subprocess
    import sys

    from helpers.cli import subprocess_env

    model = _random_fbank_model(tmp_path / "model")
    clip = tmp_path / "x.wav"
    sf.write(clip, _chirp(), 16000)
    code, out, _ = run_main(["transcribe", "--model", model, clip, "--no-progress", "--device", "cpu"], capfd)
    text = out.split("\t")[1]
    assert code == 0 and out == f"{clip}\t{text}"
    monkeypatch.setattr(sys, "stdin", SimpleNamespace(buffer=io.BytesIO(clip.read_bytes())))
    code, out, err = run_main(["transcribe", "--model", model, "-", "--no-progress", "--device", "cpu"], capfd)
    assert (code, out, err) == (0, f"-\t{text}", "")
    monkeypatch.setattr(sys, "stdin", SimpleNamespace(buffer=io.BytesIO(b"")))
    code, out, err = run_main(["transcribe", "--model", model, "-", "--no-progress", "--device", "cpu"], capfd)
    assert (code, out, err) == (1, "", "adaptspeech: error: -: empty (zero bytes)\n")
    code, out, err = run_main(["transcribe", "--model", model, "-", clip, "/dev/stdin", "--device", "cpu"], capfd)
    assert (code, out) == (1, "") and err == ("adaptspeech: error: AUDIO '-' and '/dev/stdin': standard input can be "
                                              "read once; give it once\n")
    piped = subprocess.run([sys.executable, "-m", "adaptspeech.cli", "transcribe", "--model", str(model),
                            "/dev/stdin", "--no-progress", "--device", "cpu"], input=clip.read_bytes(),
                           capture_output=True, env=subprocess_env(), timeout=120)
    assert piped.returncode == 0, piped.stderr.decode()
    assert piped.stdout.decode() == f"/dev/stdin\t{text}"
