"""``adaptspeech`` where only the ``runtime`` extra is installed: the parser builds and ``transcribe --onnx`` runs
without importing PyTorch (or any other dependency outside the extra) and prints the PyTorch path's text; the other
subcommands stop with one line naming what to install."""

from __future__ import annotations

import pytest
import soundfile as sf
from helpers.cli import one_error_line, run_main
from helpers.model_folders import audio, model_folder
from helpers.without_torch import outside_the_runtime_extra, run_without

from adaptspeech.cli import main
from adaptspeech.runtime.command import unescape_field

MAIN = "from adaptspeech.cli import main\ncode = main(sys.argv[1:])\n"


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """A tiny fbank model with ro / cs adapters, its ro adapter exported, and three wav files."""
    root = tmp_path_factory.mktemp("no_torch")
    model_folder(root / "model")
    assert main(["export", "--model", str(root / "model"), "--language", "ro", "--out", str(root / "onnx")]) == 0
    wavs = []
    for i, seconds in enumerate((1.3, 0.7, 2.1)):
        sf.write(root / f"clip{i}.wav", audio(seconds, seed=i), 16000)
        wavs.append(str(root / f"clip{i}.wav"))
    return root, wavs


def _texts(stdout: str) -> list[str]:
    return [unescape_field(line.split("\t")[1]) for line in stdout.splitlines()]


def test_transcribe_onnx_runs_with_the_runtime_extra_alone(exported, capsys):
    root, wavs = exported
    done = run_without(outside_the_runtime_extra(), MAIN,
                       ["transcribe", "--onnx", root / "onnx", "--precision", "fp32", *wavs])
    assert done.returncode == 0, done.stderr
    code, out, _ = run_main(["transcribe", "--model", root / "model", "--language", "ro", *wavs], capsys)
    assert code == 0
    assert any(_texts(out)), "the random model decodes to text"
    assert _texts(done.stdout) == _texts(out)


def test_every_subcommands_help_builds_without_torch():
    body = (
        "from adaptspeech.cli import build_parser\n"
        "parser = build_parser()\n"
        "commands = list(parser._subparsers._group_actions[0].choices)\n"
        "for command in commands:\n"
        "    try:\n"
        "        parser.parse_args([command, '--help'])\n"
        "    except SystemExit:\n"
        "        pass\n"
        "print(len(commands))\n"
        "code = 0\n"
    )
    done = run_without(outside_the_runtime_extra(), body)
    assert done.returncode == 0, done.stderr
    assert int(done.stdout.splitlines()[-1]) >= 10


@pytest.mark.parametrize("argv", [["train", "--config", "stage.yaml"], ["transcribe", "--model", "m", "clip.wav"]])
def test_a_subcommand_that_needs_torch_says_what_to_install(argv):
    done = run_without(outside_the_runtime_extra(), MAIN, argv)
    assert done.returncode == 1
    line = one_error_line(done.stderr)
    assert f"`adaptspeech {argv[0]}` needs PyTorch" in line and "pip install adaptspeech`" in line
    assert "adaptspeech[runtime]" in line and "transcribe --onnx" in line


def test_transcribe_onnx_imports_no_torch_where_torch_is_installed(exported):
    """The ONNX path never waits for PyTorch's start-up, also on a machine that has it (found: the package's eager
    ``__init__`` imported torch, transformers and peft before the parser was built)."""
    root, wavs = exported
    body = MAIN + (
        "heavy = sorted({'torch', 'transformers', 'peft'} & set(sys.modules))\n"
        "if heavy:\n"
        "    print('imported:', heavy, file=sys.stderr)\n"
        "    code = 4\n"
    )
    done = run_without((), body, ["transcribe", "--onnx", root / "onnx", "--precision", "fp32", *wavs])
    assert done.returncode == 0, done.stderr
    assert len(done.stdout.splitlines()) == len(wavs)
