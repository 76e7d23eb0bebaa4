"""Export a language of an adaptspeech CTC model (its adapter or the SimAdapter fusion) to ONNX, optionally with int8
weights, for onnxruntime, :class:`adaptspeech.runtime.OnnxRecognizer` (no PyTorch) and sherpa-onnx
(``docs/export.md``)."""

from .exporter import (
    EXPORTABLE_ATTENTION,
    UNEXPORTABLE_ATTENTION,
    ExportError,
    ExportResult,
    check_exportable,
    choose_language,
    export_model,
)

__all__ = [
    "EXPORTABLE_ATTENTION",
    "UNEXPORTABLE_ATTENTION",
    "ExportError",
    "ExportResult",
    "check_exportable",
    "choose_language",
    "export_model",
]
