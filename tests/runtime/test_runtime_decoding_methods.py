"""The one decoding vocabulary: each path lists exactly the methods that serve it, the registry and the runtime read
the same table, a method a path does not serve is refused in one line naming the path, and the ONNX path's former
``--decoder`` still works as a deprecated alias of ``--method`` / ``--lm``."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers.cli import one_error_line, run_main
from helpers.model_folders import audio, model_folder

from adaptspeech.cli import main
from adaptspeech.decoding.registry import DECODING_METHODS, DecodingMethod, method_names, register_decoding_method
from adaptspeech.inference.streaming.recognizer import STREAMING_METHODS
from adaptspeech.runtime import OnnxRecognizer
from adaptspeech.runtime import command as runtime_command
from adaptspeech.runtime.decoding_methods import (
    DECODING_PATHS,
    METHOD_PATHS,
    check_method,
    methods_for,
    resolve_method,
)


def test_each_path_lists_exactly_the_methods_that_serve_it() -> None:
    assert methods_for("pytorch") == ("ctc_greedy", "ctc_beam", "attention_greedy", "attention_beam", "joint")
    assert methods_for("streaming") == ("ctc_greedy", "ctc_beam") == STREAMING_METHODS
    assert methods_for("onnx") == ("ctc_greedy", "ctc_beam")


def test_the_registry_and_the_runtime_read_one_table() -> None:
    assert method_names() == tuple(METHOD_PATHS) == methods_for("pytorch")
    for path in DECODING_PATHS:
        assert tuple(name for name in method_names() if path in DECODING_METHODS.get(name).paths) == methods_for(path)
    with pytest.raises(ValueError, match=r"'ctc_new': add it to adaptspeech\.runtime\.decoding_methods\.METHOD_PATHS"):
        register_decoding_method(DecodingMethod("ctc_new", lambda inputs: [], frozenset({"ctc"})))
    assert "ctc_new" not in DECODING_METHODS


@pytest.mark.parametrize(("method", "path", "lm", "message"), [
    ("joint", "onnx", False, "--method joint: not served by the ONNX runtime (transcribe --onnx), which serves: "
     "ctc_greedy, ctc_beam"),
    ("attention_beam", "streaming", False, "--method attention_beam: not served by streaming (transcribe --stream), "
     "which serves: ctc_greedy, ctc_beam"),
    ("beam", "pytorch", False, "--method beam (no such method): not served by the PyTorch path (transcribe --model, "
     "evaluate), which serves: ctc_greedy, ctc_beam, attention_greedy, attention_beam, joint"),
    ("ctc_greedy", "onnx", True, "--method ctc_greedy: --lm needs the prefix beam search (--method ctc_beam, the "
     "default with it)"),
])
def test_a_method_a_path_does_not_serve_is_one_line(method: str, path: str, lm: bool, message: str) -> None:
    with pytest.raises(ValueError) as caught:
        check_method(method, path, lm=lm)
    assert str(caught.value) == message


def test_the_default_method_is_the_beam_search_with_an_lm() -> None:
    assert resolve_method(None, "onnx") == "ctc_greedy"
    assert resolve_method(None, "streaming", lm=True) == "ctc_beam"
    assert resolve_method(None, "pytorch", default="attention_beam") == "attention_beam"


@pytest.mark.parametrize("argv", [
    ["transcribe", "--onnx", "nowhere", "--method", "joint", "clip.wav"],
    ["transcribe", "--onnx", "nowhere", "--method", "ctc_greedy", "--lm", "lm", "clip.wav"],
])
def test_the_onnx_path_refuses_a_method_before_reading_its_folder(argv: list[str], capsys) -> None:
    code, out, err = run_main(argv, capsys)
    method = argv[argv.index("--method") + 1]
    with pytest.raises(ValueError) as caught:
        resolve_method(method, "onnx", lm="--lm" in argv)
    assert code == 1 and out == "" and one_error_line(err) == f"adaptspeech: error: {caught.value}"


def test_the_runtime_command_refuses_a_method_of_another_path(capsys) -> None:
    assert runtime_command.main(["--onnx", "nowhere", "--method", "attention_beam", "clip.wav"]) == 1
    assert capsys.readouterr().err == ("python -m adaptspeech.runtime: error: --method attention_beam: not served by "
                                       "the ONNX runtime (transcribe --onnx), which serves: ctc_greedy, ctc_beam\n")


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("vocabulary")
    model_folder(root / "model", languages=("ro",))
    assert main(["export", "--model", str(root / "model"), "--language", "ro", "--out", str(root / "onnx")]) == 0
    import soundfile as sf

    clip = root / "clip.wav"
    sf.write(clip, audio(1.5), 16000)
    return root / "onnx", clip


@pytest.mark.parametrize(("decoder", "method"), [("greedy", "ctc_greedy"), ("beam", "ctc_beam")])
def test_the_deprecated_decoder_option_is_the_method_it_names(exported, decoder: str, method: str, capsys) -> None:
    onnx, clip = exported
    code, expected, err = run_main(["transcribe", "--onnx", onnx, "--method", method, clip], capsys)
    assert code == 0 and err == ""
    code, out, err = run_main(["transcribe", "--onnx", onnx, "--decoder", decoder, clip], capsys)
    assert code == 0 and out == expected
    assert err == f"adaptspeech: warning: --decoder is deprecated; use --method {method}\n"
    with pytest.warns(FutureWarning, match=rf"decoder={decoder!r}\) is deprecated: use method={method!r}"):
        recognizer = OnnxRecognizer(onnx, decoder=decoder)
    assert recognizer.method == method
    code, _, err = run_main(["transcribe", "--onnx", onnx, "--decoder", decoder, "--method", method, clip], capsys)
    assert code == 1 and one_error_line(err) == (f"adaptspeech: error: --decoder {decoder} and --method {method}: give "
                                                 "--method alone (--decoder is deprecated)")
