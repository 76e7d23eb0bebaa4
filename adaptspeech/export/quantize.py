"""int8 weights for an exported graph: onnxruntime's dynamic quantisation of the MatMul / Gemm weights (the linear
layers: attention projections, feed-forward blocks, adapters, the CTC head), activations quantised per call.

The convolutions (wav2vec2's feature encoder, the conformer's depthwise and subsampling convolutions) stay fp32:
dynamic quantisation of ``Conv`` needs ``ConvInteger``, which onnxruntime's CPU provider lacks for many shapes, and
static quantisation (calibrated activation ranges, QDQ ``Conv``) would need calibration audio and is not done here.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any


def quantize_int8(source: str | os.PathLike, target: str | os.PathLike) -> Path:
    """Write ``target``: ``source`` with int8 MatMul / Gemm weights (per-channel, signed), fp32 elsewhere.

    MatMuls whose weight is not a matrix stay fp32 (:func:`non_matrix_weight_nodes`): onnxruntime quantises them
    without complaint, but its per-channel ``MatMulIntegerToFloat`` refuses the zero points of a ``[N, D, 1]`` or
    ``[D]`` weight at the first call (the SimAdapter fusion's score projections); they hold a few hundred weights.
    """
    import onnx
    from onnxruntime.quantization import QuantType, quantize_dynamic

    excluded = non_matrix_weight_nodes(onnx.load(str(source), load_external_data=False))
    quantize_dynamic(str(source), str(target), op_types_to_quantize=["MatMul", "Gemm"], per_channel=True,
                     weight_type=QuantType.QInt8, nodes_to_exclude=excluded)
    return Path(target)


def non_matrix_weight_nodes(model: Any) -> list[str]:
    """The names of ``model``'s (an ``onnx.ModelProto``) MatMul nodes whose second input is a constant of rank other
    than 2."""
    ranks = {init.name: len(init.dims) for init in model.graph.initializer}
    return [node.name for node in model.graph.node
            if node.op_type == "MatMul" and ranks.get(node.input[1], 2) != 2]
