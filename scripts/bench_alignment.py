"""Peak memory and real-time factor of ``prepare align``'s work on a long recording against the model's own decoding
of the same audio, in one run (CPU, one thread by default).

Usage::

    python scripts/bench_alignment.py --minutes 2          # small (a shared machine)
    python scripts/bench_alignment.py --minutes 60         # the one-hour target: peak < 2 GB, RTF <= 0.05

The model and the recording are ``scripts/bench_long_form.py``'s (the demo's shape with random weights, a chirp with
a pause every 5 s): time and memory do not depend on the weights. The transcript is random lines of 80 letters, 14
letters per second of audio (read speech). Each measurement runs in a fresh process (peak resident memory,
``ru_maxrss``): *decode* is ``transcribe`` (split at pauses, CTC greedy), *align* is what ``prepare align`` does per
recording (the posteriors piecewise with the same planner, ctc-segmentation in blocks, the model's decoding of every
line for the CER filter); writing the clips is left out. The ratio align / decode is the cost of alignment over
recognition. Wall-clock and CPU seconds are both printed: on a machine shared with other jobs the process's CPU time
(``time.process_time``, one thread) is the figure that does not depend on their load.
"""

from __future__ import annotations

import argparse
import resource
import sys
import time
from pathlib import Path
from typing import Any

from adaptspeech.memory import in_fresh_process

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_long_form import _build, _recording  # the same model and recording

LETTERS_PER_SECOND = 14.0
LINE_LETTERS = 80


def _lines(seconds: float, vocab: dict[str, int], delimiter: int) -> list[Any]:
    import numpy as np

    rng = np.random.default_rng(0)
    letters = [vocab[c] for c in "abcdefghijklmnopqrstuvwxyz"]
    count = max(1, round(seconds * LETTERS_PER_SECOND / LINE_LETTERS))
    lines = []
    for _ in range(count):
        line = rng.choice(letters, size=LINE_LETTERS)
        line[rng.integers(3, LINE_LETTERS - 3, size=12)] = delimiter
        lines.append(line.astype(np.int64))
    return lines


def _measure(what: str, minutes: float, threads: int, queue: Any) -> None:
    from adaptspeech.alignment.corpus import DEFAULT_EDGE_PAD_S
    from adaptspeech.alignment.edges import clip_edges
    from adaptspeech.alignment.posteriors import AlignmentModel
    from adaptspeech.alignment.segmentation import align_lines, label_gap_frames
    from adaptspeech.inference.long_form.recording import FrameGrid
    from adaptspeech.inference.transcriber import transcribe

    model, processor = _build(threads)
    wave = _recording(minutes, 5.0)
    vocab = dict(processor.tokenizer.get_vocab())
    lines = _lines(len(wave) / 16000, vocab, vocab["|"])
    base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    start, cpu_start = time.perf_counter(), time.process_time()
    if what == "decode":
        transcribe(model, processor, [wave], split_by="pauses")
    else:
        aligner = AlignmentModel(model, processor, "xx", vocab, 0, vocab["|"], FrameGrid.of(model).seconds_per_frame,
                                 True)
        log_probs = aligner.log_probs(wave)
        spans = align_lines(log_probs, lines, 0, max_label_gap=label_gap_frames(aligner.seconds_per_frame))
        clip_edges(spans, wave, aligner.seconds_per_frame, DEFAULT_EDGE_PAD_S)
        for span in spans:
            aligner.greedy_text(log_probs[span.first_frame : span.end_frame])
    seconds, cpu = time.perf_counter() - start, time.process_time() - cpu_start
    queue.put((seconds, cpu, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, base / 1024))


def run(what: str, minutes: float, threads: int) -> tuple[float, float, float, float]:
    """``(seconds, CPU seconds, peak RSS MB, RSS MB before)`` of ``what`` (``decode`` or ``align``) in a fresh
    process."""
    return in_fresh_process(_measure, what, minutes, threads)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--minutes", type=float, default=2.0)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    audio = args.minutes * 60
    print(f"demo-sized fbank conformer (random weights), {args.threads} thread(s), {args.minutes:g}-minute recording, "
          f"{LETTERS_PER_SECOND:g} letters/s of text\n")
    print(f"{'what':<8} {'seconds':>8} {'RTF':>7} {'CPU s':>8} {'CPU RTF':>8} {'peak RSS MB':>12} {'before MB':>10}")
    rows = {}
    for what in ("decode", "align"):
        seconds, cpu, peak, base = run(what, args.minutes, args.threads)
        rows[what] = (seconds, cpu, peak)
        print(f"{what:<8} {seconds:>8.1f} {seconds / audio:>7.4f} {cpu:>8.1f} {cpu / audio:>8.4f} {peak:>12.0f} "
              f"{base:>10.0f}")
    align, decode = rows["align"], rows["decode"]
    print(f"\nalign / decode: time {align[0] / decode[0]:.2f}, CPU time {align[1] / decode[1]:.2f}, peak memory "
          f"{align[2] / decode[2]:.2f}; align RTF {align[0] / audio:.4f} (CPU {align[1] / audio:.4f}; target <= 0.05), "
          f"peak {align[2]:.0f} MB (target < 2048)")


if __name__ == "__main__":
    main()
