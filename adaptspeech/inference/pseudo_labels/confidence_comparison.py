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

The learned word confidence (:mod:`~adaptspeech.decoding.confidence_estimator`: a logistic regression over per-word
features) of each decoder, fitted the same way: on ``fit`` rows, or cross-fitted two-fold on the split itself (rows
of even and odd index; each half scored by the estimator fitted on the other); :func:`fit_split_estimator` fits one
on a whole split (the one saved for ``--confidence-method learned``).
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
    LEARNED,
    ConfidenceMethod,
    NBest,
    best_path_features,
    best_path_words,
    fit_nbest_temperature,
    frame_confidence,
    lm_beam_features,
    nbest_word_confidences,
)
from ...decoding.confidence_estimator import BEST_PATH as BEST_PATH_WORDS
from ...decoding.confidence_estimator import DEFAULT_L2, WordConfidenceEstimator, concat_features, fit_estimator
from ...decoding.confidence_estimator import LM_BEAM as LM_BEAM_WORDS
from ...lm.tune import dev_log_probs
from ...metrics.confidence import calibration_report, reliability_diagram, word_correctness

BEST_PATH = "best path"
LM_BEAM = "LM beam"


@dataclass
class DecodedSplit:
    """A labelled split decoded once: per row its ``[T, V]`` CTC log-probabilities, its reference and, with an LM,
    its best beam's text, N-best list and its best beam words' n-gram scores (``(log10 probability, out of
    vocabulary)`` per word; None without a KenLM model)."""

    log_probs: list[Any]
    references: list[str]
    lm_texts: list[str] | None = None
    nbests: list[NBest] | None = None
    lm_scores: list[list[tuple[float, bool]] | None] | None = None


def decode_split(model: Any, processor: Any, rows: Any, lm_decoder: Any = None, beam_size: int | None = None,
                 batch_size: int = 16) -> DecodedSplit:
    """Decode every row of the labelled ``rows`` (a prepared split) for :func:`compare_methods`."""
    return decoded_split(dev_log_probs(model, rows, processor, batch_size), list(rows["text"]), lm_decoder, beam_size)


def decoded_split(log_probs: Sequence[Any], references: Sequence[str], lm_decoder: Any = None,
                  beam_size: int | None = None) -> DecodedSplit:
    """The :class:`DecodedSplit` of rows whose ``[T, V]`` CTC log-probabilities are known (their references
    ``references``): with ``lm_decoder``, each row's N-best list of ``beam_size`` beams and its best beam words'
    n-gram scores."""
    split = DecodedSplit([lp.float() for lp in log_probs], list(references))
    if lm_decoder is not None:
        decoded = [lm_decoder.nbest(lp, beam_size) for lp in split.log_probs]
        split.lm_texts = [text for text, _ in decoded]
        split.nbests = [nbest for _, nbest in decoded]
        split.lm_scores = [lm_decoder.word_lm_scores([w for w, _ in nbest[0][0]] if nbest else [])
                           for nbest in split.nbests]
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


def learned_features(split: DecodedSplit, tokenizer: Any, decoder: str
                     ) -> tuple[list[dict[str, np.ndarray]], list[list[bool]]]:
    """Per row of ``split``, the features of its words (the best path's, or the LM beam's best beam's) and whether
    each is correct."""
    features, flags = [], []
    lm_flags = _lm_flags(split) if decoder == LM_BEAM_WORDS else None
    for index, (log_probs, reference) in enumerate(zip(split.log_probs, split.references, strict=True)):
        words = best_path_words(log_probs, tokenizer)
        text = " ".join(w.text for w in words)
        if lm_flags is None:
            features.append(best_path_features(log_probs, words))
            flags.append(word_correctness(text, reference))
        else:
            assert split.nbests is not None
            scores = split.lm_scores[index] if split.lm_scores is not None else None
            nbest = split.nbests[index]
            agreement = word_correctness(" ".join(w for w, _ in (nbest[0][0] if nbest else [])), text)
            features.append(lm_beam_features(log_probs, nbest, agreement, scores))
            flags.append(lm_flags[index])
    return features, flags


def _fit_rows(features: list[dict[str, np.ndarray]], flags: list[list[bool]], rows: Sequence[int], decoder: str,
              l2: float, fitted_on: dict[str, Any], names: Sequence[str] | None = None) -> WordConfidenceEstimator:
    kept = [i for i in rows if flags[i]]
    return fit_estimator(concat_features([features[i] for i in kept]), [f for i in kept for f in flags[i]], decoder,
                         names, l2=l2, fitted_on={"rows": len(kept), **fitted_on})


