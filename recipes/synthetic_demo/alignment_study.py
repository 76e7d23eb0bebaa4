"""How well ``prepare align`` recovers the demo's clips from long recordings, with the demo's trained base.

Builds the fixture from the demo's synthetic corpus: the clips of one language (``--language``, default sk; the
``--split``, default test: voices the base never heard) concatenated into recordings of ``--minutes`` (default 10),
with pauses drawn uniformly in 0.1-1.0 s, room noise at -40 dBFS (white noise of that RMS over all of it), and about
``--untranscribed`` (5 %) of the audio speech whose text is left out of the transcript (other clips of the split).
Then aligns each recording with the base model (its shared head: the demo's base has no adapters) and measures,
against the true clip boundaries:

- boundary error (start and end, seconds): median and 95th percentile over the lines kept (targets 40 ms, 150 ms);
- lines recovered: kept / lines of the transcripts (target >= 95 %);
- kept clips that overlap the untranscribed speech by more than 0.1 s (target: none).

Usage (after the demo has trained its base, ``adaptspeech demo``)::

    OMP_NUM_THREADS=1 python recipes/synthetic_demo/alignment_study.py --model runs/synthetic_demo/base/model \
        --corpus runs/synthetic_demo/corpus --output runs/alignment_study

With the zero-shot base as aligner the filters chosen on the dev split (``--split dev``) are ``--fold-cer --max-cer
75 --min-score -3 --min-seconds 0.5`` (docs/data.md).

Writes ``<output>/recordings/`` (REC.wav, REC.txt, REC.truth.json), ``<output>/aligned/`` (``prepare align``'s output)
and ``<output>/alignment_study.json``.

**The second target** (a target adapter trained on aligned clips within 0.3 CER points of the same stage on the true
clips), once the demo run has trained its ``target_adapter`` stage::

    OMP_NUM_THREADS=1 python recipes/synthetic_demo/alignment_study.py --model runs/synthetic_demo/base/model \
        --corpus runs/synthetic_demo/corpus --output runs/alignment_adapter --adapter-run runs/synthetic_demo \
        --override threads=1 --override 'baselines={}' --override lm.enabled=false \
        --fold-cer --max-cer 75 --min-score -3 --min-seconds 0.5 [--noise-dbfs none]

takes the clips the run's ``target_adapter`` stage trains on (its stage settings from this recipe folder with the run's
output folder and ``--override`` values: the target's training rows, its ``target_subset`` drawn with the stage's seed
and held-out speakers), joins them into recordings as above (no untranscribed speech; with ``--noise-dbfs none`` no
added noise either: the clips then differ from the true ones by their cuts alone), aligns them with the base,
prepares the kept clips with the run's processor (its vocabulary and features; the run's dev and test splits beside
them) into ``<output>/prepared``, trains the stage on all of them into ``<output>/target_adapter``
(the same settings, from the run's ``source_adapters`` model) and decodes the test set with both stage models as the
recipe evaluates (``scripts/compare_systems.py``'s paired bootstrap). It reads the run's folders and writes nothing
into them; ``<output>/adapter_study.json`` holds the figures.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import numpy as np
import soundfile as sf

from adaptspeech.alignment.corpus import DEFAULT_EDGE_PAD_S, AlignSettings, align_corpus
from adaptspeech.alignment.filters import AlignmentFilters
from adaptspeech.alignment.posteriors import load_alignment_model
from adaptspeech.data.audio import load_audio
from adaptspeech.data.common_voice import find_language_dir, read_tsv

RATE = 16000
NOISE_DBFS = -40.0
PAUSE_S = (0.1, 1.0)


def split_clips(corpus: Path, language: str, split: str) -> list[tuple[Path, str]]:
    """``[(clip file, sentence), ...]`` of one split of a language of the corpus, in its TSV's order."""
    lang_dir = find_language_dir(corpus, language)
    rows = read_tsv(lang_dir / f"{split}.tsv")
    return [(lang_dir / "clips" / path, sentence) for path, sentence in zip(rows["path"], rows["sentence"],
                                                                           strict=True)]


