"""How well ``prepare align`` recovers the demo's clips from long recordings, with the demo's trained base.

Builds the fixture from the demo's synthetic corpus: the clips of one language (``--language``, default sk; the
``--split``, default test: voices the base never heard) concatenated into recordings of ``--minutes`` (default 10),
with pauses drawn uniformly in 0.1-1.0 s, room noise at -40 dBFS (white noise of that RMS over all of it), and about
``--untranscribed`` (5 %) of the audio speech whose text is left out of the transcript (other clips of the split).
Then aligns each recording with the base model (the language's adapter) and measures, against the true clip
boundaries:

- boundary error (start and end, seconds): median and 95th percentile over the lines kept (targets 40 ms, 150 ms);
- lines recovered: kept / lines of the transcripts (target >= 95 %);
- kept clips that overlap the untranscribed speech by more than 0.1 s (target: none).

Usage (after the demo has trained its base, ``adaptspeech demo``)::

    OMP_NUM_THREADS=1 python recipes/synthetic_demo/alignment_study.py --model runs/synthetic_demo/base/model \
        --corpus runs/synthetic_demo/corpus --output runs/alignment_study

Writes ``<output>/recordings/`` (REC.wav, REC.txt, REC.truth.json), ``<output>/aligned/`` (``prepare align``'s output)
and ``<output>/alignment_study.json``. The second target (a target adapter trained on the aligned clips within 0.3
CER points of the same stage on the true clips) trains the demo's ``stage_target_adapter.yaml`` on
``<output>/aligned`` prepared with ``adaptspeech prepare common-voice --splits train``; this script does not run it.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import numpy as np
import soundfile as sf

from adaptspeech.alignment.corpus import AlignSettings, align_corpus
from adaptspeech.alignment.posteriors import load_alignment_model
from adaptspeech.data.audio import load_audio
from adaptspeech.data.common_voice import find_language_dir, read_tsv

RATE = 16000
NOISE_DBFS = -40.0
PAUSE_S = (0.1, 1.0)


def build_recordings(corpus: Path, language: str, split: str, minutes: float, untranscribed: float, folder: Path,
                     seed: int = 0) -> list[dict[str, Any]]:
    """Write the fixture's recordings into ``folder``; returns their truths (``lines`` with start / end seconds, the
    ``untranscribed`` spans)."""
    rng = np.random.default_rng(seed)
    lang_dir = find_language_dir(corpus, language)
    rows = read_tsv(lang_dir / f"{split}.tsv")
    clips = list(zip(rows["path"], rows["sentence"], strict=True))
    rng.shuffle(clips)
    folder.mkdir(parents=True, exist_ok=True)
    truths, index, number = [], 0, 0
    while index < len(clips):
        parts: list[np.ndarray] = []
        lines: list[dict[str, Any]] = []
        extra: list[tuple[float, float]] = []
        seconds, extra_seconds = 0.0, 0.0
        while index < len(clips) and seconds < minutes * 60:
            path, sentence = clips[index]
            index += 1
            wave = load_audio(lang_dir / "clips" / path, RATE)
            pause = np.zeros(round(rng.uniform(*PAUSE_S) * RATE), dtype=np.float32)
            parts.append(pause)
            seconds += len(pause) / RATE
            hidden = extra_seconds < untranscribed * seconds and seconds > 0
            if hidden:
                extra.append((seconds, seconds + len(wave) / RATE))
                extra_seconds += len(wave) / RATE
            else:
                lines.append({"sentence": sentence, "start": seconds, "end": seconds + len(wave) / RATE})
            parts.append(wave)
            seconds += len(wave) / RATE
        audio = np.concatenate([*parts, np.zeros(round(0.5 * RATE), dtype=np.float32)])
        audio = audio + rng.standard_normal(len(audio)).astype(np.float32) * 10 ** (NOISE_DBFS / 20)
        name = f"rec{number:03d}"
        sf.write(folder / f"{name}.wav", audio, RATE, subtype="PCM_16")
        (folder / f"{name}.txt").write_text("".join(line["sentence"] + "\n" for line in lines), encoding="utf-8")
        truth = {"recording": f"{name}.wav", "lines": lines, "untranscribed": extra}
        (folder / f"{name}.truth.json").write_text(json.dumps(truth, indent=1), encoding="utf-8")
        truths.append(truth)
        number += 1
        if seconds < minutes * 60:
            break  # the last, shorter recording is kept
    return truths


def measure(truths: list[dict[str, Any]], aligned_lang_dir: Path) -> dict[str, Any]:
    """Boundary errors, lines recovered and kept clips over untranscribed speech (module docstring)."""
    import csv

    with (aligned_lang_dir / "alignments.tsv").open(encoding="utf-8") as handle:
        rows = list(csv.DictReader(handle, delimiter="\t", quoting=csv.QUOTE_NONE, escapechar="\\"))
    by_recording: dict[str, list[dict[str, str]]] = {}
    for row in rows:
        by_recording.setdefault(row["source"], []).append(row)
    errors, kept, total, contaminated = [], 0, 0, 0
    for truth in truths:
        aligned = by_recording.get(truth["recording"], [])
        total += len(truth["lines"])
        for line, row in zip(truth["lines"], aligned, strict=False):
            if row["dropped"]:
                continue
            kept += 1
            start, end = float(row["start"]), float(row["end"])
            errors += [abs(start - line["start"]), abs(end - line["end"])]
            overlap = max((min(end, b) - max(start, a) for a, b in truth["untranscribed"]), default=0.0)
            contaminated += overlap > 0.1
    errors_ms = 1000 * np.asarray(errors) if errors else np.asarray([np.nan])
    return {"lines": total, "kept": kept, "recovered": kept / max(total, 1),
            "boundary_error_median_ms": float(np.median(errors_ms)),
            "boundary_error_p95_ms": float(np.percentile(errors_ms, 95)), "kept_over_untranscribed": contaminated,
            "targets": {"median_ms": 40, "p95_ms": 150, "recovered": 0.95, "kept_over_untranscribed": 0}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", required=True, help="the demo's base model folder")
    parser.add_argument("--corpus", required=True, help="the demo's synthetic corpus folder")
    parser.add_argument("--output", required=True)
    parser.add_argument("--language", default="sk")
    parser.add_argument("--split", default="test")
    parser.add_argument("--minutes", type=float, default=10.0)
    parser.add_argument("--untranscribed", type=float, default=0.05)
    args = parser.parse_args()
    output = Path(args.output)
    recordings = output / "recordings"
    truths = build_recordings(Path(args.corpus), args.language, args.split, args.minutes, args.untranscribed,
                              recordings)
    model = load_alignment_model(args.model, args.language)
    pairs = [(recordings / t["recording"], (recordings / t["recording"]).with_suffix(".txt")) for t in truths]
    report = align_corpus(model, pairs, output / "aligned", AlignSettings(), overwrite=True)
    result = {**measure(truths, output / "aligned" / args.language), "report": report}
    (output / "alignment_study.json").write_text(json.dumps(result, indent=1), encoding="utf-8")
    print(json.dumps({k: v for k, v in result.items() if k != "report"}, indent=1))


if __name__ == "__main__":
    main()
