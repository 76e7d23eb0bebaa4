"""An exported folder end to end: ``adaptspeech export`` writes it, :class:`OnnxRecognizer` and ``adaptspeech
transcribe --onnx`` give the transcripts PyTorch gives, the int8 graph runs, the card parses back with
huggingface_hub, and the runtime transcribes in a subprocess where torch cannot be imported."""

from __future__ import annotations

import shutil

import numpy as np
import onnxruntime as ort
import pytest
import soundfile as sf
import torch
from helpers.cli import one_error_line, run_main
from helpers.int8 import INT8_BOUND, INT8_KERNEL_TOLERANCE
from helpers.model_folders import audio, model_folder, onnx_splits_as_pytorch, synthetic_recording
from helpers.without_torch import outside_the_runtime_extra, run_without

from adaptspeech.cli import main
from adaptspeech.cli.common import _load_model
from adaptspeech.export.quantize import exact_integer_graph
from adaptspeech.inference.transcriber import transcribe
from adaptspeech.runtime import OnnxRecognizer
from adaptspeech.runtime.audio import load_audio
from adaptspeech.runtime.command import unescape_field

SECONDS = (1.3, 0.7, 2.1)


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """A tiny fbank model with ro / cs adapters, its ro adapter exported with int8 weights, and three wav files."""
    root = tmp_path_factory.mktemp("export")
    model_folder(root / "model")
    assert main(["export", "--model", str(root / "model"), "--language", "ro", "--out", str(root / "onnx"),
                 "--quantize", "int8"]) == 0
    wavs = []
    for i, seconds in enumerate(SECONDS):
        sf.write(root / f"clip{i}.wav", audio(seconds, seed=i), 16000)
        wavs.append(str(root / f"clip{i}.wav"))
    return root, wavs


def _torch_texts(root, waveforms):
    model, processor = _load_model(str(root / "model"))
    model.set_target_language("ro")
    return [t.text for t in transcribe(model, processor, waveforms, method="ctc_greedy")]


def test_the_folder_holds_graphs_tokens_settings_and_a_card(exported):
    from huggingface_hub import ModelCard

    root, _ = exported
    names = {p.name for p in (root / "onnx").iterdir()}
    assert {"model.onnx", "model.int8.onnx", "tokens.txt", "adaptspeech_export.json", "README.md"} <= names
    card = ModelCard.load(root / "onnx" / "README.md")
    assert card.data.language == ["ro"]
    assert card.data.pipeline_tag == "automatic-speech-recognition"
    assert "onnx" in card.data.tags


def test_onnx_transcripts_are_pytorchs(exported):
    root, wavs = exported
    waveforms = [audio(s, seed=i) for i, s in enumerate(SECONDS)]
    expected = _torch_texts(root, waveforms)
    assert any(expected), "the random model decodes to text"
    recognizer = OnnxRecognizer(root / "onnx", precision="fp32")
    assert [r.text for r in recognizer.transcribe(wavs)] == expected
    assert [r.text for r in recognizer.transcribe(waveforms, batch_size=3)] == expected  # padded batch


def test_a_long_recording_is_split_at_pauses_as_pytorch_splits_it(exported, tmp_path):
    """Seven synthetic clips joined by digital silence, longer than one call of 8 s: each speech region one graph
    call, its fbank frames computed again from its own samples (as the PyTorch path reads an utterance next to
    digital silence), the pauses blank with a word boundary: PyTorch's text (tests/runtime/test_runtime_long_form.py:
    a recording longer than the graph covers)."""
    root, _ = exported
    onnx_splits_as_pytorch(root, load_audio(synthetic_recording(tmp_path), 16000), 8.0, 2.0)


def test_int8_graph_is_close_to_fp32(exported, tmp_path):
    """int8 weights change the logits (quantisation error), not the frames: the int8 graph computes its exact integer
    sums on this CPU (float rounding only; 8-bit weights on an x86 CPU without VNNI were off by 2.69, the logits'
    spread, here) and stays within the bound of tests/export/test_export_graph.py (0.2 of the float logits' spread;
    measured 0.14 with this model's large random head, the same on every CPU)."""
    root, _ = exported
    waveforms = [audio(1.0)]
    fp32, frames = OnnxRecognizer(root / "onnx", precision="fp32").logits(waveforms)
    recognizer = OnnxRecognizer(root / "onnx")
    int8, frames8 = recognizer.logits(waveforms)
    np.testing.assert_array_equal(frames, frames8)
    exact = ort.InferenceSession(str(exact_integer_graph(root / "onnx" / "model.int8.onnx", tmp_path / "exact.onnx")),
                                 providers=["CPUExecutionProvider"])
    features = recognizer.features(waveforms[0])[None]
    integer, _ = exact.run(None, {"x": features, "x_lengths": np.array([features.shape[1]], np.int64)})
    spread = float(fp32[0].std())
    assert np.abs(int8 - integer).max() <= INT8_KERNEL_TOLERANCE * spread
    assert 0 < np.abs(fp32 - int8).max() <= INT8_BOUND * spread


