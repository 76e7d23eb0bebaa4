"""sherpa-onnx against adaptspeech on synthetic-speech test utterances, with a small waveform model trained for it.

The demo's fbank Conformer cannot run in sherpa-onnx (its fbank front ends compute other features: docs/export.md), so
this script trains a small wav2vec2 CTC model from scratch on the demo corpus' waveforms through the library's own
commands, exports it, and transcribes the test split three ways:

1. PyTorch: :func:`adaptspeech.inference.transcriber.transcribe`, ``ctc_greedy``;
2. onnxruntime: :class:`adaptspeech.runtime.OnnxRecognizer`, greedy, fp32 (and int8);
3. sherpa-onnx: ``OfflineRecognizer.from_omnilingual_asr_ctc`` on the same graph, fp32 and int8
   (:func:`adaptspeech.runtime.sherpa.sherpa_transcribe`).

Every path reads the same 16 kHz waveform decoded from the corpus' clip. It prints the count of transcripts identical
to PyTorch's (runs of spaces collapsed: sherpa-onnx keeps them) and the CER / WER of each path against the references.

The steps, each skipped when its output is already there (training too when it ran ``--max-steps`` steps;
``--overwrite`` retrains)::

    adaptspeech prepare common-voice --root CORPUS --languages es --out WORK/prepared --feature-type waveform ...
    adaptspeech train --config WORK/stage.yaml --threads 1 --no-progress    # stage_spec() with --max-steps
    adaptspeech export --model WORK/model/model --out WORK/onnx --quantize int8

Usage (one CPU thread; ``--max-steps 10`` first to measure the step time)::

    OMP_NUM_THREADS=1 python scripts/bench_sherpa.py --corpus runs/synthetic_demo/corpus --max-steps 10
    OMP_NUM_THREADS=1 python scripts/bench_sherpa.py --corpus runs/synthetic_demo/corpus --max-steps 1600
"""

from __future__ import annotations

import argparse
import json
import platform
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import yaml

#: the model: wav2vec2 with pre-layer-norm (it trains from scratch without a warm-up search), width 144, 4 layers;
#: a three-convolution front end of the real models' 320x downsampling whose receptive field (325 samples) covers
#: the stride, far cheaper than wav2vec2's seven 512-channel convolutions
BACKBONE = dict(
    hidden_size=144, num_hidden_layers=4, num_attention_heads=4, intermediate_size=576, do_stable_layer_norm=True,
    conv_dim=[32, 64, 144], conv_kernel=[10, 8, 8], conv_stride=[5, 8, 8], feat_extract_norm="layer",
    num_conv_pos_embeddings=32, num_conv_pos_embedding_groups=8,
    hidden_dropout=0.1, attention_dropout=0.0, activation_dropout=0.0, feat_proj_dropout=0.0,
    layerdrop=0.0, mask_time_prob=0.0,
)


