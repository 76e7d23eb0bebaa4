"""End-to-end streaming CER of one trained model with its stream's features normalised in several ways, against the
same clips at full context and under the chunk mask (what the model itself loses at each chunk size).

Usage::

    OMP_NUM_THREADS=1 python scripts/bench_streaming_norm.py --run runs/dcconv_utt --stats-from runs/dcconv/prepared \
        --modes sliding,prior,global --out norm.json

The model is ``RUN/base/model`` on the source languages' test clips (``RUN/prepared``, every ``--every``-th clip, the
audio from ``RUN/corpus``); it was trained on features normalised per utterance, which a stream cannot compute. Each
clip goes through :class:`~adaptspeech.inference.streaming.recognizer.StreamingRecognizer` (greedy CTC, the whole
clip accepted at once, then ``finalize``), its :class:`~adaptspeech.inference.streaming.features.StreamFeatures`
replaced per mode (each chunk's units normalised with statistics up to the chunk's end):

* ``sliding``: today's stream, the last ``--norm-window`` seconds (4 s);
* ``prior``: the same window topped up with ``--prior-s`` seconds' worth of global statistics while the stream is
  shorter (Kaldi's ``apply-cmvn-online`` with a global prior: :class:`PriorStreamFeatures`);
* ``global``: the training set's statistics alone (those saved in ``--stats-from``'s processor by ``prepare
  --normalization global`` on the same corpus), as a global-CMVN model streams.

The baselines, in the same run on the same clips (one at a time): the prepared (utterance-normalised) features at full
context and under the chunk mask of each chunk size (:func:`~adaptspeech.attention.chunking.chunk_attention`).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import numpy as np
import torch
from bench_streaming_levers import cer, load_source_test  # scripts/ is on the path of a script run

from adaptspeech.data import load_audio
from adaptspeech.data.feature_types import FeatureType
from adaptspeech.data.prepared_data import load_prepared
from adaptspeech.inference.streaming.features import _NORMALIZE_EPS, StreamFeatures
from adaptspeech.inference.streaming.recognizer import StreamingRecognizer
from adaptspeech.metrics import compute_error_rates
from adaptspeech.runtime.features import GlobalCmvn

MODES = ("sliding", "prior", "global")


class PriorStreamFeatures(StreamFeatures):
    """:class:`StreamFeatures` whose window is topped up with global statistics while it holds fewer than
    ``prior_units`` units: the mean and variance of the window's ``n`` units and ``prior_units - n`` units drawn from
    ``prior`` (per bin, first and second moments summed). ``prior_units = 0`` is :class:`StreamFeatures`."""

    def __init__(self, features: FeatureType, window: int, prior: GlobalCmvn, prior_units: int) -> None:
        super().__init__(features, window)
        self.prior, self.prior_units = prior, prior_units

    def normalize(self, raw: np.ndarray) -> np.ndarray:
        """A step of raw units ``[m, F]`` -> normalised with the window's statistics up to its end and the prior's."""
        if not self.prior_units or len(raw) == 0:
            return super().normalize(raw)
        silent = np.asarray(self.features.digital_silence(raw), dtype=bool)
        self.history = np.concatenate([self.history, raw])[-self.window :]
        self.history_silent = np.concatenate([self.history_silent, silent])[-self.window :]
        values = self.history.astype(np.float64).reshape(len(self.history), -1)
        values = values[~self.history_silent] if (~self.history_silent).any() else values
        count, first, second = len(values), values.sum(axis=0), (values**2).sum(axis=0)
        if count < self.prior_units:
            extra = self.prior_units - count
            first = first + extra * self.prior.mean
            second = second + extra * (self.prior.var + self.prior.mean**2)
            count = self.prior_units
        mean = first / count
        var = np.maximum(second / count - mean**2, 0.0)
        return ((np.asarray(raw, np.float64) - mean) / np.sqrt(var + _NORMALIZE_EPS)).astype(np.float32)


def _mean_cer(hypotheses: list[str], data: Any) -> float:
    """CER % of ``hypotheses`` against ``data``'s texts, the mean over its languages (as the demo reports it)."""
    metrics = compute_error_rates(hypotheses, list(data["text"]), languages=list(data["language"]))
    return 100 * float(np.mean([v["cer"] for v in metrics["per_language"].values()]))


