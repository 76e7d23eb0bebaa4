"""ONNX graph of a w2v-BERT 2.0 model (one language's adapter, or the SimAdapter fusion): dynamic batch and length,
logits equal to PyTorch's, int8; the folder export (the torch-free runtime's front end) is refused in one line."""

import numpy as np
import onnxruntime as ort
import pytest
import torch
from helpers.export_models import routed_for_export

from adaptspeech.data.feature_types import StackedFbankFeatures
from adaptspeech.export.exporter import ExportError, export_model
from adaptspeech.export.graph import ExportableCTC, eager_attention, export_graph
from adaptspeech.export.quantize import quantize_int8
from adaptspeech.modeling import AdaptSpeechForCTC
from adaptspeech.testing import save_tiny_model, tiny_config

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


def test_the_folder_export_is_refused_naming_the_missing_runtime_front_end(tmp_path):
    folder = save_tiny_model(tmp_path / "model", backbone_type="wav2vec2_bert")
    with pytest.raises(ExportError, match=r"^the wav2vec2_bert backbone reads stacked_fbank features .* torch-free "
                                          r"runtime does not compute") as info:
        export_model(folder, tmp_path / "out", language="ro")
    assert "\n" not in str(info.value)
    assert not (tmp_path / "out").exists()
