"""Latency, compute and memory of streaming recognition (``StreamingRecognizer``), on CPU, in one run.

Usage::

    OMP_NUM_THREADS=1 python scripts/bench_streaming.py                       # demo + deployment sizes, 1 minute
    OMP_NUM_THREADS=1 python scripts/bench_streaming.py --sizes demo --minutes 60 --num-left-chunks 4
    OMP_NUM_THREADS=1 python scripts/bench_streaming.py --decoders beam,lm,rescore --sizes demo  # utterance ends

Models are built from config with random weights (time and memory do not depend on the weights), with streaming
settings: ``rel_pos`` attention with dynamic chunks and a depthwise convolution of kernel 15 that streams (``--convs``:
``0`` causal, ``chunk`` the dynamic chunk convolution, ``r`` a look-ahead within the chunk; one row each). *demo*:
the demo's shape (fbank Conformer width 144, 4 layers, 4 heads, FFN 576); *deployment*: 12 layers of width 256, 4
heads, FFN 1024. The stream is a noisy chirp generated block by block (0.1 s blocks, as a live source delivers them;
never held whole), fed as fast as it is decoded. Each size and convolution runs in its own process (``multiprocessing``
spawn), so resident memory is that configuration's alone.

Printed per size: compute per chunk (median and p95, ms, wall clock; and the median CPU time of the thread that
encoded the chunk, which the waits for a core on a shared machine do not inflate), real-time factor (compute / audio),
the time from the end of the audio to the final text (``finalize``: the last partial chunk), resident memory after the
first minute and at the end, and, measured in the same process as the baseline, the real-time factor of one offline
forward over the first minute (full context, one encoder call): ``ratio`` = streaming RTF / offline RTF.

``--decoders`` measures the end of an utterance with the other searches, in a second table: each row streams the same
``--utterance-seconds`` (10) of audio once with greedy CTC (the baseline, same process) and once with the decoder:
``beam`` (CTC prefix beam search, width 8), ``lm`` (with a word 3-gram LM fused, width 32 and the offline LM decoder's
pruning; the LM is built by ``lm build`` from 3,000 random sentences over a 2,000-word vocabulary), ``rescore``
(prefix beam search, width 8, and attention rescoring of its 8-best with the LAS decoder; the model is then
``ctc_las`` with the LAS head's default sizes). Printed: compute per chunk (median / p95) and the time from the end of
the audio to the final text, both with the ratio to greedy's. Random weights give flat posteriors on which every label
is a candidate of the beam at every frame: the searches' worst case (posteriors ``flat``). Rows ``peaky`` sharpen the
random CTC head as training does (its weights x25, the blank's bias +12): about 70% of the frames then have the blank
as their best label and 2.7 labels (blank included) lie above the LM search's log-probability floor of -5, on average.
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


def _build(size: str, threads: int, head: str = "ctc", conv: int | str = 0) -> tuple[Any, Any]:
    import torch
    from transformers import Wav2Vec2Processor

    from adaptspeech import AdaptSpeechConfig, AdaptSpeechForCTC, AdaptSpeechForJointCTCAttention
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
        backbone_config=dict(SIZES[size], conv_depthwise_kernel_size=15, conv_lookahead=conv),
        attention={"kind": "rel_pos", "dynamic_chunks": True},
        head=head,
    )
    model_class = AdaptSpeechForCTC if head == "ctc" else AdaptSpeechForJointCTCAttention
    return model_class(config).eval(), Wav2Vec2Processor.from_pretrained(folder)


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
             speech_finder: str | None = None, conv: int | str = 0) -> None:
    import numpy as np
    import torch

    from adaptspeech.inference.streaming.recognizer import StreamingRecognizer

    model, processor = _build(size, threads, conv=conv)
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
    recognizer = _cpu_timed(StreamingRecognizer)(model, processor, chunk_ms=chunk_ms, num_left_chunks=left,
                                                 **endpointing)
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
            cpu_median_ms=float(np.median(np.array(recognizer.chunk_cpu_seconds[:-1]) * 1000)),
            rtf=float(sum(recognizer.chunk_seconds) / seconds),
            vad_rtf=recognizer.vad_seconds / seconds,
            final_ms=final_ms,
            rss_first_minute_mb=rss_first_minute if rss_first_minute is not None else _rss_mb(),
            rss_end_mb=_rss_mb(),
            offline_rtf=offline_rtf,
            parameters=sum(p.numel() for p in model.parameters()),
        )
    )


def _cpu_timed(recognizer_class: type) -> type:
    """``recognizer_class`` recording, beside the wall time of every encoder chunk (``chunk_seconds``), the CPU time of
    the thread that ran it (``chunk_cpu_seconds``): on a shared machine the wall time includes the waits for a core,
    the CPU time does not (one torch thread)."""

    class CPUTimed(recognizer_class):
        def reset(self) -> None:
            super().reset()
            self.chunk_cpu_seconds: list[float] = []

        def _encode(self, raw: Any, final: bool) -> None:
            start = time.thread_time()
            super()._encode(raw, final)
            self.chunk_cpu_seconds.append(time.thread_time() - start)

    return CPUTimed


def _lm_dir(folder: str) -> str:
    """A word 3-gram LM (``lm build``) of 3,000 random sentences of 3-12 words over 2,000 random words."""
    import numpy as np

    from adaptspeech.lm.build import build_arpa

    rng = np.random.default_rng(0)
    letters = list("abcdefghijklmnopqrstuvwxyz")
    words = ["".join(rng.choice(letters, size=rng.integers(2, 9))) for _ in range(2000)]
    lines = [" ".join(rng.choice(words, size=rng.integers(3, 13))) for _ in range(3000)]
    text = f"{folder}/corpus.txt"
    with open(text, "w", encoding="utf-8") as handle:
        handle.write("\n".join(lines) + "\n")
    build_arpa(text, f"{folder}/lm", order=3, progress=False)
    return f"{folder}/lm"


def _stream_once(recognizer: Any, seconds: float) -> tuple[list[float], float]:
    """``(compute seconds of every whole chunk, ms from the end of the audio to the final text)`` of one stream."""
    recognizer.reset()
    for index in range(round(seconds / BLOCK_S)):
        recognizer.accept_waveform(_block(index))
    start = time.perf_counter()
    recognizer.finalize()
    return recognizer.chunk_seconds[:-1], (time.perf_counter() - start) * 1000


def _measure_decoder(size: str, decoder: str, posteriors: str, seconds: float, chunk_ms: float, threads: int,
                     out: Any) -> None:
    import numpy as np
    import torch

    from adaptspeech.inference.streaming.recognizer import StreamingRecognizer

    model, processor = _build(size, threads, head="ctc_las" if decoder == "rescore" else "ctc")
    if posteriors == "peaky":
        with torch.no_grad():
            model.ctc_head.lm_head.weight.mul_(25.0)
            model.ctc_head.lm_head.bias[model.config.pad_token_id] += 12.0
    settings: dict[str, Any] = dict(method="ctc_beam")
    if decoder == "lm":
        settings["lm"] = _lm_dir(tempfile.mkdtemp())
    elif decoder == "rescore":
        settings.update(beam_size=8, rescore=True)
    else:
        settings["beam_size"] = 8
    figures = {}
    for name, options in (("greedy", {}), (decoder, settings)):
        recognizer = StreamingRecognizer(model, processor, chunk_ms=chunk_ms, **options)
        _stream_once(recognizer, 1.0)  # warm-up
        chunks, final_ms = _stream_once(recognizer, seconds)
        chunks = np.array(chunks) * 1000
        figures[name] = (float(np.median(chunks)), float(np.percentile(chunks, 95)), final_ms)
    out.put(dict(size=size, decoder=decoder, posteriors=posteriors, seconds=seconds, chunk_ms=chunk_ms,
                 greedy=figures["greedy"], measured=figures[decoder]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="demo,deployment", help="comma-separated: demo, deployment")
    parser.add_argument("--minutes", type=float, default=1.0, help="stream length (default 1)")
    parser.add_argument("--chunk-ms", type=float, default=640.0, help="chunk length (default 640)")
    parser.add_argument("--num-left-chunks", type=int, default=-1, help="left chunks attended (default -1: all)")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (default 1)")
    parser.add_argument("--convs", default="0", help="comma-separated conv_lookahead values: 0 (causal, the default), "
                        "chunk (dynamic chunk convolution), r (look-ahead within the chunk)")
    parser.add_argument("--speech-finder", default=None, choices=("silero",),
                        help="endpoint on this speech finder (0.5 s of silence); its own compute is the VAD RTF column "
                        "(default: the blanks, no VAD)")
    parser.add_argument("--decoders", default="", help="comma-separated: beam, lm, rescore (a second table; these "
                        "only, without the first table's rows)")
    parser.add_argument("--posteriors", default="flat,peaky", help="--decoders: flat (random weights), peaky")
    parser.add_argument("--utterance-seconds", type=float, default=10.0, help="--decoders: stream length (default 10)")
    args = parser.parse_args()
    context = mp.get_context("spawn")
    if args.decoders:
        _decoder_table(context, args)
        return
    header = (
        "| size | conv | params | chunk | left | minutes | chunk median ms | p95 ms | CPU median ms | RTF | final ms "
        "| RSS 1 min MB | RSS end MB | offline RTF | ratio | VAD RTF |"
    )
    print(header)
    print("|" + "---|" * (header.count("|") - 1))
    for size, conv in [(size, conv) for size in args.sizes.split(",") for conv in args.convs.split(",")]:
        queue = context.Queue()
        process = context.Process(
            target=_measure,
            args=(size, args.minutes, args.chunk_ms, args.num_left_chunks, args.threads, queue, args.speech_finder,
                  conv if conv == "chunk" else int(conv)),
        )
        process.start()
        r = queue.get()
        process.join()
        print(
            f"| {r['size']} | {conv} | {r['parameters'] / 1e6:.1f}M | {r['chunk_ms']:g} ms | {r['num_left_chunks']} | "
            f"{r['minutes']:g} | {r['median_ms']:.1f} | {r['p95_ms']:.1f} | {r['cpu_median_ms']:.1f} | "
            f"{r['rtf']:.4f} | {r['final_ms']:.1f} | "
            f"{r['rss_first_minute_mb']:.0f} | {r['rss_end_mb']:.0f} | {r['offline_rtf']:.4f} | "
            f"{r['rtf'] / r['offline_rtf']:.2f} | {r['vad_rtf']:.4f} |",
            flush=True,
        )


def _decoder_table(context: Any, args: argparse.Namespace) -> None:
    print("| size | decoder | posteriors | seconds | chunk median ms (x greedy) | p95 ms (x greedy) | final ms "
          "(x greedy) | greedy final ms |")
    print("|---|---|---|---|---|---|---|---|")
    for size in args.sizes.split(","):
        for decoder in args.decoders.split(","):
            for posteriors in args.posteriors.split(","):
                queue = context.Queue()
                process = context.Process(target=_measure_decoder, args=(
                    size, decoder, posteriors, args.utterance_seconds, args.chunk_ms, args.threads, queue))
                process.start()
                r = queue.get()
                process.join()
                (g_med, g_p95, g_final), (med, p95, final) = r["greedy"], r["measured"]
                print(f"| {size} | {decoder} | {posteriors} | {r['seconds']:g} | {med:.1f} ({med / g_med:.2f}) | "
                      f"{p95:.1f} ({p95 / g_p95:.2f}) | {final:.1f} ({final / g_final:.2f}) | {g_final:.1f} |",
                      flush=True)


if __name__ == "__main__":
    main()
