"""Peak memory and real-time factor of transcribing a long recording, chunked vs unchunked, in one run (CPU).

Usage::

    python scripts/bench_long_form.py                       # 10-minute recording, demo-sized model
    python scripts/bench_long_form.py --minutes 2 --threads 2

The model is the demo's shape (fbank_conformer width 144, 4 layers, 4 heads, FFN 576, 2.2M parameters) built from
config with random weights: memory and time do not depend on the weights. The recording is a noisy chirp. Each
measurement runs in its own process (``multiprocessing`` spawn) so that the peak resident memory (``ru_maxrss``) is
that configuration's alone: *chunked* is ``adaptspeech.inference.transcribe`` (whole-recording features, encoder on
30 s chunks with 5 s strides, CTC greedy); *unchunked* is one encoder call over the whole recording, measured at
``--unchunked-minutes`` (default 2: at 10 minutes full attention needs several GB). RTF = seconds / audio seconds.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import resource
import time
from typing import Any


def _build(threads: int) -> tuple[Any, Any]:
    import torch
    from transformers import Wav2Vec2CTCTokenizer, Wav2Vec2Processor

    from adaptspeech import AdaptSpeechConfig, AdaptSpeechFeatureExtractor, AdaptSpeechForCTC

    torch.set_num_threads(threads)
    torch.manual_seed(0)
    config = AdaptSpeechConfig(backbone_type="fbank_conformer", vocab_size=40, backbone_config=dict(
        hidden_size=144, num_hidden_layers=4, num_attention_heads=4, intermediate_size=576))
    model = AdaptSpeechForCTC(config).eval()
    import json
    import tempfile

    tokens = ["[PAD]", "[UNK]", "<s>", "</s>", "|", *"abcdefghijklmnopqrstuvwxyz0123456789"]
    vocab = {t: i for i, t in enumerate(tokens)}
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as handle:
        json.dump(vocab, handle)
    tokenizer = Wav2Vec2CTCTokenizer(handle.name, unk_token="[UNK]", pad_token="[PAD]", word_delimiter_token="|")
    return model, Wav2Vec2Processor(feature_extractor=AdaptSpeechFeatureExtractor(), tokenizer=tokenizer)


def _recording(minutes: float) -> Any:
    import numpy as np

    rng = np.random.default_rng(0)
    t = np.arange(int(minutes * 60 * 16000)) / 16000
    return (0.3 * np.sin(2 * np.pi * (200 + 50 * np.sin(t)) * t) + 0.05 * rng.standard_normal(t.shape)).astype(
        np.float32)


def _measure(kind: str, minutes: float, threads: int, chunk: float, stride: float, queue: Any) -> None:
    import torch

    from adaptspeech.inference.transcriber import transcribe

    model, processor = _build(threads)
    wave = _recording(minutes)
    base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    start = time.perf_counter()
    if kind == "chunked":
        transcribe(model, processor, [wave], chunk_length_s=chunk, stride_length_s=stride)
    else:
        from adaptspeech.inference.long_form import model_input

        with torch.no_grad():
            hidden, _, _, _ = model.encode(model_input(wave, processor.feature_extractor)[None])
            model.ctc_head(hidden).argmax(-1)
    seconds = time.perf_counter() - start
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    queue.put((seconds, peak / 1024, base / 1024))


def run(kind: str, minutes: float, args: argparse.Namespace) -> tuple[float, float, float]:
    """``(seconds, peak RSS MB, RSS MB before decoding)`` in a fresh process."""
    context = mp.get_context("spawn")
    queue = context.Queue()
    process = context.Process(target=_measure, args=(kind, minutes, args.threads, args.chunk_length,
                                                     args.stride_length, queue))
    process.start()
    result = queue.get()
    process.join()
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--minutes", type=float, default=10.0)
    parser.add_argument("--unchunked-minutes", type=float, default=2.0)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--chunk-length", type=float, default=30.0)
    parser.add_argument("--stride-length", type=float, default=5.0)
    args = parser.parse_args()
    print(f"demo-sized fbank conformer (random weights), {args.threads} threads, chunks of {args.chunk_length:g} s "
          f"with {args.stride_length:g} s strides\n")
    print(f"{'what':<34} {'audio s':>8} {'seconds':>8} {'RTF':>7} {'peak RSS MB':>12} {'before MB':>10}")
    rows = {}
    for label, kind, minutes in (
        (f"unchunked, {args.unchunked_minutes:g} min", "unchunked", args.unchunked_minutes),
        (f"chunked, {args.unchunked_minutes:g} min", "chunked", args.unchunked_minutes),
        (f"chunked, {args.minutes:g} min", "chunked", args.minutes),
    ):
        seconds, peak, base = run(kind, minutes, args)
        rows[label] = (seconds, peak)
        audio = minutes * 60
        print(f"{label:<34} {audio:>8.0f} {seconds:>8.1f} {seconds / audio:>7.4f} {peak:>12.0f} {base:>10.0f}")
    short = f"{args.unchunked_minutes:g} min"
    ratio = rows[f"chunked, {short}"][1] / rows[f"unchunked, {short}"][1]
    print(f"\npeak memory chunked / unchunked at {short}: {ratio:.2f}")
    long_peak = rows[f"chunked, {args.minutes:g} min"][1]
    print(f"{args.minutes:g}-minute recording within 1.5 GB peak: {'met' if long_peak <= 1536 else 'MISSED'} "
          f"({long_peak:.0f} MB)")


if __name__ == "__main__":
    main()
