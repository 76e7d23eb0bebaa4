"""The synthetic demo's n-gram LM rows: a word LM of the target language from external text, tuned on the target's dev
split, applied to the target systems on the test set (rows ``<system> + 4-gram LM``).

The recipe section (absent or ``enabled: false``: no LM rows)::

    lm:
      enabled: true
      sentences: 20000           # external text: sentences sampled from wordfreq's list of the target language
      seed: 1                    # the sample's seed (its own random stream, independent of the corpus's sentences)
      order: 4                   # n-gram order, 2..5 (kaldingram's Kneser-Ney estimator)
      alphas: [0.25, 0.5, 0.75]  # LM weights tried on dev
      betas: [0.0, 1.0, 2.0]     # word insertion bonuses tried on dev
      beam_size: 16              # pyctcdecode's beam width (tuning and test)
      systems: [target_adapter, fusion]

The text: ``sentences`` sentences of 3 to 10 words (the corpus's ``words_per_sentence``) drawn independently with
probability proportional to wordfreq's frequency (``^ frequency_exponent``) from the *whole* cleaned word list of
the target language (:func:`~adaptspeech.data.synthetic_plan.load_word_list` with the corpus's settings), the way the
synthetic corpus draws its sentences but from another random stream; any sampled sentence equal to a dev or test
sentence of the target is dropped. Like any real external corpus of the language, it holds words of the test set:
the synthetic test split's held-out words are wordfreq words too (``results.json`` gives the share of test words
in the LM's vocabulary). The synthetic sentences are independent word draws, so the n-gram context carries little
beyond word frequencies and the vocabulary here.

The LM (``output_dir/lm/``: ``text.txt``, ``lm.arpa``, ``unigrams.txt``) is built with
:func:`~adaptspeech.lm.build.build_arpa` and reused while its text and order do not change. For each system of
``systems`` its model runs once over the target's dev split, (alpha, beta) is picked on the cached CTC
log-probabilities (:func:`~adaptspeech.lm.tune.grid_search`: lowest WER, then CER), and the test split is decoded
with the LM at those weights (pyctcdecode + KenLM, :class:`~adaptspeech.lm.decoder.LMDecoder`). Each LM row has the
paired-bootstrap interval of its CER minus the same system's without the LM (column :data:`VS_NO_LM_COLUMN`).
``run_recipe(spec, only=["lm"])`` (``adaptspeech demo --only lm``) trains nothing and re-evaluates a finished run with
the LM rows. The demo's task (``demo.py``) adds the section and the rows to the SimAdapter protocol.
"""

from __future__ import annotations

import itertools
import json
import time
import zlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from adaptspeech.metrics.significance import utterance_edits
from adaptspeech.progress import log
from adaptspeech.recipes.simadapter.evaluation import TargetEvaluation, bootstrap_cell
from adaptspeech.recipes.simadapter.spec import CorpusSettings, SimAdapterRecipe
from adaptspeech.recipes.spec import RecipeError, Section
from adaptspeech.settings import BOOL, FLOAT, INT, POSITIVE_INT, SettingType

#: ``run_recipe(spec, only=[LM_STEP])``: train nothing, re-evaluate with the LM rows
LM_STEP = "lm"
#: results.md column of the LM rows: CER difference to the same system without the LM, 95% paired-bootstrap interval
VS_NO_LM_COLUMN = "CER - same system without LM, 95% CI"
#: the stages an LM row can be added for (the target systems)
LM_SYSTEMS = ("target_adapter", "fusion", "finetune", "scratch")
TUNE_SPLIT = "dev"
_TEXT_STREAM = 101  # the random stream of the LM text (the corpus's sentences use stream 0)


def _number_list(description: str, accepts: Any) -> SettingType:
    return SettingType(
        description,
        lambda v: isinstance(v, (list, tuple)) and len(v) > 0 and all(FLOAT.accepts(x) and accepts(x) for x in v),
        lambda v: tuple(float(x) for x in v),
    )


