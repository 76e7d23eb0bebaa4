"""Speed and accuracy of an exported model against PyTorch, one CPU thread, all in one run.

Speed: PyTorch eager fp32, onnxruntime fp32 and onnxruntime int8 (dynamic int8 MatMul weights; ``--int8-formats``:
the default format of ``adaptspeech export``, or several of :data:`~adaptspeech.export.quantize.INT8_FORMATS` side by
side, each ``onnxruntime_int8_<format>``) on the same random utterance, interleaved rounds, the fastest round of each
counts; printed as seconds of compute per second of audio and as speed-ups over PyTorch. Shapes: XLS-R 300M (random
weights, one bottleneck adapter; ``--shape xlsr300m``), the demo's fbank Conformer (width 144, 4 layers; ``--shape
demo``), or a saved model folder (``--model DIR``).

Accuracy (``--model DIR --data PREPARED``): the CER / WER of greedy decoding of the ``--split`` rows with PyTorch fp32,
onnxruntime fp32 and onnxruntime int8, from the prepared rows' features (the graph re-normalises them: idempotent).

Usage::

    python scripts/bench_export.py --shape xlsr300m --seconds 8
    python scripts/bench_export.py --shape demo --seconds 8
    python scripts/bench_export.py --shape xlsr300m --seconds 4 --int8-formats u8s8_7bit,u8s8,u8u8
    python scripts/bench_export.py --model runs/demo_base --data PREPARED --split test --lm LM_DIR --skip-speed
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import numpy as np
import onnxruntime as ort
import torch

from adaptspeech.backbones.wav2vec2 import XLSR_300M_BACKBONE
from adaptspeech.configuration import AdaptSpeechConfig
from adaptspeech.export.graph import ExportableCTC, eager_attention, example_inputs, export_graph
from adaptspeech.export.quantize import DEFAULT_INT8_FORMAT, INT8_FORMATS, quantize_int8
from adaptspeech.modeling import AdaptSpeechForCTC
from adaptspeech.runtime.ctc import greedy_decode, log_softmax

DEMO_BACKBONE = dict(hidden_size=144, num_hidden_layers=4, num_attention_heads=4, intermediate_size=576,
                     conv_depthwise_kernel_size=15, num_mel_bins=80)


def shaped_model(shape: str) -> AdaptSpeechForCTC:
    """A random model of ``shape`` with one language adapter active (eval mode, dropout off)."""
    if shape == "xlsr300m":
        backbone = dict(XLSR_300M_BACKBONE, layerdrop=0.0, mask_time_prob=0.0, hidden_dropout=0.0,
                        attention_dropout=0.0)
        config = AdaptSpeechConfig(backbone_type="wav2vec2", backbone_config=backbone, vocab_size=40,
                                   adapter_languages=["xx"])
    else:
        config = AdaptSpeechConfig(backbone_type="fbank_conformer", backbone_config=DEMO_BACKBONE, vocab_size=40,
                                   adapter_languages=["xx"])
    torch.manual_seed(0)
    model = AdaptSpeechForCTC(config).eval()
    model.set_target_language("xx")
    return model


def export_both(model: AdaptSpeechForCTC, folder: Path, formats: tuple[str, ...] = ()) -> dict[str, Path]:
    """fp32 and int8 graphs of ``model`` in ``folder``: ``int8`` in the default format when ``formats`` is empty,
    else ``int8_<format>`` for each of ``formats``."""
    framed = model.main_input_name == "input_features"
    feature_size = model.config.backbone_config.num_mel_bins if framed else 1
    module = ExportableCTC(model, normalize=True).eval()
    with eager_attention(model):
        export_graph(module, example_inputs(model, feature_size, 200 if framed else 16000), folder / "model.onnx")
    graphs = {"fp32": folder / "model.onnx"}
    for fmt in formats or (DEFAULT_INT8_FORMAT,):
        name = f"int8_{fmt}" if formats else "int8"
        graphs[name] = quantize_int8(folder / "model.onnx", folder / f"model.{name}.onnx", fmt)
    return graphs


def session(path: Path) -> ort.InferenceSession:
    options = ort.SessionOptions()
    options.intra_op_num_threads = options.inter_op_num_threads = 1
    options.log_severity_level = 3
    return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])


def bench_speed(model: AdaptSpeechForCTC, graphs: dict[str, Path], seconds: float,
                rounds: int) -> tuple[dict[str, float], dict[str, float]]:
    """Seconds of compute per second of audio of each path (fastest of ``rounds``), and each graph's largest
    absolute logit difference from PyTorch's on that utterance."""
    framed = model.main_input_name == "input_features"
    units = int(seconds * (100 if framed else 16000))
    rng = np.random.default_rng(0)
    x = rng.standard_normal((1, units, 80) if framed else (1, units)).astype(np.float32)
    lengths = np.array([units], np.int64)
    module = ExportableCTC(model, normalize=True).eval()
    sessions = {name: session(path) for name, path in graphs.items()}
    runs = {"pytorch_fp32": lambda: module(torch.from_numpy(x), torch.from_numpy(lengths))}
    for name, sess in sessions.items():
        runs[f"onnxruntime_{name}"] = lambda sess=sess: sess.run(None, {"x": x, "x_lengths": lengths})
    best = {name: float("inf") for name in runs}
    with torch.inference_mode():
        outputs = {name: run()[0] for name, run in runs.items()}  # also the warm-up
        reference = outputs["pytorch_fp32"].numpy()
        differences = {name: float(np.abs(out - reference).max()) for name, out in outputs.items()
                       if name != "pytorch_fp32"}
        for _ in range(rounds):
            for name, run in runs.items():
                start = time.perf_counter()
                run()
                best[name] = min(best[name], time.perf_counter() - start)
    return {name: value / seconds for name, value in best.items()}, differences


