"""The size of in-place distillation's term against the CTC loss, to choose ``attention.chunk_distillation``.

Usage::

    python scripts/chunk_distillation_scale.py --model runs/dcconv/base/model --prepared runs/dcconv/prepared

On ``--rows`` training utterances of a trained dynamic-chunk model (evaluation mode: no dropout, no SpecAugment), at
full context and at each ``--chunks`` size (encoder frames): the CTC loss of the chunked forward (the trainer's
reduction) and ``KL(p_full || p_chunk)`` per valid frame
(:func:`~adaptspeech.heads.ctc.chunk_distillation_kl`), the term the weight multiplies. Training data only: the weight
is not chosen on the test set.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch

from adaptspeech import AdaptSpeechForCTC
from adaptspeech.attention.chunking import chunk_attention
from adaptspeech.data.collator import model_collator
from adaptspeech.data.prepared_data import load_prepared
from adaptspeech.heads.ctc import chunk_distillation_kl


def scale(model: AdaptSpeechForCTC, rows: list[dict], collate: object, chunks: list[int],
          batch_size: int) -> dict[int, dict[str, float]]:
    """``{chunk: {"ctc": mean CTC loss, "kl_per_frame": mean KL}}`` over ``rows`` in batches (chunk 0 = full)."""
    sums: dict[int, dict[str, float]] = {c: {"ctc": 0.0, "kl_per_frame": 0.0} for c in chunks}
    batches = [rows[i : i + batch_size] for i in range(0, len(rows), batch_size)]
    with torch.no_grad():
        for batch in batches:
            inputs = collate(batch)
            full = model(**inputs)
            for chunk in chunks:
                with chunk_attention(chunk):
                    out = model(**inputs)
                mask = torch.arange(out.logits.shape[1])[None, :] < out.frame_lengths[:, None]
                sums[chunk]["ctc"] += float(out.loss_ctc) / len(batches)
                kl = chunk_distillation_kl(full.logits, out.logits, mask)
                sums[chunk]["kl_per_frame"] += float(kl) / len(batches)
    return sums


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=Path, required=True, help="a trained dynamic-chunk model folder")
    parser.add_argument("--prepared", type=Path, required=True, help="its prepared data (the train split is read)")
    parser.add_argument("--rows", type=int, default=64)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--chunks", default="0,4,8,16,25", help="chunk sizes in encoder frames (0: full context)")
    parser.add_argument("--out", type=Path, default=None, help="write the figures as JSON here")
    args = parser.parse_args()
    dataset, processor = load_prepared(args.prepared)
    train = dataset["train"].shuffle(seed=0).select(range(min(args.rows, len(dataset["train"]))))
    model = AdaptSpeechForCTC.from_pretrained(args.model).eval()
    chunks = [int(c) for c in args.chunks.split(",")]
    figures = scale(model, list(train), model_collator(model, processor), chunks, args.batch_size)
    print("| chunk (frames) | CTC loss | KL(p_full || p_chunk) per frame |\n|---|---|---|")
    for chunk, row in figures.items():
        print(f"| {chunk or 'full'} | {row['ctc']:.3f} | {row['kl_per_frame']:.4f} |")
    if args.out is not None:
        args.out.write_text(json.dumps({"model": str(args.model), "rows": args.rows, "figures": figures}, indent=2))


if __name__ == "__main__":
    main()