def build_recordings(clips: list[tuple[Path, str]], minutes: float, untranscribed: float, folder: Path,
                     seed: int = 0, noise_dbfs: float | None = NOISE_DBFS) -> list[dict[str, Any]]:
    """Write the fixture's recordings of ``clips`` (shuffled) into ``folder``; returns their truths (``lines`` with
    start / end seconds, the ``untranscribed`` spans: clips whose text is left out, about ``untranscribed`` of the
    audio). ``noise_dbfs``: the room noise's level (None: none, the pauses digital silence)."""
    rng = np.random.default_rng(seed)
    clips = list(clips)
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
            wave = load_audio(path, RATE)
            pause = np.zeros(round(rng.uniform(*PAUSE_S) * RATE), dtype=np.float32)
            parts.append(pause)
            seconds += len(pause) / RATE
            hidden = extra_seconds < untranscribed * seconds and seconds > 0
            if hidden:
                extra.append((seconds, seconds + len(wave) / RATE))
                extra_seconds += len(wave) / RATE
            else:
                lines.append({"sentence": sentence, "start": seconds, "end": seconds + len(wave) / RATE,
                              "clip": path.name})
            parts.append(wave)
            seconds += len(wave) / RATE
        audio = np.concatenate([*parts, np.zeros(round(0.5 * RATE), dtype=np.float32)])
        if noise_dbfs is not None:
            audio = audio + rng.standard_normal(len(audio)).astype(np.float32) * 10 ** (noise_dbfs / 20)
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


def align_settings(args: argparse.Namespace) -> AlignSettings:
    """``prepare align``'s settings with the study's ``--edge-pad``, ``--min-score``, ``--max-cer``, ``--fold-cer``
    and ``--min-seconds``; with ``--keep-all`` filters that keep every line (the raw alignment: the plumbing at toy
    size, or a sweep of the thresholds over ``alignments.tsv``)."""
    if args.keep_all:
        return AlignSettings(AlignmentFilters(-1e9, 1e9, 0.01, 1e9, 0.0, 1e9), min_matched=0.0,
                             edge_pad_s=args.edge_pad)
    return AlignSettings(AlignmentFilters(min_score=args.min_score, max_cer=args.max_cer, min_seconds=args.min_seconds,
                                          fold_cer=args.fold_cer), edge_pad_s=args.edge_pad)


def stage_settings(run: Path, overrides: list[str]) -> tuple[Any, dict[str, Any]]:
    """``(the recipe, the target_adapter stage's settings)`` of the demo run in ``run`` (the recipe's own stage
    file with the run's overrides): the same budget, seed and prepared data the run's stage trains on."""
    from adaptspeech.recipes import load_recipe
    from adaptspeech.recipes.simadapter.stages import PREPARED, recipe_plan, stage_spec

    recipe = load_recipe(Path(__file__).resolve().parent, [f"output_dir={run}", *overrides])
    planned = next(stage for stage in recipe_plan(recipe) if stage.name == "target_adapter")
    return recipe, stage_spec(recipe, planned, run / PREPARED)


def stage_clips(settings: dict[str, Any], corpus: Path) -> list[tuple[Path, str]]:
    """The clips the stage trains on (its language's training rows, its ``train_subset`` drawn as the stage draws
    it), as files of ``corpus``."""
    from adaptspeech.data.prepared_data import load_prepared, select_languages
    from adaptspeech.data.subsets import low_resource_subset, speakers

    data = settings["data"]
    (language,) = data["train_languages"]
    dataset, _ = load_prepared(data["prepared_dir"])
    train = select_languages(dataset["train"], [language], "train", "data.train_languages")
    if data.get("train_subset"):
        train = low_resource_subset(train, data["train_subset"], seed=data.get("subset_seed", 0),
                                    exclude_speakers=speakers(dataset["test"]))
    clips_dir = find_language_dir(corpus, language) / "clips"
    return [(clips_dir / path, sentence) for path, sentence in zip(train["path"], train["sentence"], strict=True)]