def bench_accuracy(model: AdaptSpeechForCTC, model_dir: Path, graphs: dict[str, Path], data: Path, split: str,
                   limit: int | None, lm: Path | None = None, language: str | None = None,
                   weights: tuple[float | None, float | None] = (None, None)) -> dict:
    """CER / WER (percent) of greedy decoding of the split with PyTorch fp32 (``model``, set up as it was exported)
    and each graph, and with the n-gram LM at ``lm`` (pyctcdecode; ``weights``: alpha and beta, None: the weights
    saved with the LM, else the defaults) when given. ``language``: score that language's rows only."""
    from datasets import load_from_disk
    from jiwer import cer, wer
    from transformers import Wav2Vec2Processor

    from adaptspeech.export.tokens import token_table

    rows = load_from_disk(str(data))[split]
    if language is not None and "language" in rows.column_names:
        rows = rows.filter(lambda value: value == language, input_columns="language")
    if limit:
        rows = rows.select(range(min(limit, len(rows))))
    table = token_table(Wav2Vec2Processor.from_pretrained(model_dir).tokenizer)
    module = ExportableCTC(model, normalize=True).eval()
    sessions = {name: session(path) for name, path in graphs.items()}
    names = ["pytorch_fp32", *(f"onnxruntime_{n}" for n in sessions)]
    decoders = {"greedy": None}
    if lm is not None:
        from adaptspeech.lm.decoder import LMDecoder, build_decoder

        decoders["lm"] = LMDecoder(build_decoder(table, lm, *weights))
    hypotheses: dict[str, list[str]] = {f"{name} {d}": [] for name in names for d in decoders}
    references = []
    for row in rows:
        x = np.asarray(row[model.main_input_name], np.float32)[None]
        lengths = np.array([x.shape[1]], np.int64)
        with torch.inference_mode():
            logits, frames = module(torch.from_numpy(x), torch.from_numpy(lengths))
        outputs = {"pytorch_fp32": (logits.numpy(), frames.numpy())}
        for name, sess in sessions.items():
            outputs[f"onnxruntime_{name}"] = tuple(sess.run(None, {"x": x, "x_lengths": lengths}))
        for name, (out, n) in outputs.items():
            hypotheses[f"{name} greedy"].append(table.text(greedy_decode(out, n, table.blank_id)[0]))
            if "lm" in decoders:
                hypotheses[f"{name} lm"].append(decoders["lm"].decode(log_softmax(out[0, : int(n[0])]))[0])
        references.append(row["text"])
    return {name: {"cer": round(100 * cer(references, hyp), 2), "wer": round(100 * wer(references, hyp), 2)}
            for name, hyp in hypotheses.items()} | {"utterances": len(references)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shape", choices=("xlsr300m", "demo"), default="demo")
    parser.add_argument("--model", type=Path, default=None, help="a saved model folder instead of --shape")
    parser.add_argument("--language", default=None, help="the language of --model to export (and to score)")
    parser.add_argument("--fusion", action="store_true", help="export the SimAdapter fusion over --model's languages")
    parser.add_argument("--alpha", type=float, default=None, help="LM weight (default: the LM folder's tuned one)")
    parser.add_argument("--beta", type=float, default=None, help="word bonus (default: the LM folder's tuned one)")
    parser.add_argument("--data", type=Path, default=None, help="a prepared dataset folder (accuracy)")
    parser.add_argument("--split", default="test")
    parser.add_argument("--limit", type=int, default=None, help="rows of --split to score")
    parser.add_argument("--lm", type=Path, default=None, help="an n-gram LM folder (`adaptspeech lm build`)")
    parser.add_argument("--skip-speed", action="store_true", help="accuracy only")
    parser.add_argument("--seconds", type=float, default=8.0, help="utterance length of the speed runs")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--int8-formats", default="", metavar="F1,F2",
                        help=f"int8 formats side by side, among {', '.join(INT8_FORMATS)} (default: the export's "
                        f"{DEFAULT_INT8_FORMAT} alone)")
    args = parser.parse_args()
    formats = tuple(f for f in args.int8_formats.split(",") if f)
    unknown = sorted(set(formats) - set(INT8_FORMATS))
    if unknown:
        parser.error(f"--int8-formats: unknown {', '.join(unknown)}; allowed: {', '.join(INT8_FORMATS)}")
    torch.set_num_threads(1)
    result: dict = {"torch": torch.__version__, "onnxruntime": ort.__version__, "threads": 1}
    with tempfile.TemporaryDirectory() as tmp:
        if args.model is not None:
            from adaptspeech.export import choose_language
            from adaptspeech.saved_model import load_saved_model

            model = load_saved_model(args.model, progress_bar=False).eval()
            if model.adapter_languages or args.language:
                choose_language(model, args.language, args.fusion)
            result["model"] = str(args.model)
        else:
            model = shaped_model(args.shape)
            result["model"] = f"{args.shape} shape, random weights"
        graphs = export_both(model, Path(tmp), formats)
        result["graph_mb"] = {n: round(p.stat().st_size / 2**20, 1) for n, p in graphs.items()}
        if not args.skip_speed:
            speed, differences = bench_speed(model, graphs, args.seconds, args.rounds)
            result["max_abs_logit_difference_from_pytorch"] = {k: float(f"{v:.3g}") for k, v in differences.items()}
            result["seconds_per_audio_second"] = {k: round(v, 4) for k, v in speed.items()}
            result["speedup_over_pytorch"] = {k: round(speed["pytorch_fp32"] / v, 2) for k, v in speed.items()}
        if args.data is not None and args.model is not None:
            result["accuracy"] = bench_accuracy(model, args.model, graphs, args.data, args.split, args.limit, args.lm,
                                                args.language, (args.alpha, args.beta))
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
