"""ONNX graph of a w2v-BERT 2.0 model (one language's adapter, or the SimAdapter fusion): dynamic batch and length,
logits equal to PyTorch's, int8; the exported folder on the torch-free runtime (its numpy stacked-filterbank front end):
``OnnxRecognizer`` and ``transcribe --onnx`` give PyTorch's logits and texts."""

import json

import numpy as np
import onnxruntime as ort
import pytest
import soundfile as sf
import torch
from helpers.cli import run_main
from helpers.export_models import routed_for_export
from helpers.model_folders import audio, model_folder, onnx_splits_as_pytorch, synthetic_recording

from adaptspeech.cli import main
from adaptspeech.cli.common import _load_model
from adaptspeech.data.feature_types import StackedFbankFeatures
from adaptspeech.export.graph import ExportableCTC, eager_attention, export_graph
from adaptspeech.export.quantize import quantize_int8
from adaptspeech.modeling import AdaptSpeechForCTC
from adaptspeech.runtime import OnnxRecognizer
from adaptspeech.runtime.audio import load_audio
from adaptspeech.runtime.command import unescape_field
from adaptspeech.runtime.folder import ExportFolderError
from adaptspeech.runtime.sherpa import sherpa_transcribe
from adaptspeech.testing import tiny_config

TOLERANCE = 1e-4


def _model(fusion: bool) -> AdaptSpeechForCTC:
    torch.manual_seed(0)
    model = AdaptSpeechForCTC(tiny_config("wav2vec2_bert", adapter_languages=["ro", "cs"])).eval()
    return routed_for_export(model, fusion)  # non-zero adapters: a wrong routing must show


def _rows(seconds: list[float], seed: int) -> list[np.ndarray]:
    """The features of noise clips, as the stacked_fbank type computes them (normalised, 50 units a second)."""
    rng = np.random.default_rng(seed)
    features = StackedFbankFeatures()
    return [features.extract((0.1 * rng.standard_normal(int(s * 16000))).astype(np.float32)) for s in seconds]


def _batch(rows: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    batch = np.zeros((len(rows), max(len(r) for r in rows), rows[0].shape[1]), np.float32)
    for i, row in enumerate(rows):
        batch[i, : len(row)] = row
    return batch, np.array([len(r) for r in rows], np.int64)


def _max_difference(session: ort.InferenceSession, model: AdaptSpeechForCTC, rows: list[np.ndarray]) -> float:
    x, lengths = _batch(rows)
    logits, frames = session.run(None, {"x": x, "x_lengths": lengths})
    mask = np.arange(x.shape[1])[None] < lengths[:, None]
    with torch.no_grad():
        expected = model(input_features=torch.from_numpy(x), attention_mask=torch.from_numpy(mask)).logits.numpy()
    np.testing.assert_array_equal(frames, lengths)  # one encoder frame per stacked feature frame
    return max(float(np.abs(logits[i, :n] - expected[i, :n]).max()) for i, n in enumerate(lengths))


@pytest.fixture(scope="module", params=[False, True], ids=["adapter", "fusion"])
def exported(request, tmp_path_factory):
    model = _model(request.param)
    module = ExportableCTC(model, normalize=False).eval()  # the features arrive normalised and stacked
    path = tmp_path_factory.mktemp("graph") / "model.onnx"
    example = tuple(torch.from_numpy(a) for a in _batch(_rows([0.6, 0.4], seed=9)))
    with eager_attention(model):
        export_graph(module, example, path)
    return model, ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]), path


def test_graph_logits_equal_pytorch_for_other_batches_and_lengths(exported):
    model, session, _ = exported
    assert _max_difference(session, model, _rows([2.5], seed=1)) <= TOLERANCE
    assert _max_difference(session, model, _rows([3.0, 1.7, 0.5], seed=2)) <= TOLERANCE


def test_the_int8_graph_runs_and_stays_near_the_float_graph(exported, tmp_path):
    _, session, path = exported
    int8 = ort.InferenceSession(str(quantize_int8(path, tmp_path / "model.int8.onnx")),
                                providers=["CPUExecutionProvider"])
    x, lengths = _batch(_rows([2.0, 1.0], seed=4))
    expected, _ = session.run(None, {"x": x, "x_lengths": lengths})
    got, _ = int8.run(None, {"x": x, "x_lengths": lengths})
    spread = max(float(expected[i, :n].std()) for i, n in enumerate(lengths))
    difference = max(float(np.abs(got[i, :n] - expected[i, :n]).max()) for i, n in enumerate(lengths))
    assert 0 < difference <= 0.2 * spread