def prepare_aligned(aligned_root: Path, language: str, run_prepared: Path, out: Path) -> int:
    """``out``: a prepared folder whose training split is the aligned clips of ``aligned_root`` (prepared with the
    run's processor: the same vocabulary and features) and whose dev and test splits are the run's; returns the
    training rows."""
    from datasets import DatasetDict

    from adaptspeech.data.common_voice import load_common_voice, prepare_dataset
    from adaptspeech.data.prepared_data import COMPLETE_MARKER, load_prepared

    dataset, processor = load_prepared(run_prepared)
    config = json.loads((run_prepared / COMPLETE_MARKER).read_text(encoding="utf-8"))
    prepared, _ = prepare_dataset(load_common_voice(aligned_root, [language], ["train"]), processor,
                                  max_seconds=config.get("max_seconds"))
    DatasetDict({"train": prepared["train"], "dev": dataset["dev"], "test": dataset["test"]}).save_to_disk(
        str(out / "dataset"))
    processor.save_pretrained(out / "processor")
    (out / COMPLETE_MARKER).write_text(json.dumps({**config, "train_source": str(aligned_root)}, indent=1),
                                       encoding="utf-8")
    return len(prepared["train"])


def compare_on_test(recipe: Any, prepared: Path, systems: dict[str, Path], samples: int = 1000) -> dict[str, Any]:
    """Test CER of each system (the recipe's evaluation: split, method, options) and the paired bootstrap of the
    second minus the first (``scripts/compare_systems.py``'s)."""
    from adaptspeech.data.prepared_data import load_prepared, select_languages
    from adaptspeech.evaluation import transcribe_dataset
    from adaptspeech.metrics.significance import paired_bootstrap, utterance_edits
    from adaptspeech.saved_model import load_saved_model

    dataset, processor = load_prepared(prepared)
    split = recipe.evaluation.split
    test = select_languages(dataset[split], [recipe.target], split, "evaluation")
    references = list(test["text"])
    edits, units = {}, None
    for name, model_dir in systems.items():
        hypotheses = transcribe_dataset(load_saved_model(model_dir), test, processor, method=recipe.evaluation.method,
                                        progress=False, **dict(recipe.evaluation.options))
        edits[name], units = utterance_edits(hypotheses, references, "char")
    (reference, a), (candidate, b) = edits.items()
    result = paired_bootstrap(b, a, units, num_samples=samples)
    cer = {name: 100 * float(e.sum() / units.sum()) for name, e in edits.items()}
    return {"utterances": len(references), "cer": cer,
            "delta_points": 100 * result.delta, "ci_points": [100 * result.low, 100 * result.high],
            "p_not_better": result.p_not_better, "describe": result.describe(candidate, reference),
            "target": "aligned - true within 0.3 points"}


