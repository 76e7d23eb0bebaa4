"""int8 weights for an exported graph: onnxruntime's dynamic quantisation of the MatMul / Gemm weights (the linear
layers: attention projections, feed-forward blocks, adapters, the CTC head), activations quantised per call.

The convolutions (wav2vec2's feature encoder, the conformer's depthwise and subsampling convolutions) stay fp32:
dynamic quantisation of ``Conv`` needs ``ConvInteger``, which onnxruntime's CPU provider lacks for many shapes, and
static quantisation (calibrated activation ranges, QDQ ``Conv``) would need calibration audio and is not done here.
"""

from __future__ import annotations

import os
from pathlib import Path


def quantize_int8(source: str | os.PathLike, target: str | os.PathLike) -> Path:
    """Write ``target``: ``source`` with int8 MatMul / Gemm weights (per-channel, signed), fp32 elsewhere."""
    from onnxruntime.quantization import QuantType, quantize_dynamic

    quantize_dynamic(str(source), str(target), op_types_to_quantize=["MatMul", "Gemm"], per_channel=True,
                     weight_type=QuantType.QInt8)
    return Path(target)
