"""Which word confidence separates right from wrong words best? Every
:class:`~adaptspeech.decoding.confidence.ConfidenceMethod` scored on one labelled split: the split is decoded once
(the CTC posteriors; with an LM decoder, its N-best lists too), each method scores the words, and each gets the area
under the ROC curve of "word correct" (the WER alignment of the hypothesis to the reference,
:func:`~adaptspeech.metrics.confidence.word_correctness`), the expected calibration error over equal-width bins and a
reliability diagram (:mod:`adaptspeech.metrics.confidence`).

Two decoders: the CTC best path (every method: frame measure, entropy order, word aggregation), and the LM beam search
(each method's frame measure times the N-best posterior, at temperature 1 and at the temperature fitted by
:func:`~adaptspeech.decoding.confidence.fit_nbest_temperature`; fitted on ``fit`` rows, or, without them, two-fold on
the split itself: each half's words scored with the temperature fitted on the other half, so no word is scored with a
temperature fitted on it).
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ...decoding.confidence import (
    ConfidenceMethod,
    NBest,
    best_path_words,
    fit_nbest_temperature,
    frame_confidence,
    nbest_word_confidences,
)
from ...lm.tune import dev_log_probs
from ...metrics.confidence import calibration_report, reliability_diagram, word_correctness

BEST_PATH = "best path"
LM_BEAM = "LM beam"


@dataclass
class DecodedSplit:
    """A labelled split decoded once: per row its ``[T, V]`` CTC log-probabilities, its reference and, with an LM,
    its best beam's text and N-best list."""

    log_probs: list[Any]
    references: list[str]
    lm_texts: list[str] | None = None
    nbests: list[NBest] | None = None


def decode_split(model: Any, processor: Any, rows: Any, lm_decoder: Any = None, beam_size: int | None = None,
                 batch_size: int = 16) -> DecodedSplit:
    """Decode every row of the labelled ``rows`` (a prepared split) for :func:`compare_methods`."""
    log_probs = dev_log_probs(model, rows, processor, batch_size)
    split = DecodedSplit([lp.float() for lp in log_probs], list(rows["text"]))
    if lm_decoder is not None:
        decoded = [lm_decoder.nbest(lp, beam_size) for lp in split.log_probs]
        split.lm_texts = [text for text, _ in decoded]
        split.nbests = [nbest for _, nbest in decoded]
    return split


def _best_path_scores(split: DecodedSplit, tokenizer: Any, method: ConfidenceMethod) -> tuple[list[float], list[bool]]:
    scores: list[float] = []
    correct: list[bool] = []
    for log_probs, reference in zip(split.log_probs, split.references, strict=True):
        words = best_path_words(log_probs, tokenizer, method=method)
        flags = word_correctness(" ".join(w.text for w in words), reference)
        scores += [w.confidence for w in words]
        correct += flags
    return scores, correct


def _lm_flags(split: DecodedSplit) -> list[list[bool]]:
    """Per row, whether each word of its best beam is correct."""
    assert split.nbests is not None
    out = []
    for index, (nbest, reference) in enumerate(zip(split.nbests, split.references, strict=True)):
        words = nbest[0][0] if nbest else []
        flags = word_correctness(" ".join(w for w, _ in words), reference)
        if len(flags) != len(words):
            raise ValueError(f"row {index}: {len(words)} beam words for the {len(flags)} words of their text")
        out.append(flags)
    return out


def _frame_scores(split: DecodedSplit, method: ConfidenceMethod) -> list[np.ndarray]:
    return [frame_confidence(lp, method.measure, method.alpha).numpy() for lp in split.log_probs]


def _slug(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9.]+", "_", name).strip("_")


