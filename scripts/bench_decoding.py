"""Benchmark the decoders of :mod:`adaptspeech.decoding` on the same utterances, in one run (CPU).

Usage::

    python scripts/bench_decoding.py                  # full run (about 2 minutes on 2 cores, most of it training)
    python scripts/bench_decoding.py --quick          # smaller corpus and fewer steps, for a smoke test
    python scripts/bench_decoding.py --threads 1 --batch-size 1 --repeats 5

What is measured on: no real speech is available offline, so the script trains the tiny joint model of
:mod:`adaptspeech.testing.tones` (two stride-2 convolutions to 40 ms frames, a BiLSTM encoder of width 96,
a CTC head, and a LAS head with one pBLSTM layer, LSTM speller of width 96, about 0.3M parameters) on
``--train-utterances`` synthetic tone utterances (8 "characters", 10 vocabulary entries) and decodes
``--test-utterances`` *unseen* ones of 12-30 characters (about 2-5 s of audio, 50-125 encoder frames). The
figures therefore measure the search algorithms around a small network: with a real encoder most of the time
goes to the encoder, which is excluded here, and a speller of width 320-1024 and a vocabulary of 30-5000 make
every attention step dearer.

Timing: the encoder runs once; each method then decodes all test utterances in batches of ``--batch-size``
from the cached encoder output (``torch.no_grad``), ``--repeats`` times after one warm-up; the fastest run counts.
*utt/s* = utterances / seconds; *RTF* = seconds / audio seconds, with audio seconds = real encoder frames x
40 ms (25 Hz); *x greedy* = time / CTC-greedy time measured in the same run. CER is printed as a sanity check.
Methods: CTC greedy, CTC prefix beam 8 and 32, attention greedy, attention beam 1 / 4 / 8, joint CTC/attention
beam 8 (CTC weight ``--ctc-weight``). Beam searches use their defaults (length normalisation 1.0, pre-beam 12).
Then, when pyctcdecode is installed, our CTC prefix beam search against pyctcdecode's (no LM) at beams 8 and 32
(see :func:`compare_with_pyctcdecode`).
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

import torch

from adaptspeech.decoding import decode
from adaptspeech.testing.tones import (
    FRAME_SECONDS,
    TONE_ALPHABET,
    TinyJointCTCLAS,
    character_error_rate,
    decode_ids,
    make_tone_batch,
    random_texts,
    tiny_las_config,
    train_tiny_joint,
)

Decoder = Callable[[dict], list[list[int]]]


def methods(ctc_weight: float) -> list[tuple[str, str, dict]]:
    """(label, method name, options) in table order; the first row is the baseline."""
    return [
        ("CTC greedy", "ctc_greedy", {}),
        ("CTC prefix beam 8", "ctc_beam", dict(beam_size=8)),
        ("CTC prefix beam 32", "ctc_beam", dict(beam_size=32)),
        ("attention greedy", "attention_greedy", {}),
        ("attention beam 1", "attention_beam", dict(beam_size=1)),
        ("attention beam 4", "attention_beam", dict(beam_size=4)),
        ("attention beam 8", "attention_beam", dict(beam_size=8)),
        (f"joint beam 8 (ctc {ctc_weight})", "joint", dict(beam_size=8, ctc_weight=ctc_weight)),
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--train-utterances", type=int, default=384)
    parser.add_argument("--test-utterances", type=int, default=32)
    parser.add_argument("--steps", type=int, default=600, help="training steps (batches of 16)")
    parser.add_argument("--batch-size", type=int, default=8, help="utterances decoded together")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1, help="torch threads (training and decoding)")
    parser.add_argument("--ctc-weight", type=float, default=0.3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--quick", action="store_true", help="96 training utterances, 150 steps, 8 test ones")
    args = parser.parse_args()
    if args.quick:
        args.train_utterances, args.steps, args.test_utterances, args.repeats = 96, 150, 8, 1
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)

    started = time.perf_counter()
    texts = random_texts(args.train_utterances, 6, 24, seed=args.seed + 1)
    train = [make_tone_batch(texts[i : i + 16], seed=args.seed + 100 + i) for i in range(0, len(texts), 16)]
    model = TinyJointCTCLAS(tiny_las_config(max_target_length=128, dropout=0.1), ctc_weight=0.3)
    losses = train_tiny_joint(model, train, args.steps)
    parameters = sum(p.numel() for p in model.parameters())
    print(
        f"trained {parameters / 1e6:.2f}M parameters on {args.train_utterances} utterances, {args.steps} "
        f"steps in {time.perf_counter() - started:.0f} s (last loss {losses[-1]:.3f}); {args.threads} threads"
    )

    test_texts = random_texts(args.test_utterances, 12, 30, seed=args.seed + 2)
    test = make_tone_batch(test_texts, seed=args.seed + 3)  # the same utterances whatever --batch-size
    chunks = []
    with torch.no_grad():
        for i in range(0, len(test_texts), args.batch_size):
            lengths = test.feature_lengths[i : i + args.batch_size]
            features = test.features[i : i + args.batch_size, : int(lengths.max())]
            encoded = model.encode(features, lengths)
            chunks.append(dict(ctc_log_probs=encoded.ctc_log_probs, ctc_lengths=encoded.padding_mask.sum(1),
                               decoder=model.las, encoder_hidden_states=encoded.hidden_states,
                               encoder_padding_mask=encoded.padding_mask))
    frames = sum(int(c["ctc_lengths"].sum()) for c in chunks)
    audio_seconds = frames * FRAME_SECONDS
    print(
        f"decoding {len(test_texts)} unseen utterances ({audio_seconds:.1f} s of audio at 25 Hz, "
        f"{frames / len(test_texts):.0f} frames and {sum(map(len, test_texts)) / len(test_texts):.0f} "
        f"characters on average) in batches of {args.batch_size}, best of {args.repeats}\n"
    )

    header = f"{'method':<26} {'utt/s':>8} {'RTF':>8} {'x greedy':>9} {'CER %':>6}"
    print(header)
    print("-" * len(header))
    baseline = None
    for label, name, options in methods(args.ctc_weight):
        with torch.no_grad():
            hypotheses = [ids for chunk in chunks for ids in decode(name, **chunk, **options)]  # warm-up
            best = float("inf")
            for _ in range(args.repeats):
                start = time.perf_counter()
                for chunk in chunks:
                    decode(name, **chunk, **options)
                best = min(best, time.perf_counter() - start)
        baseline = baseline or best
        cer = 100 * character_error_rate(test_texts, [decode_ids(ids) for ids in hypotheses])
        print(
            f"{label:<26} {len(test_texts) / best:>8.1f} {best / audio_seconds:>8.1e} {best / baseline:>9.1f} "
            f"{cer:>6.2f}"
        )
    compare_with_pyctcdecode(chunks, test_texts, args.repeats)


def compare_with_pyctcdecode(chunks: list[dict], test_texts: list[str], repeats: int) -> None:
    """Our CTC prefix beam search against pyctcdecode's beam search (no LM) on the same log-probabilities, beams 8
    and 32: CER of each and time ours / pyctcdecode's, measured here in the same run (best of ``repeats``, the
    two timed alternately so that load on a shared machine hits both). Ours runs twice: exact (the defaults, no
    pruning beyond the beam) and with pyctcdecode's own pruning defaults (``token_min_logp`` -5,
    ``beam_prune_logp`` -10), which pyctcdecode always applies."""
    try:
        from pyctcdecode import build_ctcdecoder
        from pyctcdecode.constants import DEFAULT_MIN_TOKEN_LOGP, DEFAULT_PRUNE_LOGP
    except ImportError:
        print("\npyctcdecode is not installed: no comparison (pip install --no-deps pyctcdecode==0.5.0 pygtrie)")
        return
    vocab = chunks[0]["ctc_log_probs"].shape[-1]
    labels = ["", *TONE_ALPHABET, *(f"<{i}>" for i in range(len(TONE_ALPHABET) + 1, vocab))]  # 0 = blank
    decoder = build_ctcdecoder(labels)
    rows = [c["ctc_log_probs"][i, : int(n)].numpy() for c in chunks for i, n in enumerate(c["ctc_lengths"])]
    pruning = dict(token_min_logp=DEFAULT_MIN_TOKEN_LOGP, beam_prune_logp=DEFAULT_PRUNE_LOGP)
    print(f"\n{'CTC beam search, no LM':<34} {'ours s':>8} {'pyctcdecode s':>14} {'ours/theirs':>11} "
          f"{'CER ours':>9} {'CER theirs':>10}")
    for beam in (8, 32):
        for label, options in ((f"beam {beam}, ours exact", {}),
                               (f"beam {beam}, ours pruned -5 / -10", pruning)):
            def ours(beam: int = beam, options: dict = options) -> list[str]:
                return [decode_ids(ids) for c in chunks for ids in decode("ctc_beam", **c, beam_size=beam, **options)]

            def theirs(beam: int = beam) -> list[str]:
                return [decode_ids([labels.index(ch) for ch in decoder.decode(x, beam_width=beam, **pruning)
                                    if ch in TONE_ALPHABET]) for x in rows]

            runs = {"ours": ours, "theirs": theirs}
            outputs = {name: run() for name, run in runs.items()}  # warm-up
            timings = dict.fromkeys(runs, float("inf"))
            for _ in range(repeats):
                for name, run in runs.items():
                    start = time.perf_counter()
                    run()
                    timings[name] = min(timings[name], time.perf_counter() - start)
            cer = {name: 100 * character_error_rate(test_texts, out) for name, out in outputs.items()}
            print(f"{label:<34} {timings['ours']:>8.3f} {timings['theirs']:>14.3f} "
                  f"{timings['ours'] / timings['theirs']:>11.2f} {cer['ours']:>9.2f} {cer['theirs']:>10.2f}")


if __name__ == "__main__":
    main()
