"""How far each int8 format (:data:`adaptspeech.export.quantize.INT8_FORMATS`) moves the logits of the export tests'
toy graphs, on this CPU: the measurement behind the default int8 format and the bounds of the int8 tests.

Two steps, so that the second can run on another CPU, or under ``qemu-x86_64 -cpu Haswell`` (user-mode emulation of
an AVX2 CPU without AVX-512, on which onnxruntime picks its AVX2 kernels; the figures are exact, the speed is not):

1. ``write DIR`` (PyTorch): the four graphs of ``tests/export/test_export_graph.py`` (wav2vec2 post-LN and
   stable-LN, wav2vec2-conformer, the fbank Conformer with the SimAdapter fusion) and the exported folder's graph of
   ``tests/export/test_export_folder.py`` (fbank Conformer, adapters and CTC head drawn with std 0.5), each in fp32
   and in every int8 format, with the tests' inputs.
2. ``measure DIR`` (onnxruntime and numpy only): per graph and format the largest ``|int8 - fp32|`` logit difference
   over the real frames (``max_abs``), and as ratios to the fp32 logits' spread (their largest per-row standard
   deviation): that difference (``per_spread``), the exact integer graph's
   (:func:`adaptspeech.export.quantize.exact_integer_graph`: the quantisation's own error, the same on every CPU)
   and the int8 graph's distance from the exact integer graph (its kernels' own error: float rounding, or
   saturation).

Usage::

    python scripts/bench_int8_error.py write /tmp/int8
    python scripts/bench_int8_error.py measure /tmp/int8
    qemu-x86_64 -cpu Haswell $(which python) scripts/bench_int8_error.py measure /tmp/int8
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))  # the export tests' models and inputs: the same graphs as the tests


def write(folder: Path) -> None:
    """The fp32 and int8 graphs of the export tests and their inputs (``inputs.npz``) under ``folder/<case>``."""
    import importlib

    import torch
    from helpers.model_folders import audio, model_folder

    from adaptspeech.cli import main
    from adaptspeech.export.graph import ExportableCTC, eager_attention, export_graph
    from adaptspeech.export.quantize import INT8_FORMATS, exact_integer_graph, quantize_int8
    from adaptspeech.runtime import OnnxRecognizer

    graph_test = importlib.import_module("export.test_export_graph")
    torch.set_num_threads(1)
    for name, (backbone, stable) in graph_test.BACKBONES.items():
        case = folder / name.replace(" ", "_").replace("+", "and")
        case.mkdir(parents=True, exist_ok=True)
        model = graph_test._model(backbone, stable)
        module = ExportableCTC(model, normalize=True).eval()
        example = tuple(torch.from_numpy(a) for a in graph_test._onnx_inputs(graph_test._inputs(model, [0.5, 0.3], 9)))
        with eager_attention(model):
            export_graph(module, example, case / "model.onnx")
        x, lengths = graph_test._onnx_inputs(graph_test._inputs(model, [2.5, 1.0], seed=4))
        np.savez(case / "inputs.npz", x=x, x_lengths=lengths)
    case = folder / "export_folder"
    model_folder(folder / "export_folder_model")
    if case.exists():
        import shutil

        shutil.rmtree(case)
    assert main(["export", "--model", str(folder / "export_folder_model"), "--language", "ro", "--out", str(case)]) == 0
    features = OnnxRecognizer(case, precision="fp32").features(audio(1.0))
    np.savez(case / "inputs.npz", x=features[None], x_lengths=np.array([len(features)], np.int64))
    for case in sorted(p.parent for p in folder.glob("*/inputs.npz")):
        for fmt in INT8_FORMATS:  # and the exact integer graph of each
            quantize_int8(case / "model.onnx", case / f"model.{fmt}.onnx", fmt)
            exact_integer_graph(case / f"model.{fmt}.onnx", case / f"exact.{fmt}.onnx")
    print(f"wrote {folder}")


def measure(folder: Path) -> dict:
    """Per case and format: the largest |int8 - fp32| over the real frames, the fp32 logits' spread (the largest
    per-row standard deviation) and their ratio."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = options.inter_op_num_threads = 1
    options.log_severity_level = 3

    def run(path: Path, inputs: dict) -> tuple[np.ndarray, np.ndarray]:
        session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
        return tuple(session.run(None, inputs))

    results: dict = {"onnxruntime": ort.__version__, "cases": {}}
    for case in sorted(p.parent for p in folder.glob("*/inputs.npz")):
        inputs = dict(np.load(case / "inputs.npz"))
        logits, frames = run(case / "model.onnx", inputs)
        spread = max(float(logits[i, :n].std()) for i, n in enumerate(frames))
        row = {"spread": round(spread, 4)}
        for path in sorted(case.glob("model.*.onnx")):
            fmt = path.name.split(".")[1]
            int8, frames8 = run(path, inputs)
            assert np.array_equal(frames, frames8)
            error = max(float(np.abs(int8[i, :n] - logits[i, :n]).max()) for i, n in enumerate(frames))
            exact, _ = run(case / f"exact.{fmt}.onnx", inputs)
            quantisation = max(float(np.abs(exact[i, :n] - logits[i, :n]).max()) for i, n in enumerate(frames))
            kernels = max(float(np.abs(int8[i, :n] - exact[i, :n]).max()) for i, n in enumerate(frames))
            row[fmt] = {"max_abs": round(error, 4), "per_spread": round(error / spread, 4),
                        "exact_integer_per_spread": round(quantisation / spread, 4),
                        "int8_minus_exact_per_spread": float(f"{kernels / spread:.3g}")}
        results["cases"][case.name] = row
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("step", choices=("write", "measure"))
    parser.add_argument("folder", type=Path)
    args = parser.parse_args()
    if args.step == "write":
        write(args.folder)
    else:
        print(json.dumps(measure(args.folder), indent=1))


if __name__ == "__main__":
    main()
