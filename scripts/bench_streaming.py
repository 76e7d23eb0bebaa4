"""Latency, compute and memory of streaming recognition (``StreamingRecognizer``), on CPU, in one run.

Usage::

    OMP_NUM_THREADS=1 python scripts/bench_streaming.py                       # demo + deployment sizes, 1 minute
    OMP_NUM_THREADS=1 python scripts/bench_streaming.py --sizes demo --minutes 60 --num-left-chunks 4

Models are built from config with random weights (time and memory do not depend on the weights), with streaming
settings: ``rel_pos`` attention with dynamic chunks and causal depthwise convolution (kernel 15). *demo*: the demo's
shape (fbank Conformer width 144, 4 layers, 4 heads, FFN 576); *deployment*: 12 layers of width 256, 4 heads, FFN
1024. The stream is a noisy chirp generated block by block (0.1 s blocks, as a live source delivers them; never held
whole), fed as fast as it is decoded. Each size runs in its own process (``multiprocessing`` spawn), so resident memory
is that configuration's alone.

Printed per size: compute per chunk (median and p95, ms), real-time factor (compute / audio), the time from the end of
the audio to the final text (``finalize``: the last partial chunk), resident memory after the first minute and at the
end, and, measured in the same process as the baseline, the real-time factor of one offline forward over the first
minute (full context, one encoder call): ``ratio`` = streaming RTF / offline RTF.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import tempfile
import time
from typing import Any

SIZES: dict[str, dict[str, int]] = {
    "demo": dict(hidden_size=144, num_hidden_layers=4, num_attention_heads=4, intermediate_size=576),
    "deployment": dict(hidden_size=256, num_hidden_layers=12, num_attention_heads=4, intermediate_size=1024),
}
BLOCK_S = 0.1
RATE = 16000


def _build(size: str, threads: int) -> tuple[Any, Any]:
    import torch
    from transformers import Wav2Vec2Processor

    from adaptspeech import AdaptSpeechConfig, AdaptSpeechForCTC
    from adaptspeech.data.processor import build_processor
    from adaptspeech.data.text import build_vocab

    torch.set_num_threads(threads)
    torch.manual_seed(0)
    folder = tempfile.mkdtemp()
    vocab = build_vocab(["abcdefghijklmnopqrstuvwxyz 0123456789"])
    build_processor(vocab, folder, feature_type="fbank", n_mels=80)
    config = AdaptSpeechConfig(
        backbone_type="fbank_conformer",
        vocab_size=len(vocab),
        backbone_config=dict(SIZES[size], conv_depthwise_kernel_size=15, conv_lookahead=0),
        attention={"kind": "rel_pos", "dynamic_chunks": True},
    )
    return AdaptSpeechForCTC(config).eval(), Wav2Vec2Processor.from_pretrained(folder)


def _block(index: int) -> Any:
    """Block ``index`` of the stream: a chirp between 200 and 2,000 Hz (period 3 s) in noise."""
    import numpy as np

    t = (np.arange(int(BLOCK_S * RATE)) + index * int(BLOCK_S * RATE)) / RATE
    phase = 2 * np.pi * (200 * t + 300 * (t % 3) ** 2)
    noise = np.random.default_rng(index).standard_normal(len(t)) * 0.02
    return (0.3 * np.sin(phase) + noise).astype(np.float32)


def _rss_mb() -> float:
    with open("/proc/self/status") as handle:
        for line in handle:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def _measure(size: str, minutes: float, chunk_ms: float, left: int, threads: int, out: Any,
             speech_finder: str | None = None) -> None:
    import numpy as np
    import torch

    from adaptspeech.inference.streaming import StreamingRecognizer

    model, processor = _build(size, threads)
    # the baseline, in this process: one offline forward over the first minute
    minute = np.concatenate([_block(i) for i in range(int(60 / BLOCK_S))])
    features = processor.feature_extractor(minute, sampling_rate=RATE, return_tensors="pt")["input_features"]
    with torch.no_grad():
        model(input_features=features)  # warm-up
        start = time.perf_counter()
        model(input_features=features)
        offline_rtf = (time.perf_counter() - start) / 60
    del minute, features
    endpointing = {} if speech_finder is None else {"speech_finder": speech_finder, "endpoint_silence_s": 0.5}
    recognizer = StreamingRecognizer(model, processor, chunk_ms=chunk_ms, num_left_chunks=left, **endpointing)
    recognizer.accept_waveform(_block(0))  # warm-up of the first chunk's code paths, then a fresh stream
    recognizer.reset()
    blocks = round(minutes * 60 / BLOCK_S)
    rss_first_minute = None
    for index in range(blocks):
        recognizer.accept_waveform(_block(index))
        if index + 1 == int(60 / BLOCK_S):
            rss_first_minute = _rss_mb()
    start = time.perf_counter()
    recognizer.finalize()
    final_ms = (time.perf_counter() - start) * 1000
    chunks = np.array(recognizer.chunk_seconds[:-1]) * 1000  # whole chunks (the last, partial one is `final_ms`)
    seconds = recognizer.seconds
    out.put(
        dict(
            size=size,
            chunk_ms=chunk_ms,
            num_left_chunks=left,
            minutes=minutes,
            chunks=len(chunks),
            median_ms=float(np.median(chunks)),
            p95_ms=float(np.percentile(chunks, 95)),
            rtf=float(sum(recognizer.chunk_seconds) / seconds),
            vad_rtf=recognizer.vad_seconds / seconds,
            final_ms=final_ms,
            rss_first_minute_mb=rss_first_minute if rss_first_minute is not None else _rss_mb(),
            rss_end_mb=_rss_mb(),
            offline_rtf=offline_rtf,
            parameters=sum(p.numel() for p in model.parameters()),
        )
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="demo,deployment", help="comma-separated: demo, deployment")
    parser.add_argument("--minutes", type=float, default=1.0, help="stream length (default 1)")
    parser.add_argument("--chunk-ms", type=float, default=640.0, help="chunk length (default 640)")
    parser.add_argument("--num-left-chunks", type=int, default=-1, help="left chunks attended (default -1: all)")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (default 1)")
    parser.add_argument("--speech-finder", default=None, choices=("silero",),
                        help="endpoint on this speech finder (0.5 s of silence); its own compute is the VAD RTF column "
                        "(default: the blanks, no VAD)")
    args = parser.parse_args()
    context = mp.get_context("spawn")
    header = (
        "| size | params | chunk | left | minutes | chunk median ms | p95 ms | RTF | final ms | RSS 1 min MB "
        "| RSS end MB | offline RTF | ratio | VAD RTF |"
    )
    print(header)
    print("|" + "---|" * (header.count("|") - 1))
    for size in args.sizes.split(","):
        queue = context.Queue()
        process = context.Process(
            target=_measure,
            args=(size, args.minutes, args.chunk_ms, args.num_left_chunks, args.threads, queue, args.speech_finder),
        )
        process.start()
        r = queue.get()
        process.join()
        print(
            f"| {r['size']} | {r['parameters'] / 1e6:.1f}M | {r['chunk_ms']:g} ms | {r['num_left_chunks']} | "
            f"{r['minutes']:g} | {r['median_ms']:.1f} | {r['p95_ms']:.1f} | {r['rtf']:.4f} | {r['final_ms']:.1f} | "
            f"{r['rss_first_minute_mb']:.0f} | {r['rss_end_mb']:.0f} | {r['offline_rtf']:.4f} | "
            f"{r['rtf'] / r['offline_rtf']:.2f} | {r['vad_rtf']:.4f} |",
            flush=True,
        )


if __name__ == "__main__":
    main()
