"""int8 weights for an exported graph: onnxruntime's dynamic quantisation of the MatMul / Gemm weights (the linear
layers: attention projections, feed-forward blocks, adapters, the CTC head), activations quantised per call.

The convolutions (wav2vec2's feature encoder, the conformer's depthwise and subsampling convolutions) stay fp32:
dynamic quantisation of ``Conv`` needs ``ConvInteger``, which onnxruntime's CPU provider lacks for many shapes, and
static quantisation (calibrated activation ranges, QDQ ``Conv``) would need calibration audio and is not done here.

Formats (:data:`INT8_FORMATS`; activations are uint8 in all of them, quantised per call with their own range):

- ``u8s8_7bit`` (the default): signed weights in 7 bits (``reduce_range=True``: -64..64 per output channel, a step of
  1/64 of the channel's largest weight). On x86 CPUs without VNNI (AVX2 only: AMD Zen 1 to 3, Intel Haswell to Comet
  Lake; AVX-512 without VNNI: Intel Skylake-SP) onnxruntime's uint8 x int8 kernels multiply with ``VPMADDUBSW``, which
  adds two uint8 x int8 products into a saturating int16: 2 x 255 x 127 = 64770 overflows 32767, 2 x 255 x 64 = 32640
  does not. With 8-bit weights the logits of the same graph then differ by CPU (measured: docs/export.md); with 7-bit
  weights every x86 CPU computes the same exact integer sums, at twice the weight rounding step.
- ``u8s8``: signed 8-bit weights (-127..127): half the weight rounding of ``u8s8_7bit`` on CPUs with AVX-512 VNNI
  (``VPDPBUSD`` sums into int32 without saturation); wrong sums on the CPUs above. Only for a graph
  that runs on known CPUs with VNNI.
- ``u8u8``: unsigned 8-bit weights with a zero point: no saturation on any x86 CPU (the uint8 x uint8 kernels widen
  to int16 first), 8-bit rounding, but slower than ``u8s8`` where VNNI runs ``u8s8`` (measured: docs/export.md).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

#: int8 formats: name -> (onnxruntime ``QuantType`` name of the weights, ``reduce_range``); see the module docstring
INT8_FORMATS: dict[str, tuple[str, bool]] = {
    "u8s8_7bit": ("QInt8", True),
    "u8s8": ("QInt8", False),
    "u8u8": ("QUInt8", False),
}
#: the format of ``adaptspeech export --quantize int8``: the same logits on every x86 CPU
DEFAULT_INT8_FORMAT = "u8s8_7bit"


def quantize_int8(source: str | os.PathLike, target: str | os.PathLike, fmt: str = DEFAULT_INT8_FORMAT) -> Path:
    """Write ``target``: ``source`` with int8 MatMul / Gemm weights (per output channel) in the format ``fmt`` (one
    of :data:`INT8_FORMATS`), fp32 elsewhere.

    MatMuls whose weight is not a matrix stay fp32 (:func:`non_matrix_weight_nodes`): onnxruntime quantises them
    without complaint, but its per-channel ``MatMulIntegerToFloat`` refuses the zero points of a ``[N, D, 1]`` or
    ``[D]`` weight at the first call (the SimAdapter fusion's score projections); they hold a few hundred weights.

    Raises:
        ValueError: ``fmt`` is no format of :data:`INT8_FORMATS`.
    """
    if fmt not in INT8_FORMATS:
        raise ValueError(f"int8 format {fmt!r}: allowed values: {', '.join(INT8_FORMATS)}")
    import onnx  # noqa: PLC0415 (export extra): the module imports without it
    from onnxruntime.quantization import QuantType, quantize_dynamic  # noqa: PLC0415 (export / runtime extra)

    weight_type, reduce_range = INT8_FORMATS[fmt]
    excluded = non_matrix_weight_nodes(onnx.load(str(source), load_external_data=False))
    quantize_dynamic(str(source), str(target), op_types_to_quantize=["MatMul", "Gemm"], per_channel=True,
                     reduce_range=reduce_range, weight_type=getattr(QuantType, weight_type),
                     nodes_to_exclude=excluded)
    return Path(target)


def exact_integer_graph(source: str | os.PathLike, target: str | os.PathLike) -> Path:
    """Write ``target``: the int8 graph ``source`` with every ``MatMulInteger`` computed as a float ``MatMul`` of its
    integer operands minus their zero points, cast back to int32: the integer sums the int8 graph should compute,
    without any kernel's intermediate saturation (exact while a sum stays below 2^24 in magnitude; beyond, within
    float32 rounding). Everything else, the quantisation of the activations included, is ``source``'s own.

    A check of a CPU's int8 kernels: on every CPU the int8 graph's logits equal this graph's up to float rounding,
    unless a kernel saturates (``u8s8`` on x86 without VNNI). And the int8 graph's distance from the fp32 graph is
    this graph's, which computes in float only: a property of the weights and inputs, the same on every CPU.
    """
    import onnx  # noqa: PLC0415 (export extra): the module imports without it
    from onnx import TensorProto, helper  # noqa: PLC0415 (export extra)

    model = onnx.load(str(source))
    nodes = []
    for node in model.graph.node:
        if node.op_type != "MatMulInteger":
            nodes.append(node)
            continue
        floats = []
        for i, name in enumerate(node.input):  # a, b, a's zero point, b's zero point
            cast = f"{node.name}_exact_{i}"
            nodes.append(helper.make_node("Cast", [name], [cast], to=TensorProto.FLOAT, name=cast))
            floats.append(cast)
        a, b = f"{node.name}_exact_a", f"{node.name}_exact_b"
        nodes.append(helper.make_node("Sub", [floats[0], floats[2]], [a], name=a))
        nodes.append(helper.make_node("Sub", [floats[1], floats[3]], [b], name=b))
        product = f"{node.name}_exact_product"
        nodes.append(helper.make_node("MatMul", [a, b], [product], name=product))
        nodes.append(helper.make_node("Cast", [product], list(node.output), to=TensorProto.INT32, name=node.name))
    del model.graph.node[:]
    model.graph.node.extend(nodes)
    onnx.save(model, str(target))
    return Path(target)


def non_matrix_weight_nodes(model: Any) -> list[str]:
    """The names of ``model``'s (an ``onnx.ModelProto``) MatMul nodes whose second input is a constant of rank other
    than 2."""
    ranks = {init.name: len(init.dims) for init in model.graph.initializer}
    return [node.name for node in model.graph.node
            if node.op_type == "MatMul" and ranks.get(node.input[1], 2) != 2]
