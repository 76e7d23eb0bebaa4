"""Peak memory and real-time factor of transcribing a long recording, chunked vs unchunked, in one run (CPU).

Usage::

    python scripts/bench_long_form.py                       # 10-minute recording, demo-sized model
    python scripts/bench_long_form.py --minutes 2 --threads 2

The model is the demo's shape (fbank_conformer width 144, 4 layers, 4 heads, FFN 576, 2.2M parameters) built from
config with random weights: memory and time do not depend on the weights. The recording is a noisy chirp with
0.5 s of -60 dBFS noise every ``--pause-every`` seconds (default 5; 0: none). Each measurement runs in its own process
(``multiprocessing`` spawn) so that the peak resident memory (``ru_maxrss``) is that configuration's alone: *chunks*
and *pauses* are ``adaptspeech.inference.transcriber.transcribe`` with ``split_by`` (whole-recording features; the
encoder on 30 s chunks with 5 s strides, or on one speech region at a time; CTC greedy); *unchunked* is one encoder call
over the whole recording, measured at ``--unchunked-minutes`` (default 2: at 10 minutes full attention needs several
GB). RTF = seconds / audio seconds.
"""

from __future__ import annotations

import argparse
import resource
import time
from typing import Any

from adaptspeech.memory import in_fresh_process


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


def _recording(minutes: float, pause_every: float, piece_s: float = 60.0) -> Any:
    """The noisy chirp ``[S]`` float32 (module docstring), built a minute at a time: float64 intermediates of a whole
    hour (seven arrays of 460 MB) would set the process's peak memory before the measurement starts."""
    import numpy as np

    rng = np.random.default_rng(0)
    total, piece = int(minutes * 60 * 16000), int(piece_s * 16000)
    wave = np.empty(total, dtype=np.float32)
    pauses = np.zeros(total, dtype=bool)
    for first in range(0, total, piece):  # the noise in one stream, drawn in order, as one call would draw it
        t = np.arange(first, min(first + piece, total)) / 16000
        wave[first : first + len(t)] = 0.3 * np.sin(2 * np.pi * (200 + 50 * np.sin(t)) * t)
        wave[first : first + len(t)] += 0.05 * rng.standard_normal(len(t))
        if pause_every > 0:
            pauses[first : first + len(t)] = (t % (pause_every + 0.5)) >= pause_every
    if pause_every > 0:
        index = np.flatnonzero(pauses)
        for first in range(0, len(index), piece):
            part = index[first : first + piece]
            wave[part] = 1e-3 * rng.standard_normal(len(part))
    return wave


def _measure(split_by: str, minutes: float, threads: int, chunk: float, stride: float, pause_every: float,
             queue: Any) -> None:
    import torch

    from adaptspeech.inference.transcriber import transcribe

    model, processor = _build(threads)
    wave = _recording(minutes, pause_every)
    base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    start = time.perf_counter()
    if split_by in ("chunks", "pauses"):
        transcribe(model, processor, [wave], chunk_length_s=chunk, stride_length_s=stride, split_by=split_by)
    else:
        from adaptspeech.inference.long_form.local_norm import model_input

        with torch.no_grad():
            hidden, _, _, _ = model.encode(model_input(wave, processor.feature_extractor)[None])
            model.ctc_head(hidden).argmax(-1)
    seconds = time.perf_counter() - start
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    queue.put((seconds, peak / 1024, base / 1024))


def run(split_by: str, minutes: float, args: argparse.Namespace) -> tuple[float, float, float]:
    """``(seconds, peak RSS MB, RSS MB before decoding)`` in a fresh process; ``split_by``: ``chunks`` or ``pauses``
    (``transcribe``'s), or ``unchunked`` (one encoder call on the whole recording)."""
    return in_fresh_process(_measure, split_by, minutes, args.threads, args.chunk_length, args.stride_length,
                            args.pause_every)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--minutes", type=float, default=10.0)
    parser.add_argument("--unchunked-minutes", type=float, default=2.0)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--chunk-length", type=float, default=30.0)
    parser.add_argument("--stride-length", type=float, default=5.0)
    parser.add_argument("--pause-every", type=float, default=5.0, metavar="SECONDS",
                        help="0.5 s of faint noise after every this many seconds of chirp (0: no pauses)")
    args = parser.parse_args()
    print(f"demo-sized fbank conformer (random weights), {args.threads} threads, chunks of {args.chunk_length:g} s "
          f"with {args.stride_length:g} s strides, a 0.5 s pause every {args.pause_every:g} s\n")
    print(f"{'what':<34} {'audio s':>8} {'seconds':>8} {'RTF':>7} {'peak RSS MB':>12} {'before MB':>10}")
    rows = {}
    for label, split_by, minutes in (
        (f"unchunked, {args.unchunked_minutes:g} min", "unchunked", args.unchunked_minutes),
        (f"chunks, {args.unchunked_minutes:g} min", "chunks", args.unchunked_minutes),
        (f"chunks, {args.minutes:g} min", "chunks", args.minutes),
        (f"pauses, {args.unchunked_minutes:g} min", "pauses", args.unchunked_minutes),
        (f"pauses, {args.minutes:g} min", "pauses", args.minutes),
    ):
        seconds, peak, base = run(split_by, minutes, args)
        rows[label] = (seconds, peak)
        audio = minutes * 60
        print(f"{label:<34} {audio:>8.0f} {seconds:>8.1f} {seconds / audio:>7.4f} {peak:>12.0f} {base:>10.0f}")
    short = f"{args.unchunked_minutes:g} min"
    print()
    for split in ("chunks", "pauses"):
        ratio = rows[f"{split}, {short}"][1] / rows[f"unchunked, {short}"][1]
        long_peak = rows[f"{split}, {args.minutes:g} min"][1]
        print(f"{split}: peak memory / unchunked at {short}: {ratio:.2f}; {args.minutes:g}-minute recording within "
              f"1.5 GB peak: {'met' if long_peak <= 1536 else 'MISSED'} ({long_peak:.0f} MB)")


if __name__ == "__main__":
    main()