def test_int8_weights_fit_in_7_bits(exported):
    """No int8 weight beyond +-64: two uint8 x int8 products (2 x 255 x 64) fit the int16 sums of x86 CPUs without
    VNNI, which saturate with 8-bit weights (docs/export.md); on a CPU with VNNI nothing else would show it."""
    import onnx
    from onnx import TensorProto, numpy_helper

    graph = onnx.load(str(exported[0] / "onnx" / "model.int8.onnx")).graph
    weights = [numpy_helper.to_array(t) for t in graph.initializer if t.data_type == TensorProto.INT8]
    assert len(weights) >= 8
    assert max(int(np.abs(w.astype(np.int16)).max()) for w in weights) == 64


def test_transcribe_onnx_prints_the_recognizers_text(exported, capsys):
    root, wavs = exported
    code, out, _ = run_main(["transcribe", "--onnx", root / "onnx", "--precision", "fp32", *wavs], capsys)
    assert code == 0
    texts = [r.text for r in OnnxRecognizer(root / "onnx", precision="fp32").transcribe(wavs)]
    assert [unescape_field(line.split("\t")[1]) for line in out.splitlines()] == texts


def test_transcribe_needs_model_or_onnx(exported, capsys):
    root, wavs = exported
    code, _, err = run_main(["transcribe", "--model", root / "model", "--onnx", root / "onnx", wavs[0]], capsys)
    assert code == 1
    assert "--model DIR" in one_error_line(err) and "--onnx DIR" in one_error_line(err)


def test_the_runtime_runs_where_torch_cannot_be_imported(exported):
    root, wavs = exported
    body = "from adaptspeech.runtime.command import main\ncode = main(sys.argv[1:])\n"
    done = run_without(outside_the_runtime_extra(), body, ["--onnx", root / "onnx", "--precision", "fp32", *wavs])
    assert done.returncode == 0, done.stderr
    texts = [r.text for r in OnnxRecognizer(root / "onnx", precision="fp32").transcribe(wavs)]
    assert [unescape_field(line.split("\t")[1]) for line in done.stdout.splitlines()] == texts
    assert torch.__version__  # this process has torch: the subprocess did not


def test_a_joint_model_exports_its_ctc_branch(tmp_path):
    """``ctc_las``: the graph ends at the CTC logits (the LAS decoder is not exported); they are PyTorch's."""
    model_folder(tmp_path / "joint", head="ctc_las", languages=("ro",))
    assert main(["export", "--model", str(tmp_path / "joint"), "--out", str(tmp_path / "onnx")]) == 0
    model, processor = _load_model(str(tmp_path / "joint"))
    model.set_target_language("ro")
    waveforms = [audio(1.1, seed=4), audio(0.6, seed=5)]
    features = processor(waveforms, sampling_rate=16000, return_tensors="pt", padding=True)
    with torch.no_grad():
        out = model(**features)
    logits, frames = OnnxRecognizer(tmp_path / "onnx", precision="fp32").logits(waveforms)
    np.testing.assert_array_equal(frames, out.frame_lengths.numpy())
    for row, n in enumerate(frames.tolist()):  # tolerance: tests/export/test_export_graph.py
        assert np.abs(logits[row, :n] - out.logits[row, :n].numpy()).max() <= 1e-4


def test_the_model_folders_lm_travels_with_the_export(exported, tmp_path):
    """A model folder with an n-gram LM (``lm tune --save``'s layout) exports it; ``decoder="lm"`` decodes with it as
    the PyTorch path's LM decoder does on PyTorch's log-probabilities (``lm=`` the export folder; the deprecated
    ``decoder="lm"`` the same, with a warning)."""
    from helpers.lm import CORPUS

    from adaptspeech.lm.decoder import LMDecoder, build_decoder
    from adaptspeech.lm.processor import save_processor_with_lm

    root, _ = exported
    (tmp_path / "corpus.txt").write_text("\n".join(CORPUS) + "\n")
    assert main(["lm", "build", "--text", str(tmp_path / "corpus.txt"), "--out", str(tmp_path / "lm")]) == 0
    shutil.copytree(root / "model", tmp_path / "model")
    model, processor = _load_model(str(tmp_path / "model"))
    save_processor_with_lm(processor, build_decoder(processor.tokenizer, tmp_path / "lm"), tmp_path / "model")
    assert main(["export", "--model", str(tmp_path / "model"), "--language", "ro", "--out", str(tmp_path / "o")]) == 0
    assert (tmp_path / "o" / "language_model").is_dir() and (tmp_path / "o" / "alphabet.json").is_file()

    model.set_target_language("ro")
    reference = LMDecoder(build_decoder(processor.tokenizer, tmp_path / "model"))
    waveforms = [audio(s, seed=i) for i, s in enumerate(SECONDS)]
    expected = []
    for waveform in waveforms:
        with torch.no_grad():
            logits = model(**processor(waveform, sampling_rate=16000, return_tensors="pt")).logits
        expected.append(reference.decode(torch.log_softmax(logits[0], -1))[0])
    recognizer = OnnxRecognizer(tmp_path / "o", precision="fp32", lm=tmp_path / "o")
    assert recognizer.method == "ctc_beam"
    assert [r.text for r in recognizer.transcribe(waveforms)] == expected
    with pytest.warns(FutureWarning, match=r"decoder='lm'\) is deprecated: use method='ctc_beam', lm="):
        deprecated = OnnxRecognizer(tmp_path / "o", precision="fp32", decoder="lm")
    assert [r.text for r in deprecated.transcribe(waveforms)] == expected