LM_TYPES: dict[str, SettingType] = {
    "enabled": BOOL,
    "sentences": SettingType("an integer >= 100", lambda v: INT.accepts(v) and v >= 100),
    "seed": INT,
    "order": SettingType("an integer from 2 to 5", lambda v: INT.accepts(v) and 2 <= v <= 5),
    "alphas": _number_list("a non-empty list of numbers >= 0", lambda x: x >= 0),
    "betas": _number_list("a non-empty list of numbers", lambda x: True),
    "beam_size": POSITIVE_INT,
    "systems": SettingType(
        f"a non-empty list of target stages ({', '.join(LM_SYSTEMS)})",
        lambda v: isinstance(v, (list, tuple)) and len(v) > 0 and all(x in LM_SYSTEMS for x in v),
        tuple,
    ),
}


@dataclass(frozen=True)
class LMSettings(Section):
    """The recipe's ``lm`` section (module docstring), validated."""

    enabled: bool = False
    sentences: int = 20000
    seed: int = 1
    order: int = 4
    alphas: tuple[float, ...] = (0.25, 0.5, 0.75)
    betas: tuple[float, ...] = (0.0, 1.0, 2.0)
    beam_size: int = 16
    systems: tuple[str, ...] = ("target_adapter", "fusion")

    SETTINGS: ClassVar[Mapping[str, SettingType]] = LM_TYPES

    @property
    def label(self) -> str:
        """``4-gram LM``: how the rows name it."""
        return f"{self.order}-gram LM"


def sample_sentences(words: list[str], weights: np.ndarray, count: int, words_per_sentence: tuple[int, int],
                     rng: np.random.Generator) -> list[str]:
    """``count`` sentences, each of a uniform length in ``words_per_sentence`` (inclusive) and words drawn
    independently with probability ``weights / weights.sum()`` (``weights`` ``[len(words)]``)."""
    low, high = words_per_sentence
    lengths = rng.integers(low, high + 1, size=count)
    ids = rng.choice(len(words), size=int(lengths.sum()), p=weights / weights.sum())
    bounds = np.concatenate([[0], np.cumsum(lengths)])
    return [" ".join(words[i] for i in ids[a:b]) for a, b in itertools.pairwise(bounds)]


def lm_text(
    language: str, corpus: CorpusSettings, settings: LMSettings, exclude: set[str]
) -> tuple[list[str], dict[str, Any]]:
    """The LM's text (module docstring): sentences of ``language`` from wordfreq (with the word-list settings of the
    recipe's ``corpus``), those in ``exclude`` dropped.

    Returns:
        ``(sentences, stats)`` with ``stats``: ``sentences``, ``words``, ``distinct_words``, ``dropped`` (sampled
        sentences equal to a dev / test sentence), ``seed``.
    """
    from adaptspeech.data.synthetic import load_word_list

    config = corpus.synthetic_config()
    words, freqs = load_word_list(language, config)
    rng = np.random.default_rng([settings.seed, zlib.crc32(language.encode()), _TEXT_STREAM])
    sampled = sample_sentences(words, freqs**config.frequency_exponent, settings.sentences,
                               config.words_per_sentence, rng)
    kept = [s for s in sampled if s not in exclude]
    tokens = [w for s in kept for w in s.split()]
    stats = {"sentences": len(kept), "words": len(tokens), "distinct_words": len(set(tokens)),
             "dropped": len(sampled) - len(kept), "seed": settings.seed}
    return kept, stats


def build_recipe_lm(spec: SimAdapterRecipe, settings: LMSettings, exclude: set[str],
                    progress: bool = False) -> tuple[Path, dict[str, Any]]:
    """Write the text and build the LM in ``output_dir/lm`` (kept when the text and the order are unchanged).

    Returns:
        ``(lm folder, stats)``: the text's :func:`lm_text` stats plus ``reused`` and ``seconds``.
    """
    from adaptspeech.lm.build import ARPA_NAME, build_arpa

    start = time.perf_counter()
    folder = spec.output_dir / "lm"
    folder.mkdir(parents=True, exist_ok=True)
    sentences, stats = lm_text(spec.target, spec.corpus, settings, exclude)
    text = "".join(f"{s}\n" for s in sentences)
    key = {"order": settings.order, "text_crc32": zlib.crc32(text.encode("utf-8"))}
    key_file, text_file = folder / "lm_key.json", folder / "text.txt"
    reused = (folder / ARPA_NAME).is_file() and key_file.is_file() and json.loads(key_file.read_text()) == key
    if not reused:
        key_file.unlink(missing_ok=True)
        text_file.write_text(text, encoding="utf-8")
        try:
            build_arpa(text_file, folder, order=settings.order, progress=progress)
        except ValueError as err:
            raise RecipeError(f"lm.sentences={settings.sentences}, lm.order={settings.order}: {err}") from None
        key_file.write_text(json.dumps(key) + "\n")
    return folder, {**stats, "reused": reused, "seconds": time.perf_counter() - start}


