"""The exported graph computes what PyTorch computes, at any batch and length: onnxruntime's logits against the
model's own (the feature extractor's per-utterance normalisation, then the padded batch with its mask) at five lengths
from 1 s to 30 s one at a time and in a padded batch of three, for every backbone, with a language adapter or the
SimAdapter fusion.

Tolerance: max |difference| <= 1e-4 on the real frames (the target of docs/export.md): the graph computes the same
float32 operations as eager PyTorch, in another order (onnxruntime's kernels, fused LayerNorm / GELU), measured at
2e-5 and below on these models; a frozen length, a wrong mask or a wrong adapter moves logits by 1e-2 or more."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
import torch
from helpers.export_models import routed_for_export
from helpers.int8 import INT8_BOUND, INT8_KERNEL_TOLERANCE

from adaptspeech.export.graph import ExportableCTC, eager_attention, export_graph
from adaptspeech.export.quantize import exact_integer_graph, quantize_int8
from adaptspeech.modeling import AdaptSpeechForCTC
from adaptspeech.runtime.features import normalize_utterance
from adaptspeech.testing.tiny_models import FRONT_END_320X, tiny_config

TOLERANCE = 1e-4
SECONDS = (1.0, 2.5, 5.0, 12.0, 30.0)

BACKBONES = {
    "wav2vec2 post-LN": ("wav2vec2", False),
    "wav2vec2 stable-LN": ("wav2vec2", True),
    "wav2vec2-conformer": ("wav2vec2_conformer", False),
    "fbank Conformer + fusion": ("fbank_conformer", False),
}


def _model(backbone: str, stable: bool) -> AdaptSpeechForCTC:
    overrides = {} if backbone == "fbank_conformer" else FRONT_END_320X
    config = tiny_config(backbone, stable_layer_norm=stable, adapter_languages=["ro", "cs"],
                         backbone_overrides=overrides)
    torch.manual_seed(0)
    model = AdaptSpeechForCTC(config).eval()
    return routed_for_export(model, fusion=backbone == "fbank_conformer")  # non-zero adapters: a wrong routing shows


def _inputs(model: AdaptSpeechForCTC, seconds: list[float], seed: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    framed = model.main_input_name == "input_features"
    units = [int(s * (100 if framed else 16000)) for s in seconds]
    return [rng.standard_normal((n, 16) if framed else n).astype(np.float32) * 0.3 + 0.1 for n in units]


def _torch_logits(model: AdaptSpeechForCTC, rows: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """The PyTorch path: each row normalised alone, then padded with zeros and masked (as the collator does)."""
    longest = max(len(r) for r in rows)
    batch = np.zeros((len(rows), longest, *rows[0].shape[1:]), np.float32)
    mask = np.zeros((len(rows), longest), bool)
    for i, row in enumerate(rows):
        batch[i, : len(row)] = normalize_utterance(row)
        mask[i, : len(row)] = True
    with torch.no_grad():
        out = model(**{model.main_input_name: torch.from_numpy(batch)}, attention_mask=torch.from_numpy(mask))
    return out.logits.numpy(), out.frame_lengths.numpy()


def _onnx_logits(session: ort.InferenceSession, rows: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    longest = max(len(r) for r in rows)
    batch = np.zeros((len(rows), longest, *rows[0].shape[1:]), np.float32)
    for i, row in enumerate(rows):
        batch[i, : len(row)] = row
    lengths = np.array([len(r) for r in rows], np.int64)
    return tuple(session.run(None, {"x": batch, "x_lengths": lengths}))


@pytest.fixture(scope="module", params=list(BACKBONES), ids=list(BACKBONES))
def exported(request, tmp_path_factory):
    backbone, stable = BACKBONES[request.param]
    model = _model(backbone, stable)
    module = ExportableCTC(model, normalize=True).eval()
    example = tuple(torch.from_numpy(a) for a in _onnx_inputs(_inputs(model, [0.5, 0.3], seed=9)))
    path = tmp_path_factory.mktemp("graph") / "model.onnx"
    with eager_attention(model):
        export_graph(module, example, path)
    return model, ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]), path


def _onnx_inputs(rows: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    longest = max(len(r) for r in rows)
    batch = np.zeros((len(rows), longest, *rows[0].shape[1:]), np.float32)
    for i, row in enumerate(rows):
        batch[i, : len(row)] = row
    return batch, np.array([len(r) for r in rows], np.int64)


def _max_difference(actual: tuple[np.ndarray, np.ndarray], expected: tuple[np.ndarray, np.ndarray]) -> float:
    np.testing.assert_array_equal(actual[1], expected[1])  # the same real frames per row
    assert actual[0].shape == expected[0].shape
    return max(float(np.abs(actual[0][i, :n] - expected[0][i, :n]).max()) for i, n in enumerate(expected[1]))


def test_one_utterance_at_five_lengths(exported):
    model, session, _ = exported
    for seconds in SECONDS:
        rows = _inputs(model, [seconds], seed=int(seconds * 10))
        assert _max_difference(_onnx_logits(session, rows), _torch_logits(model, rows)) <= TOLERANCE, seconds


def test_a_padded_batch_of_three(exported):
    model, session, _ = exported
    rows = _inputs(model, [5.0, 3.7, 1.0], seed=3)
    assert _max_difference(_onnx_logits(session, rows), _torch_logits(model, rows)) <= TOLERANCE


def test_a_row_fed_alone_without_lengths_is_the_whole_row(exported):
    """sherpa-onnx feeds ``x`` alone: the stored ``x_lengths`` default (-1) means the whole row."""
    model, session, _ = exported
    rows = _inputs(model, [2.0], seed=5)
    alone = session.run(None, {"x": rows[0][None]})
    np.testing.assert_array_equal(alone[0], _onnx_logits(session, rows)[0])


def test_the_int8_graph_runs_and_stays_near_the_float_graph(exported, tmp_path):
    """int8 weights (dynamic quantisation of the MatMul weights, activations quantised per call) move the logits by
    the rounding of weights and activations, and by nothing else on any CPU: the int8 graph computes its exact integer
    sums (8-bit weights on an x86 CPU without VNNI did not: 0.23 to 1.1 of the logits' spread), and the exact integer
    graph, float arithmetic on the rounded integers and so the same on every CPU, stays near the float graph (the
    bounds and their reasons: tests/helpers/int8.py). The fusion's score projections (a [N, D, 1] and a [D] weight)
    stay float: onnxruntime's per-channel MatMulInteger cannot run a B that is not a matrix (the fusion's int8 graph
    failed at its first call)."""
    model, session, path = exported
    int8_path = quantize_int8(path, tmp_path / "model.int8.onnx")
    int8 = ort.InferenceSession(str(int8_path), providers=["CPUExecutionProvider"])
    exact = ort.InferenceSession(str(exact_integer_graph(int8_path, tmp_path / "exact.onnx")),
                                 providers=["CPUExecutionProvider"])
    rows = _inputs(model, [2.5, 1.0], seed=4)
    expected = _onnx_logits(session, rows)
    spread = max(float(expected[0][i, :n].std()) for i, n in enumerate(expected[1]))
    actual = _onnx_logits(int8, rows)
    assert _max_difference(actual, _onnx_logits(exact, rows)) <= INT8_KERNEL_TOLERANCE * spread
    assert _max_difference(actual, expected) <= INT8_BOUND * spread
