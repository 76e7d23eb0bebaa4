"""The command line checks nothing the library checks: ``transcribe`` (PyTorch and ``--stream``) builds the library's
settings and prints the library's own refusal, one line; every command refuses a method its path does not serve with
the vocabulary's line."""

from __future__ import annotations

from pathlib import Path

import pytest
import soundfile as sf
from helpers.cli import one_error_line, run_main
from helpers.model_folders import audio, model_folder

from adaptspeech.cli.common import _load_model
from adaptspeech.inference.streaming.recognizer import StreamingRecognizer
from adaptspeech.inference.transcriber import LongFormSettings, check_transcription
from adaptspeech.runtime.decoding_methods import check_method


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("vocabulary_cli")
    model_folder(root / "model", languages=("ro",))
    sf.write(root / "clip.wav", audio(1.5), 16000)
    return root / "model", root / "clip.wav"


def library_error(call) -> str:
    with pytest.raises(ValueError) as caught:
        call()
    return str(caught.value)


@pytest.mark.parametrize(("options", "settings"), [
    (["--timestamps", "word", "--method", "ctc_beam"], dict(method="ctc_beam", timestamps="word")),
    (["--confidence", "--method", "ctc_beam"], dict(method="ctc_beam", confidence=True)),
    (["--chunk-length", "4", "--stride-length", "2"], dict(method="ctc_greedy", chunk_length_s=4, stride_length_s=2)),
])
def test_transcribe_prints_the_librarys_refusal(folder, options, settings, capsys) -> None:
    model_dir, clip = folder
    code, out, err = run_main(["transcribe", "--model", model_dir, *options, "--no-progress", clip], capsys)
    model, _ = _load_model(str(model_dir))
    long_form = LongFormSettings(**{k: v for k, v in settings.items() if k.endswith("_s")})
    expected = library_error(lambda: check_transcription(
        model, settings["method"], long_form, settings.get("timestamps"), None, settings.get("confidence", False)))
    assert code == 1 and out == "" and one_error_line(err) == f"adaptspeech: error: {expected}"


def test_stream_prints_the_recognizers_refusal(folder, capsys) -> None:
    model_dir, clip = folder
    code, _, err = run_main(["transcribe", "--stream", "--model", model_dir, "--method", "joint", clip], capsys)
    model, processor = _load_model(str(model_dir))
    expected = library_error(lambda: StreamingRecognizer(model, processor, method="joint"))
    assert code == 1 and one_error_line(err) == f"adaptspeech: error: --model {model_dir}: {expected}"


@pytest.mark.parametrize("command", [["transcribe"], ["transcribe", "--stream"]])
def test_an_lm_with_the_best_path_is_the_vocabularys_line_on_every_path(folder, command, capsys) -> None:
    """``--lm`` decodes with the prefix beam search (``ctc_beam``, the default with it) on every path; the PyTorch
    path took ``--method ctc_greedy --lm`` and ran the beam search under the best path's name."""
    model_dir, clip = folder
    code, _, err = run_main([*command, "--model", model_dir, "--method", "ctc_greedy", "--lm", "nowhere", clip],
                            capsys)
    expected = library_error(lambda: check_method("ctc_greedy", "pytorch", lm=True))
    assert code == 1 and one_error_line(err).endswith(expected)