def fit_split_estimator(split: DecodedSplit, tokenizer: Any, decoder: str, l2: float = DEFAULT_L2,
                        fitted_on: dict[str, Any] | None = None, names: Sequence[str] | None = None
                        ) -> WordConfidenceEstimator:
    """The word confidence estimator of ``decoder`` (``lm_beam`` or ``best_path``) fitted on every row of
    ``split``, reading the features ``names`` (default: the decoder's
    :data:`~adaptspeech.decoding.confidence_estimator.DEFAULT_FEATURES`).

    Raises:
        ValueError: the split has no correct or no wrong word.
    """
    features, flags = learned_features(split, tokenizer, decoder)
    return _fit_rows(features, flags, range(len(flags)), decoder, l2, dict(fitted_on or {}), names)


def _learned_scores(split: DecodedSplit, tokenizer: Any, decoder: str, fit: DecodedSplit | None, l2: float,
                    names: Sequence[str] | None = None) -> tuple[list[float], list[bool], list[dict[str, Any]]]:
    """The learned confidences of ``split``'s words (fitted on ``fit``, or two-fold on ``split``), their flags and
    the estimators used (as JSON)."""
    features, flags = learned_features(split, tokenizer, decoder)
    rows = len(flags)
    if fit is not None:
        estimators = [fit_split_estimator(fit, tokenizer, decoder, l2, names=names)]
        folds = [(list(range(rows)), estimators[0])]
    else:
        halves = [list(range(0, rows, 2)), list(range(1, rows, 2))]
        folds = [(scored, _fit_rows(features, flags, fitted_on, decoder, l2, {"fold": n}, names))
                 for n, (scored, fitted_on) in enumerate(((halves[0], halves[1]), (halves[1], halves[0]))) if scored]
        estimators = [estimator for _, estimator in folds]
    scores: dict[int, list[float]] = {}
    for scored, estimator in folds:
        for i in scored:
            scores[i] = [float(c) for c in estimator.predict(features[i])] if flags[i] else []
    return ([c for i in range(rows) for c in scores[i]], [f for fl in flags for f in fl],
            [e.to_dict() for e in estimators])


def compare_methods(split: DecodedSplit, tokenizer: Any, methods: Sequence[ConfidenceMethod],
                    fit: DecodedSplit | None = None, out_dir: str | Path | None = None, title: str = "",
                    num_bins: int = 10, learned: bool = True, l2: float = DEFAULT_L2,
                    learned_features: dict[str, Sequence[str]] | None = None) -> dict[str, dict[str, Any]]:
    """ROC AUC, ECE and reliability bins of every method on ``split`` (module docstring).

    Args:
        split: the labelled split, decoded (:func:`decode_split`).
        tokenizer: the model's CTC tokenizer (the best path's words).
        methods: the methods compared (the LM beam's take their frame measure from each; the aggregation is the best
            path's only).
        fit: a decoded split to fit the N-best temperature and the learned estimators on; None: two-fold on
            ``split``.
        out_dir: where ``reliability_<method>.png`` (one per method) and ``comparison.json`` are written (None:
            nothing written).
        learned: also the learned word confidence of each decoder (``"best path learned"``, ``"LM beam learned"``,
            with ``"fitted"``: how, and ``"estimators"``; only ``"skipped"``: why, when a fit had no correct or no
            wrong word), its L2 penalty ``l2``; ``learned_features``: decoder
            (``lm_beam``, ``best_path``) -> the features its estimator reads (default: its ``DEFAULT_FEATURES``).

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
    if learned:
        fitted = "on the fit split" if fit is not None else "two-fold on the split"
        for label, decoder, fit_split in ((BEST_PATH, BEST_PATH_WORDS, fit),
                                          (LM_BEAM, LM_BEAM_WORDS, fit if fit is not None and fit.nbests else None)):
            if decoder == LM_BEAM_WORDS and split.nbests is None:
                continue
            entry = {"decoder": label, "method": LEARNED, "fitted": fitted}
            try:
                scores, correct, estimators = _learned_scores(split, tokenizer, decoder, fit_split, l2,
                                                              (learned_features or {}).get(decoder))
            except ValueError as err:  # e.g. a fold whose words are all wrong: nothing to separate
                results[f"{label} {LEARNED}"] = {**entry, "skipped": str(err)}
                continue
            results[f"{label} {LEARNED}"] = {**entry, "estimators": estimators,
                                             **calibration_report(scores, correct, num_bins)}
    if out_dir is not None:
        out = Path(out_dir)
        out.mkdir(parents=True, exist_ok=True)
        for name, result in results.items():
            if "skipped" in result:
                continue
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
