"""The int8 formats of :mod:`adaptspeech.export.quantize`: an unknown one is refused in one line before anything is
read or written (the formats' logits: tests/export/test_export_graph.py)."""

from __future__ import annotations

import pytest

from adaptspeech.export import ExportError, export_model
from adaptspeech.export.quantize import quantize_int8


def test_an_unknown_int8_format_is_refused_before_any_work(tmp_path):
    with pytest.raises(ValueError, match="int8 format 'u4': allowed values: u8s8_7bit, u8s8, u8u8"):
        quantize_int8(tmp_path / "missing.onnx", tmp_path / "out.onnx", "u4")
    with pytest.raises(ExportError, match="int8 format u4: allowed values: u8s8_7bit, u8s8, u8u8"):
        export_model(tmp_path / "no-model", tmp_path / "out", quantize="int8", int8_format="u4")
    assert sorted(p.name for p in tmp_path.iterdir()) == []