def adapter_study(args: argparse.Namespace) -> dict[str, Any]:
    """The second target: the run's ``target_adapter`` stage trained again on the aligned clips of the audio of its
    own training subset, against the run's stage on the true clips (module docstring)."""
    import torch

    from adaptspeech.training.stage import run_stage

    run, output = Path(args.adapter_run), Path(args.output)
    recipe, settings = stage_settings(run, args.override)
    clips = stage_clips(settings, Path(args.corpus))
    truths = build_recordings(clips, args.minutes, 0.0, output / "recordings", noise_dbfs=args.noise_dbfs)
    model = load_alignment_model(args.model, recipe.target)
    pairs = [(output / "recordings" / t["recording"], (output / "recordings" / t["recording"]).with_suffix(".txt"))
             for t in truths]
    report = align_corpus(model, pairs, output / "aligned", align_settings(args), overwrite=True)
    alignment = measure(truths, output / "aligned" / recipe.target)
    prepared = output / "prepared"
    rows = prepare_aligned(output / "aligned", recipe.target, run / "prepared", prepared)
    settings = {**settings, "output_dir": str(output / "target_adapter"),
                "data": {**settings["data"], "prepared_dir": str(prepared), "train_subset": None}}
    torch.set_num_threads(args.threads)
    run_stage(settings, progress=False, overwrite=True)
    comparison = compare_on_test(recipe, run / "prepared", {"true clips": run / "target_adapter" / "model",
                                                            "aligned clips": output / "target_adapter" / "model"})
    true_seconds = sum(t["end"] - t["start"] for truth in truths for t in truth["lines"])
    return {"true_clips": len(clips), "true_minutes": true_seconds / 60, "aligned_rows": rows,
            "aligned_minutes": report["kept_seconds"] / 60, "alignment": alignment, "comparison": comparison}


def _noise_level(text: str) -> float | None:
    return None if text == "none" else float(text)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", required=True, help="the demo's base model folder")
    parser.add_argument("--corpus", required=True, help="the demo's synthetic corpus folder")
    parser.add_argument("--output", required=True)
    parser.add_argument("--language", default="sk")
    parser.add_argument("--split", default="test")
    parser.add_argument("--minutes", type=float, default=10.0)
    parser.add_argument("--untranscribed", type=float, default=0.05)
    parser.add_argument("--adapter-run", metavar="RUN", help="the second target instead: a finished demo run's "
                        "output folder (its prepared data, source adapters and target adapter are read, not written)")
    parser.add_argument("--override", action="append", default=[], metavar="KEY=VALUE",
                        help="the run's recipe overrides that change its target_adapter stage (repeatable)")
    parser.add_argument("--threads", type=int, default=1, help="torch threads of the stage's training")
    parser.add_argument("--keep-all", action="store_true", help="no filters (a toy run's plumbing check)")
    parser.add_argument("--edge-pad", type=float, default=DEFAULT_EDGE_PAD_S, help="seconds added at a clip's edges")
    parser.add_argument("--min-score", type=float, default=AlignmentFilters.min_score)
    parser.add_argument("--max-cer", type=float, default=AlignmentFilters.max_cer)
    parser.add_argument("--fold-cer", action="store_true", help="the CER filter without diacritics and case")
    parser.add_argument("--min-seconds", type=float, default=AlignmentFilters.min_seconds,
                        help="shortest clip kept (the demo's subset has lines of 0.6-1 s)")
    parser.add_argument("--noise-dbfs", type=_noise_level, default=NOISE_DBFS, metavar="DBFS",
                        help="the room noise over the recordings (default -40; none: no noise, so that the adapter "
                        "comparison differs from the true clips by the cuts alone)")
    args = parser.parse_args()
    output = Path(args.output)
    if args.adapter_run:
        result = adapter_study(args)
        (output / "adapter_study.json").write_text(json.dumps(result, indent=1), encoding="utf-8")
        print(json.dumps(result, indent=1))
        return
    recordings = output / "recordings"
    truths = build_recordings(split_clips(Path(args.corpus), args.language, args.split), args.minutes,
                              args.untranscribed, recordings, noise_dbfs=args.noise_dbfs)
    model = load_alignment_model(args.model, args.language)
    pairs = [(recordings / t["recording"], (recordings / t["recording"]).with_suffix(".txt")) for t in truths]
    report = align_corpus(model, pairs, output / "aligned", align_settings(args), overwrite=True)
    result = {**measure(truths, output / "aligned" / args.language), "report": report}
    (output / "alignment_study.json").write_text(json.dumps(result, indent=1), encoding="utf-8")
    print(json.dumps({k: v for k, v in result.items() if k != "report"}, indent=1))


if __name__ == "__main__":
    main()