def stage_spec(work: Path, language: str, max_steps: int) -> dict:
    """The stage (as ``recipes/synthetic_demo/stage_base.yaml``, with the wav2vec2 backbone above)."""
    return {
        "name": "sherpa_wav2vec2",
        "output_dir": str(work / "model"),
        "seed": 0,
        "data": {"prepared_dir": str(work / "prepared"), "train_languages": [language], "max_eval_rows": 100},
        "model": {"init": "config", "config": {"backbone_type": "wav2vec2", "backbone_config": BACKBONE},
                  "trainable": {"backbone": True, "head": True}},
        "training": {
            "max_steps": max_steps, "per_device_train_batch_size": 8, "learning_rate": 0.002,
            "warmup_steps": min(150, max(1, max_steps // 10)), "lr_scheduler_type": "cosine", "weight_decay": 0.01,
            "max_grad_norm": 5.0, "logging_steps": 25, "save_steps": 100000, "eval_strategy": "no",
            "per_device_eval_batch_size": 16, "train_sampling_strategy": "group_by_length",
            "length_column_name": "input_length", "use_cpu": True, "report_to": "none",
        },
    }


def adaptspeech(*args: str) -> None:
    """Run one ``adaptspeech`` command (the installed CLI's module), stopping on failure."""
    command = [sys.executable, "-m", "adaptspeech.cli", *args]
    print("+ adaptspeech " + " ".join(args), flush=True)
    subprocess.run(command, check=True)


def trained_steps(work: Path) -> int | None:
    """The step budget of the model trained in ``work`` (None: no finished model there)."""
    spec = work / "model" / "stage_spec.json"
    if not (work / "model" / "model" / "config.json").is_file() or not spec.is_file():
        return None
    return json.loads(spec.read_text())["training"].get("max_steps")


def build(args: argparse.Namespace) -> dict:
    """Prepare, train and export (each step skipped when done); the seconds each step took."""
    work: Path = args.work
    work.mkdir(parents=True, exist_ok=True)
    seconds = {}
    if not (work / "prepared" / "dataset").is_dir():
        start = time.perf_counter()
        adaptspeech("prepare", "common-voice", "--root", str(args.corpus), "--languages", args.language,
                    "--out", str(work / "prepared"), "--splits", "train,dev,test", "--feature-type", "waveform",
                    "--max-seconds", "12", "--num-proc", "1")
        seconds["prepare"] = time.perf_counter() - start
    if args.overwrite or trained_steps(work) != args.max_steps:
        (work / "stage.yaml").write_text(yaml.safe_dump(stage_spec(work, args.language, args.max_steps),
                                                        sort_keys=False))
        start = time.perf_counter()
        adaptspeech("train", "--config", str(work / "stage.yaml"), "--threads", "1", "--no-progress",
                    *(["--overwrite"] if (work / "model").exists() else []))
        seconds["train"] = time.perf_counter() - start
        shutil.rmtree(work / "onnx", ignore_errors=True)
    if not (work / "onnx" / "model.onnx").is_file():
        start = time.perf_counter()
        adaptspeech("export", "--model", str(work / "model" / "model"), "--out", str(work / "onnx"),
                    "--quantize", "int8")
        seconds["export"] = time.perf_counter() - start
    return {name: round(value, 1) for name, value in seconds.items()}


def test_clips(corpus: Path, work: Path, split: str, language: str) -> tuple[list[np.ndarray], list[str]]:
    """The 16 kHz waveforms of the prepared ``split`` rows, decoded from the corpus' clips, and their references."""
    from datasets import load_from_disk

    from adaptspeech.runtime.audio import load_audio

    rows = load_from_disk(str(work / "prepared" / "dataset"))[split].select_columns(["path", "text"])
    clips = [load_audio(corpus / language / "clips" / name) for name in rows["path"]]
    return clips, list(rows["text"])


def compare(work: Path, clips: list[np.ndarray], references: list[str]) -> dict:
    """Transcripts of every path; identical-to-PyTorch counts and CER / WER (percent) of each."""
    import torch
    from jiwer import cer, wer
    from transformers import Wav2Vec2Processor

    from adaptspeech.inference.transcriber import transcribe
    from adaptspeech.runtime import OnnxRecognizer
    from adaptspeech.runtime.sherpa import sherpa_transcribe
    from adaptspeech.saved_model import load_saved_model

    torch.set_num_threads(1)
    model_dir, onnx = work / "model" / "model", work / "onnx"
    model = load_saved_model(model_dir, progress_bar=False).eval()
    processor = Wav2Vec2Processor.from_pretrained(model_dir)
    texts = {"pytorch_fp32": [t.text for t in transcribe(model, processor, clips, method="ctc_greedy")]}
    for precision in ("fp32", "int8"):
        recognizer = OnnxRecognizer(onnx, precision=precision, method="ctc_greedy")
        texts[f"onnxruntime_{precision}"] = [r.text for r in recognizer.transcribe(clips)]
        texts[f"sherpa_onnx_{precision}"] = sherpa_transcribe(onnx, clips, precision=precision)
    reference = texts["pytorch_fp32"]
    result = {}
    for name, hypotheses in texts.items():
        result[name] = {
            "identical_to_pytorch": sum(a == b for a, b in zip(hypotheses, reference, strict=True)),
            "cer": round(100 * cer(references, hypotheses), 2), "wer": round(100 * wer(references, hypotheses), 2),
        }
    result["empty_pytorch_transcripts"] = sum(not t for t in reference)
    result["distinct_pytorch_transcripts"] = len(set(reference))
    result["examples"] = [{"reference": r, "pytorch": p, "sherpa_onnx": s} for r, p, s in
                          zip(references[:3], reference[:3], texts["sherpa_onnx_fp32"][:3], strict=True)]
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--corpus", type=Path, required=True, help="the demo's synthetic corpus (Common Voice layout)")
    parser.add_argument("--work", type=Path, default=Path("runs/sherpa"), help="prepared data, model and export")
    parser.add_argument("--language", default="es")
    parser.add_argument("--max-steps", type=int, default=1600, help="training steps (batch 8)")
    parser.add_argument("--split", default="test", help="the split compared")
    parser.add_argument("--overwrite", action="store_true", help="retrain (and re-export) over an earlier model")
    args = parser.parse_args()
    import onnxruntime
    import sherpa_onnx
    import torch

    result: dict = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "machine": platform.processor()
                    or platform.machine(), "torch": torch.__version__, "onnxruntime": onnxruntime.__version__,
                    "sherpa_onnx": sherpa_onnx.__version__, "threads": 1, "language": args.language}
    result["seconds"] = build(args)
    result["max_steps"] = trained_steps(args.work)
    clips, references = test_clips(args.corpus, args.work, args.split, args.language)
    result["utterances"] = len(clips)
    result["audio_seconds"] = round(sum(len(c) for c in clips) / 16000, 1)
    start = time.perf_counter()
    result["comparison"] = compare(args.work, clips, references)
    result["seconds"]["compare"] = round(time.perf_counter() - start, 1)
    print(json.dumps(result, indent=2, ensure_ascii=False))


if __name__ == "__main__":
    main()