def vocabulary_coverage(texts: list[str], lm_dir: Path) -> float:
    """Share of the words of ``texts`` (running words) that are in the LM's vocabulary (``unigrams.txt``)."""
    from adaptspeech.lm.build import UNIGRAMS_NAME

    vocabulary = set((lm_dir / UNIGRAMS_NAME).read_text(encoding="utf-8").split())
    tokens = [w for t in texts for w in t.split()]
    return sum(w in vocabulary for w in tokens) / max(len(tokens), 1)


@dataclass
class LMRows:
    """What the LM step adds to the evaluation: table rows, the per-utterance CER edits of each (for the paired
    bootstrap against the adapter alone) and the summary for ``results.json`` / ``results.md``."""

    rows: list[dict[str, Any]] = field(default_factory=list)
    edits: dict[str, np.ndarray] = field(default_factory=dict)
    summary: dict[str, Any] = field(default_factory=dict)


def lm_rows(spec: SimAdapterRecipe, settings: LMSettings, evaluation: TargetEvaluation) -> LMRows:
    """Build the LM, tune it on dev for every system of ``lm.systems`` and decode the target test set with it.

    Args:
        spec: the demo recipe (its target, corpus, output folder and evaluation split).
        settings: its ``lm`` section.
        evaluation: the protocol's evaluation so far: the prepared ``DatasetDict`` (its ``dev`` and the evaluation
            split), the rows evaluated without the LM (an LM row copies its system's parameters and time), their
            per-utterance CER edits on the target test set and the reference characters ``[N]``, stage -> system.
    """
    from adaptspeech.data.prepared_data import select_languages
    from adaptspeech.evaluation import evaluate_dataset
    from adaptspeech.lm.decoder import LMDecoder, build_decoder
    from adaptspeech.lm.tune import dev_log_probs, grid_search
    from adaptspeech.modeling import AdaptSpeechForCTC

    dataset, processor, device = evaluation.dataset, evaluation.processor, evaluation.device
    edits, ref_units = evaluation.edits, evaluation.ref_units
    batch_size, progress = evaluation.batch_size, evaluation.progress
    start, cpu_start = time.perf_counter(), time.process_time()
    out = spec.output_dir
    target = spec.target
    split = spec.evaluation.split
    if TUNE_SPLIT not in dataset:
        raise RecipeError(f"lm: the LM is tuned on the {TUNE_SPLIT!r} split, which is not prepared")
    dev = select_languages(dataset[TUNE_SPLIT], [target], TUNE_SPLIT, "lm")
    test = select_languages(dataset[split], [target], split, "lm")
    dev_refs, test_refs = list(dev["text"]), list(test["text"])
    lm_dir, text_stats = build_recipe_lm(spec, settings, set(dev_refs) | set(test_refs), progress=progress)
    text_stats["test_word_coverage"] = vocabulary_coverage(test_refs, lm_dir)
    text_stats["dev_word_coverage"] = vocabulary_coverage(dev_refs, lm_dir)
    log(f"{settings.label}: {text_stats['sentences']} sentences, {text_stats['distinct_words']} distinct words "
        f"({'reused' if text_stats['reused'] else 'built'} in {text_stats['seconds']:.1f} s); "
        f"{100 * text_stats['test_word_coverage']:.1f}% of the {split} words are in its vocabulary")
    decoder = LMDecoder(build_decoder(processor.tokenizer, lm_dir), beam_width=settings.beam_size)
    by_system = {row["system"]: row for row in evaluation.rows}
    result = LMRows()
    systems: dict[str, Any] = {}
    significance: dict[str, Any] = {}
    for stage in settings.systems:
        system = evaluation.systems[stage]
        if system not in by_system:
            continue
        model = AdaptSpeechForCTC.from_pretrained(out / stage / "model").to(device)
        log_probs = dev_log_probs(model, dev, processor, batch_size)
        grid = grid_search(decoder, log_probs, dev_refs, settings.alphas, settings.betas)
        no_lm = next((g for g in grid if g["alpha"] == 0 and g["beta"] == 0), None)
        no_lm = no_lm or grid_search(decoder, log_probs, dev_refs, [0.0], [0.0])[0]
        best = grid[0]
        decoder.set_weights(best["alpha"], best["beta"])
        metrics = evaluate_dataset(model, test, processor, batch_size=batch_size, progress=progress,
                                   return_hypotheses=True, lm_decoder=decoder)
        del model
        name = f"{system} + {settings.label}"
        row = {**by_system[system], "system": name, "cer": metrics["overall"]["cer"], "wer": metrics["overall"]["wer"],
               "alpha": best["alpha"], "beta": best["beta"]}
        result.edits[name], _ = utterance_edits(metrics["hypotheses"], test_refs, "char")
        row[VS_NO_LM_COLUMN], significance[name] = bootstrap_cell(result.edits[name], edits[system], ref_units)
        result.rows.append(row)
        systems[system] = {
            "stage": stage, "row": name, "alpha": best["alpha"], "beta": best["beta"],
            "dev_no_lm": {"cer": no_lm["cer"], "wer": no_lm["wer"]}, "dev_lm": {"cer": best["cer"], "wer": best["wer"]},
            "test_no_lm": {"cer": by_system[system]["cer"], "wer": by_system[system]["wer"]},
            "test_lm": {"cer": row["cer"], "wer": row["wer"]}, "grid": grid,
        }
        log(f"{name}: alpha {best['alpha']:g}, beta {best['beta']:g}; dev WER {100 * no_lm['wer']:.2f} -> "
             f"{100 * best['wer']:.2f}%, {split} WER {100 * by_system[system]['wer']:.2f} -> {100 * row['wer']:.2f}%")
    seconds, cpu_seconds = time.perf_counter() - start, time.process_time() - cpu_start
    log(f"{settings.label} step: {seconds:.0f} s ({cpu_seconds:.0f} s of CPU)")
    result.summary = {
        "label": settings.label, "language": target, "order": settings.order, "text": text_stats,
        "tune_split": TUNE_SPLIT, "alphas": list(settings.alphas), "betas": list(settings.betas),
        "beam_size": settings.beam_size, "systems": systems, "significance_vs_no_lm": significance,
        "seconds": seconds, "cpu_seconds": cpu_seconds,
    }
    return result


