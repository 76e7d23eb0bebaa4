"""Throughput of pseudo-labelling (:func:`adaptspeech.inference.pseudo_labels.labelling.pseudo_label`): label a pool
with a model by the CTC best path and, with ``--lm``, by the n-gram LM beam search, each into a fresh folder, and print
per decoder the audio labelled, the seconds, the real-time factor (seconds / audio seconds) and its ratio to the best
path measured in the same run, and the process's CPU seconds per audio second (on a shared machine the wall clock
also counts the other processes' turns; on an idle one with ``--threads`` cores the wall-clock RTF lies between the
CPU RTF / threads and the CPU RTF). The target of the self-training loop: an hour of audio labelled with the LM in
at most 3 minutes on 2 CPU cores (RTF <= 0.05).

Usage::

    python scripts/bench_pseudo_label.py --model runs/synthetic_demo/target_adapter/model \\
        --pool runs/synthetic_demo/self_training/pool --lm runs/synthetic_demo/lm --threads 2
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path
from typing import Any

TARGET_RTF = 0.05


def label(model: Any, processor: Any, pool: Path, out: Path, lm_decoder: Any, beam_size: int | None,
          batch_size: int) -> dict[str, Any]:
    """Label ``pool`` into ``out`` (a fresh folder); the run's summary plus its wall time."""
    from adaptspeech.inference.pseudo_labels.labelling import pseudo_label

    started, cpu = time.perf_counter(), time.process_time()
    result = pseudo_label(model, processor, pool, out, model_id="bench", lm_decoder=lm_decoder,
                          lm_key=None if lm_decoder is None else {"alpha": lm_decoder.alpha, "beta": lm_decoder.beta},
                          batch_size=batch_size, beam_size=beam_size, progress=False)
    return {**result.summary, "wall_seconds": time.perf_counter() - started, "cpu_seconds": time.process_time() - cpu}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", required=True, help="the labelling model (a model/ folder with its processor)")
    parser.add_argument("--pool", required=True, help="a pool folder (adaptspeech prepare audio-folder)")
    parser.add_argument("--lm", default=None, help="an LM folder (adaptspeech lm build)")
    parser.add_argument("--alpha", type=float, default=0.5)
    parser.add_argument("--beta", type=float, default=1.0)
    parser.add_argument("--beam-size", type=int, default=16)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--json", default=None, help="also write the figures here")
    parser.add_argument("--out", default=None, help="keep the labelled folders here (default: a temporary folder)")
    args = parser.parse_args(argv)

    import torch
    from transformers import Wav2Vec2Processor

    from adaptspeech.modeling import AdaptSpeechForCTC

    torch.set_num_threads(args.threads)
    model = AdaptSpeechForCTC.from_pretrained(args.model)
    processor = Wav2Vec2Processor.from_pretrained(args.model)
    decoders: dict[str, Any] = {"CTC best path": None}
    if args.lm:
        from adaptspeech.lm.decoder import LMDecoder, build_decoder

        name = f"LM beam {args.beam_size}"
        decoders[name] = LMDecoder(build_decoder(processor.tokenizer, args.lm, args.alpha, args.beta), args.beam_size)
    figures: dict[str, dict[str, Any]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(args.out or tmp)
        for i, (name, decoder) in enumerate(decoders.items()):
            s = label(model, processor, Path(args.pool), folder / f"labels{i}", decoder,
                      args.beam_size if decoder else None, args.batch_size)
            figures[name] = {"segments": s["rows"], "audio_minutes": s["decoded_audio_seconds"] / 60,
                             "decode_seconds": s["decode_seconds"], "wall_seconds": s["wall_seconds"],
                             "real_time_factor": s["real_time_factor"],
                             "cpu_real_time_factor": s["cpu_seconds"] / s["decoded_audio_seconds"],
                             "labels": str(folder / f"labels{i}") if args.out else None}
    base = figures["CTC best path"]["real_time_factor"]
    print(f"pool {args.pool}: {figures['CTC best path']['segments']} segments, "
          f"{figures['CTC best path']['audio_minutes']:.1f} min of audio; {args.threads} threads")
    print("| decoder | seconds | real-time factor | x best path | CPU seconds per audio second |")
    print("| --- | --- | --- | --- | --- |")
    for name, f in figures.items():
        ratio = f["real_time_factor"] / base
        print(f"| {name} | {f['decode_seconds']:.1f} | {f['real_time_factor']:.4f} | {ratio:.2f} | "
              f"{f['cpu_real_time_factor']:.4f} |")
    if args.lm:
        rtf = figures[f"LM beam {args.beam_size}"]["real_time_factor"]
        print(f"with the LM: RTF {rtf:.4f} ({60 * rtf:.1f} min per hour of audio); target <= {TARGET_RTF}: "
              f"{'met' if rtf <= TARGET_RTF else 'missed'}")
    if args.json:
        Path(args.json).write_text(json.dumps({"threads": args.threads, "decoders": figures}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
