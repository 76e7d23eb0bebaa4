"""Every attention kind the exporter accepts (:data:`adaptspeech.export.EXPORTABLE_ATTENTION`) gives PyTorch's logits
in onnxruntime at two lengths in a padded batch (the kind swapped into layer 1 of a tiny fbank Conformer); the others
are refused (tests/export/test_export_reliability.py). Tolerance 1e-4 max abs, as tests/export/test_export_graph.py
states (measured below 1e-6 here)."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
import torch

from adaptspeech.attention.registry import ATTENTION
from adaptspeech.export import EXPORTABLE_ATTENTION, UNEXPORTABLE_ATTENTION
from adaptspeech.export.graph import ExportableCTC, eager_attention, example_inputs, export_graph
from adaptspeech.modeling import AdaptSpeechForCTC
from adaptspeech.testing.tiny_models import tiny_config

TOLERANCE = 1e-4


def test_every_registered_kind_is_either_exportable_or_refused_with_a_reason():
    assert set(EXPORTABLE_ATTENTION) | set(UNEXPORTABLE_ATTENTION) == set(ATTENTION.names())
    assert not set(EXPORTABLE_ATTENTION) & set(UNEXPORTABLE_ATTENTION)


@pytest.mark.parametrize("kind", EXPORTABLE_ATTENTION)
def test_an_exportable_kind_matches_pytorch(kind, tmp_path):
    _export_matches_pytorch({"kind": kind, "layers": [1]}, tmp_path)


@pytest.mark.parametrize("settings", [{"chunk_size": 4, "num_left_chunks": 2}, {"memory_efficient": True}])
def test_rel_pos_exports_with_chunk_masks_and_blockwise_settings(settings, tmp_path):
    """A streaming ``rel_pos`` (chunk masks) and one set to the blockwise path: the graph holds the full path, whose
    logits are PyTorch's (blockwise in PyTorch) to the same tolerance, at up to 62 output frames."""
    _export_matches_pytorch({"kind": "rel_pos", "layers": [1], **settings}, tmp_path)


@pytest.mark.parametrize(
    ("conv_lookahead", "attention"),
    [("chunk", {"kind": "rel_pos", "dynamic_chunks": True}), ("chunk", {"kind": "rel_pos", "chunk_size": 4}),
     (1, {"kind": "rel_pos", "dynamic_chunks": True})],
    ids=["chunk, full context", "chunk, attention.chunk_size 4", "look-ahead 1"],
)
def test_conformer_convolution_settings_export(conv_lookahead, attention, tmp_path):
    """The dynamic chunk convolution (the symmetric one at full context; the chunked one under a configured
    ``attention.chunk_size``) and a look-ahead convolution (kernel 7: 3 frames each side) give PyTorch's logits in
    onnxruntime."""
    _export_matches_pytorch(attention, tmp_path, {"conv_lookahead": conv_lookahead, "conv_depthwise_kernel_size": 7})


def _export_matches_pytorch(attention, tmp_path, backbone_overrides=None):
    """Export a tiny fbank Conformer with ``attention`` (and ``backbone_overrides``); its onnxruntime logits equal
    PyTorch's at 37 and 250 fbank frames, in a padded batch of three."""
    kind = attention["kind"]
    config = tiny_config("fbank_conformer", adapter_languages=["ro"], attention=attention,
                         backbone_overrides=backbone_overrides or {})
    torch.manual_seed(0)
    model = AdaptSpeechForCTC(config).eval()
    model.set_target_language("ro")
    module = ExportableCTC(model, normalize=False).eval()
    with eager_attention(model):
        export_graph(module, example_inputs(model, 16, 60), tmp_path / "model.onnx")
    session = ort.InferenceSession(str(tmp_path / "model.onnx"), providers=["CPUExecutionProvider"])
    for units in (37, 250):
        x, lengths = example_inputs(model, 16, units, batch=3)
        with torch.no_grad():
            expected, frames = module(x, lengths)
        logits, onnx_frames = session.run(None, {"x": x.numpy(), "x_lengths": lengths.numpy()})
        np.testing.assert_array_equal(onnx_frames, frames.numpy())
        for row, n in enumerate(frames.tolist()):
            assert np.abs(logits[row, :n] - expected[row, :n].numpy()).max() <= TOLERANCE, (kind, units)