def lm_markdown(summary: dict[str, Any], split: str) -> str:
    """The results.md section on the LM: its text, the tuned weights and dev / test rates per system, its time."""
    text = summary["text"]
    lines = [
        f"### {summary['label']} ({summary['language']})",
        "",
        f"Text: {text['sentences']:,} sentences ({text['words']:,} words, {text['distinct_words']:,} distinct) "
        f"sampled from wordfreq's {summary['language']} word frequencies (seed {text['seed']}; {text['dropped']} "
        f"sampled sentences equal to a dev or {split} sentence dropped). Like any external text of the language it "
        f"holds words of the {split} set: {100 * text['test_word_coverage']:.1f}% of the {split} words are in its "
        f"vocabulary. alpha / beta tuned on {summary['tune_split']} (grid {len(summary['alphas'])} x "
        f"{len(summary['betas'])}, pyctcdecode beam {summary['beam_size']}). No LM: on {summary['tune_split']} the "
        f"same search at alpha = beta = 0, on {split} the system's row above.",
        "",
        f"| system | alpha | beta | {summary['tune_split']} CER % no LM -> LM | {summary['tune_split']} WER % no LM -> "
        f"LM | {split} CER % no LM -> LM | {split} WER % no LM -> LM |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for system, s in summary["systems"].items():
        lines.append(
            f"| {system} | {s['alpha']:g} | {s['beta']:g} | {100 * s['dev_no_lm']['cer']:.2f} -> "
            f"{100 * s['dev_lm']['cer']:.2f} | {100 * s['dev_no_lm']['wer']:.2f} -> {100 * s['dev_lm']['wer']:.2f} | "
            f"{100 * s['test_no_lm']['cer']:.2f} -> {100 * s['test_lm']['cer']:.2f} | "
            f"{100 * s['test_no_lm']['wer']:.2f} -> {100 * s['test_lm']['wer']:.2f} |"
        )
    reused = " (LM reused)" if text["reused"] else ""
    lines += ["", f"LM step: {summary['seconds']:.0f} s{reused}, {summary['cpu_seconds']:.0f} s of CPU (text and "
              f"build {text['seconds']:.1f} s)."]
    return "\n".join(lines) + "\n"