def compare_methods(split: DecodedSplit, tokenizer: Any, methods: Sequence[ConfidenceMethod],
                    fit: DecodedSplit | None = None, out_dir: str | Path | None = None, title: str = "",
                    num_bins: int = 10) -> dict[str, dict[str, Any]]:
    """ROC AUC, ECE and reliability bins of every method on ``split`` (module docstring).

    Args:
        split: the labelled split, decoded (:func:`decode_split`).
        tokenizer: the model's CTC tokenizer (the best path's words).
        methods: the methods compared (the LM beam's take their frame measure from each; the aggregation is the best
            path's only).
        fit: a decoded split to fit the N-best temperature on; None: two-fold on ``split``.
        out_dir: where ``reliability_<method>.png`` (one per method) and ``comparison.json`` are written (None:
            nothing written).

    Returns:
        ``{name: calibration_report + {"decoder", "method", ...}}``, names ``"best path <method>"``,
        ``"LM beam <measure> T=1"`` and ``"LM beam <measure> T fitted"`` (with ``"temperature"``: the fitted
        value(s)).
    """
    results: dict[str, dict[str, Any]] = {}
    for method in methods:
        scores, correct = _best_path_scores(split, tokenizer, method)
        results[f"{BEST_PATH} {method.name}"] = {"decoder": BEST_PATH, "method": method.name,
                                                 **calibration_report(scores, correct, num_bins)}
    if split.nbests is not None:
        flags = _lm_flags(split)
        fit_flags = _lm_flags(fit) if fit is not None and fit.nbests is not None else None
        measures = {m.name.rsplit("/", 1)[0]: ConfidenceMethod(m.measure, m.alpha) for m in methods}
        for label, measure in measures.items():
            frames = _frame_scores(split, measure)
            plain = [c for nb, fr in zip(split.nbests, frames, strict=True) for c in nbest_word_confidences(nb, fr)]
            flat = [f for fl in flags for f in fl]
            results[f"{LM_BEAM} {label} T=1"] = {"decoder": LM_BEAM, "method": label, "temperature": 1.0,
                                                 **calibration_report(plain, flat, num_bins)}
            fitted, temperatures = _fitted_scores(split, frames, flags, fit, fit_flags, measure)
            results[f"{LM_BEAM} {label} T fitted"] = {"decoder": LM_BEAM, "method": label, "temperature": temperatures,
                                                      **calibration_report(fitted, flat, num_bins)}
    if out_dir is not None:
        out = Path(out_dir)
        out.mkdir(parents=True, exist_ok=True)
        for name, result in results.items():
            reliability_diagram({name: result}, out / f"reliability_{_slug(name)}.png", title or name)
        (out / "comparison.json").write_text(json.dumps(results, indent=1, default=float) + "\n")
    return results


def _fitted_scores(split: DecodedSplit, frames: list[np.ndarray], flags: list[list[bool]], fit: DecodedSplit | None,
                   fit_flags: list[list[bool]] | None, measure: ConfidenceMethod) -> tuple[list[float], list[float]]:
    """The LM beam's word confidences of ``split`` at a temperature fitted on ``fit`` (or two-fold on ``split``) and
    the temperature(s) used."""
    assert split.nbests is not None
    if fit is not None and fit.nbests is not None and fit_flags is not None:
        temperature, _ = fit_nbest_temperature(fit.nbests, _frame_scores(fit, measure), fit_flags)
        return [c for nb, fr in zip(split.nbests, frames, strict=True)
                for c in nbest_word_confidences(nb, fr, temperature)], [temperature]
    halves = [list(range(0, len(frames), 2)), list(range(1, len(frames), 2))]
    scores: dict[int, list[float]] = {}
    temperatures = []
    for scored, fitted_on in (halves, halves[::-1]):
        if not scored:
            continue
        if sum(len(flags[i]) for i in fitted_on):
            temperature, _ = fit_nbest_temperature([split.nbests[i] for i in fitted_on],
                                                   [frames[i] for i in fitted_on], [flags[i] for i in fitted_on])
        else:
            temperature = 1.0
        temperatures.append(temperature)
        for i in scored:
            scores[i] = nbest_word_confidences(split.nbests[i], frames[i], temperature)
    return [c for i in range(len(frames)) for c in scores[i]], temperatures
