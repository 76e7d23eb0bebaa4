"""Decoding-time levers on a dynamic chunk convolution (DCConv) base's chunk-masked forward, against the same clips'
full context and plain chunk mask.

Usage::

    OMP_NUM_THREADS=1 python scripts/bench_streaming_levers.py --run runs/dcconv --out levers.json

``RUN/base/model`` on the source languages' test sets (``RUN/prepared``), one clip at a time (no padding), greedy CTC,
the mean of the per-language CERs. Rows, per chunk size (``--chunks-ms``):

* ``masked``: the chunk mask as a stream computes it (all left chunks; equal to ``StreamingRecognizer`` on the audio
  for a global-CMVN model, docs/streaming.md);
* ``left context``: ``num_left_chunks`` such that about ``--left-s`` seconds of left chunks are attended;
* ``convolution past the chunk's end``: the attention chunked, the depthwise convolution symmetric (its ``(k-1)/2``
  frames of look-ahead reach into the next chunk). No stream computes this at the chunk's latency: under chunked
  attention a frame of the next chunk needs that whole chunk at the layer below, so an exact stream waits one more
  chunk per layer. It is the upper bound of what decoding with the convolution's look-ahead could give.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import numpy as np
import torch

from adaptspeech import AdaptSpeechForCTC
from adaptspeech.attention.chunking import chunk_attention
from adaptspeech.backbones.causal_conv import ChunkDepthwiseConv1d
from adaptspeech.data.prepared_data import load_prepared, select_languages
from adaptspeech.evaluation import evaluate_dataset


def cer(model: Any, data: Any, processor: Any, chunk: int, left: int = -1) -> float:
    """CER % (mean over languages) under ``chunk_attention(chunk, left)``, one clip at a time."""
    with chunk_attention(chunk, left):
        metrics = evaluate_dataset(model, data, processor, method="ctc_greedy", batch_size=1, progress=False)
    return 100 * float(np.mean([v["cer"] for v in metrics["per_language"].values()]))


def load_source_test(run: Path, sources: str, every: int) -> tuple[Any, Any, Any]:
    """The run's source-language test clips (every ``every``-th), its processor and its base model (eval mode)."""
    dataset, processor = load_prepared(run / "prepared")
    data = select_languages(dataset["test"], sources.split(","), "test", "evaluation")
    data = data.select(range(0, len(data), every))
    return data, processor, AdaptSpeechForCTC.from_pretrained(run / "base" / "model").eval()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--run", type=Path, required=True)
    parser.add_argument("--sources", default="cs,pl,sl,it,es")
    parser.add_argument("--chunks-ms", default="640,320,160")
    parser.add_argument("--left-s", type=float, default=2.56, help="left context of the left-context row (seconds)")
    parser.add_argument("--every", type=int, default=1, help="every Nth test clip (default 1: all)")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    torch.set_num_threads(1)
    data, processor, model = load_source_test(args.run, args.sources, args.every)
    frame_ms = model.frame_milliseconds()
    chunks = [round(float(c) / frame_ms) for c in args.chunks_ms.split(",")]
    full = cer(model, data, processor, 0)
    rows: dict[str, list[float]] = {"masked": [cer(model, data, processor, c) for c in chunks]}
    rows[f"left context {args.left_s:g} s"] = [
        cer(model, data, processor, c, max(1, round(args.left_s * 1000 / frame_ms / c))) for c in chunks]
    original = ChunkDepthwiseConv1d.chunk_size
    ChunkDepthwiseConv1d.chunk_size = lambda self: 0  # the convolution at full context, the attention chunked
    try:
        rows["convolution past the chunk's end"] = [cer(model, data, processor, c) for c in chunks]
    finally:
        ChunkDepthwiseConv1d.chunk_size = original
    print(f"| decoding | full context | {' | '.join(f'{c * frame_ms:g} ms' for c in chunks)} |")
    print("|---|---|" + "---|" * len(chunks))
    for name, row in rows.items():
        cells = " | ".join(f"{v:.2f} ({(v / full - 1) * 100:+.1f}%)" for v in row)
        print(f"| {name} | {full:.2f} | {cells} |")
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps({"clips": len(data), "chunks_ms": [c * frame_ms for c in chunks],
                                        "full_context": full, "rows": rows}, indent=2))


if __name__ == "__main__":
    main()