def streamed_cer(model: Any, processor: Any, data: Any, corpus: Path, chunk_ms: float,
                 make_features: Any) -> float:
    """CER % of ``data``'s clips through :class:`StreamingRecognizer` with ``make_features()`` as each stream's
    features."""
    recognizer = StreamingRecognizer(model, processor, chunk_ms=chunk_ms)
    hypotheses = []
    for path, language in zip(data["path"], data["language"], strict=True):
        recognizer.reset()
        recognizer.stream_features = make_features()
        recognizer.accept_waveform(load_audio(str(corpus / language / "clips" / path), 16000))
        hypotheses.append(recognizer.finalize())
    return _mean_cer(hypotheses, data)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--run", type=Path, required=True, help="a demo run trained for streaming (its base)")
    parser.add_argument("--stats-from", type=Path, required=True,
                        help="a prepared folder of the same corpus with global CMVN statistics (prepare "
                        "--normalization global)")
    parser.add_argument("--sources", default="cs,pl,sl,it,es")
    parser.add_argument("--chunks-ms", default="640,320,160")
    parser.add_argument("--modes", default=",".join(MODES))
    parser.add_argument("--every", type=int, default=1, help="every Nth test clip (default 1: all)")
    parser.add_argument("--norm-window", type=float, default=4.0, help="seconds (default 4)")
    parser.add_argument("--prior-s", type=float, default=2.0, help="prior: seconds of global statistics (default 2)")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    torch.set_num_threads(1)
    data, processor, model = load_source_test(args.run, args.sources, args.every)
    features = FeatureType.of(processor.feature_extractor)
    global_features = FeatureType.of(load_prepared(args.stats_from)[1].feature_extractor)
    hop_s = features.unit_hop / features.sampling_rate
    window, prior_units = round(args.norm_window / hop_s), round(args.prior_s / hop_s)
    makers = {
        "sliding": lambda: StreamFeatures(features, window),
        "prior": lambda: PriorStreamFeatures(features, window, global_features.stats(), prior_units),
        "global": lambda: StreamFeatures(global_features, window),
    }
    chunks_ms = [float(c) for c in args.chunks_ms.split(",")]
    frame_ms = model.frame_milliseconds()
    results: dict[str, Any] = {"clips": len(data), "chunks_ms": chunks_ms, "masked": {}, "streamed": {}}
    for chunk_ms in [0.0, *chunks_ms]:
        results["masked"][f"{chunk_ms:g}"] = cer(model, data, processor, round(chunk_ms / frame_ms))
        print("masked", chunk_ms, results["masked"][f"{chunk_ms:g}"], flush=True)
    full = results["masked"]["0"]
    for mode in args.modes.split(","):
        results["streamed"][mode] = [streamed_cer(model, processor, data, args.run / "corpus", c, makers[mode])
                                     for c in chunks_ms]
        print(mode, results["streamed"][mode], flush=True)
        if args.out is not None:
            args.out.parent.mkdir(parents=True, exist_ok=True)
            args.out.write_text(json.dumps(results, indent=2))
    print("| features | full context | " + " | ".join(f"{c:g} ms" for c in chunks_ms) + " |")
    print("|---|---|" + "---|" * len(chunks_ms))
    masked = [results["masked"][f"{c:g}"] for c in chunks_ms]
    print(f"| per utterance, chunk-masked (offline) | {full:.2f} | "
          + " | ".join(f"{v:.2f} ({(v / full - 1) * 100:+.1f}%)" for v in masked) + " |")
    for mode, row in results["streamed"].items():
        print(f"| stream, {mode} | - | " + " | ".join(f"{v:.2f} ({(v / full - 1) * 100:+.1f}%)" for v in row) + " |")


if __name__ == "__main__":
    main()