SECONDS = (1.3, 0.7, 2.1)


@pytest.fixture(scope="module")
def folder_export(tmp_path_factory):
    """``adaptspeech export`` of a tiny w2v-BERT model folder's ro adapter (int8 too), and three wav clips."""
    root = tmp_path_factory.mktemp("w2v_bert_export")
    model_folder(root / "model", backbone="wav2vec2_bert")
    assert main(["export", "--model", str(root / "model"), "--language", "ro", "--out", str(root / "onnx"),
                 "--quantize", "int8"]) == 0
    for i, seconds in enumerate(SECONDS):
        sf.write(root / f"clip{i}.wav", audio(seconds, seed=i), 16000, subtype="FLOAT")
    return root


def test_the_folder_says_the_runtime_normalises_the_stacked_units(folder_export):
    settings = json.loads((folder_export / "onnx" / "adaptspeech_export.json").read_text())
    feature = settings["feature"]
    assert (feature["type"], feature["n_mels"], feature["feature_size"]) == ("stacked_fbank", 80, 160)
    assert (feature["unit_window"], feature["unit_hop"], feature["samples_per_frame"]) == (560, 320, 320)
    assert feature["do_normalize"] and not settings["graph"]["normalizes_input"]


def test_the_runtime_gives_pytorchs_logits_for_a_padded_batch(folder_export):
    root = folder_export
    waveforms = [audio(s, seed=i) for i, s in enumerate(SECONDS)]
    recognizer = OnnxRecognizer(root / "onnx", precision="fp32")
    logits, frames = recognizer.logits(waveforms)
    model, processor = _load_model(str(root / "model"))
    model.set_target_language("ro")
    batch = processor.feature_extractor(waveforms, sampling_rate=16000, return_tensors="pt")  # transformers' own
    with torch.no_grad():
        expected = model(**batch).logits.numpy()
    np.testing.assert_array_equal(frames, batch["attention_mask"].sum(1).numpy())
    assert max(float(np.abs(logits[i, :n] - expected[i, :n]).max()) for i, n in enumerate(frames)) <= TOLERANCE


def test_onnx_transcripts_are_pytorchs(folder_export, capsys):
    root = folder_export
    wavs = [root / f"clip{i}.wav" for i in range(len(SECONDS))]
    code, out, err = run_main(["transcribe", "--model", root / "model", "--language", "ro", *wavs, "--no-progress"],
                              capsys)
    assert code == 0, err
    expected = [unescape_field(line.split("\t")[1]) for line in out.splitlines()]
    assert all(expected), "the random model decodes to text"
    recognizer = OnnxRecognizer(root / "onnx", precision="fp32")
    assert [r.text for r in recognizer.transcribe(wavs, batch_size=3)] == expected
    code, out, err = run_main(["transcribe", "--onnx", root / "onnx", "--precision", "fp32", *wavs], capsys)
    assert code == 0, err
    assert [unescape_field(line.split("\t")[1]) for line in out.splitlines()] == expected
    int8 = OnnxRecognizer(root / "onnx").transcribe(wavs)  # the folder's default: int8 weights
    assert [len(r.label_ids) > 0 for r in int8] == [True] * len(wavs)


def test_a_long_recording_is_split_at_pauses_as_pytorch_splits_it(folder_export, tmp_path):
    """Seven synthetic clips joined by digital silence, longer than one call of 8 s: each speech region one graph
    call, its stacked filterbank computed again from its own samples and normalised over them (as the PyTorch path
    reads an utterance next to digital silence), the pauses blank with a word boundary: PyTorch's text."""
    onnx_splits_as_pytorch(folder_export, load_audio(synthetic_recording(tmp_path), 16000), 8.0, 2.0)


def test_sherpa_onnx_is_refused_naming_the_feature_type(folder_export):
    """sherpa-onnx's wav2vec2-family entry point would feed the graph the waveform (docs/w2v_bert.md)."""
    with pytest.raises(ExportFolderError, match=r"a stacked_fbank model; sherpa-onnx's wav2vec2-family entry point "
                                                r"runs waveform models only"):
        sherpa_transcribe(folder_export / "onnx", [audio(1.0)])
