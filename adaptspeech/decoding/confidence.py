"""How sure is the model of each word it wrote? Word and utterance confidence from CTC posteriors.

**Frame confidence** (:data:`FRAME_MEASURES`) of frame ``t`` from its posterior ``p_t`` over the ``V`` labels:

- ``max_prob``: ``max_v p_t(v)``;
- the entropy measures of Laptev & Ginsburg (2022), "Fast entropy-based methods of word-level confidence estimation
  for end-to-end ASR", with the entropy's order ``alpha`` (their "temperature"; ``alpha = 1``: Gibbs):

  - ``gibbs``: ``H = -sum_v p log p``;
  - ``tsallis``: ``H = (1 - sum_v p^alpha) / (alpha - 1)``;
  - ``renyi``: ``H = log(sum_v p^alpha) / (1 - alpha)``;

  normalised to [0, 1] (1 for a one-hot posterior, 0 for the uniform one, whose entropy is ``H_max``) linearly
  (``_lin``: ``1 - H / H_max``) or exponentially (``_exp``: ``(exp(-H) - exp(-H_max)) / (1 - exp(-H_max))``), e.g.
  ``tsallis_exp``; ``entropy`` is ``tsallis_exp`` with ``alpha = 1/3`` (their best setting).

**Words of the best path** (:func:`best_path_words`): the frames' argmax labels; a run of equal non-blank labels is
one emitted token, the word delimiter ``|`` (and blank frames) separate words. A token's confidence is the mean frame
confidence over its run; a word's aggregates its tokens' (:data:`AGGREGATIONS`): the minimum by default (the least sure
character decides: one wrong letter makes the word wrong), the mean or the product; its frames are those of its first
to last token.

**Words of an LM beam search** (:meth:`~adaptspeech.lm.decoder.LMDecoder.decode_scored`): the beams pyctcdecode
returns are an N-best list; each word of the best beam gets its *N-best posterior* (:func:`nbest_word_posteriors`:
the weight of the beams holding the same word over overlapping frames, the beams weighted by the softmax of their
scores divided by a temperature, fitted on dev by :func:`fit_nbest_temperature`), times the acoustic confidence of its
frames (the minimum frame confidence of the CTC path over them).

:class:`ConfidenceMethod` names one way of scoring words (measure, ``alpha``, aggregation, N-best temperature), or
the learned word confidence (``learned[:FILE]``: a logistic regression over per-word features fitted on a labelled
split, :mod:`adaptspeech.decoding.confidence_estimator`);
:mod:`adaptspeech.inference.pseudo_labels.confidence_comparison` compares them on a labelled split.

**Utterance confidence** (:func:`utterance_confidence`): the mean of its words' confidences (1 - the expected share
of wrong words), the utterance's mean frame confidence when it has no word.

``scripts/confidence_calibration.py`` measures how well each method ranks correct above wrong words (the area under
the ROC curve) and its calibration on a dev split; the demo's figures are in docs/self_training.md.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import torch

from .confidence_estimator import (
    BEST_PATH,
    ESTIMATOR_FILE,
    LM_BEAM,
    WordConfidenceEstimator,
    load_estimator,
    word_features,
)

TSALLIS_ALPHA = 1.0 / 3.0
"""The Tsallis entropy's order in the ``entropy`` frame measure (Laptev & Ginsburg 2022's best setting)."""
ENTROPIES = ("gibbs", "tsallis", "renyi")
NORMALISATIONS = ("lin", "exp")
FRAME_MEASURES: tuple[str, ...] = ("max_prob", "entropy", *(f"{e}_{n}" for e in ENTROPIES for n in NORMALISATIONS))
"""Frame confidence measures (module docstring): ``[..., V]`` log-probabilities -> ``[...]`` confidence in [0, 1]."""
DEFAULT_MEASURE = "max_prob"
AGGREGATIONS = ("min", "mean", "product")
"""How a word's confidence aggregates its tokens' (module docstring)."""
DEFAULT_AGGREGATION = "min"
LEARNED = "learned"
"""The learned method's name: ``learned`` (the estimator beside the model) or ``learned:FILE``."""


def _entropy(log_probs: torch.Tensor, kind: str, alpha: float) -> tuple[torch.Tensor, float]:
    """``([...] entropy, the uniform posterior's)`` of ``[..., V]`` log-probabilities (Gibbs when ``alpha == 1``)."""
    vocab = log_probs.shape[-1]
    if kind == "gibbs" or alpha == 1.0:
        return -(log_probs.exp() * log_probs).sum(-1), math.log(vocab)
    power_sum = (alpha * log_probs).exp().sum(-1)
    if kind == "tsallis":
        return (1.0 - power_sum) / (alpha - 1.0), (1.0 - vocab ** (1.0 - alpha)) / (alpha - 1.0)
    return power_sum.log() / (1.0 - alpha), math.log(vocab)


def _check_measure(measure: str, alpha: float) -> None:
    if measure not in FRAME_MEASURES:
        raise ValueError(f"confidence measure {measure!r}; allowed values: {', '.join(FRAME_MEASURES)}")
    if not (isinstance(alpha, (int, float)) and math.isfinite(alpha) and alpha > 0):
        raise ValueError(f"confidence alpha {alpha!r}: the entropy's order must be a number > 0")


def frame_confidence(log_probs: torch.Tensor, measure: str = DEFAULT_MEASURE, alpha: float = TSALLIS_ALPHA
                     ) -> torch.Tensor:
    """``[T]`` confidence in [0, 1] of each frame of CTC log-probabilities ``[T, V]`` (module docstring).

    Args:
        measure: one of :data:`FRAME_MEASURES`.
        alpha: the entropy's order (the entropy measures; ``entropy`` is always 1/3).

    Raises:
        ValueError: an unknown ``measure`` (listing the allowed ones), or an ``alpha`` that is not > 0.
    """
    _check_measure(measure, alpha)
    log_probs = log_probs.detach().double()
    if measure == "max_prob":
        out = log_probs.max(dim=-1).values.exp()
    else:
        kind, normalisation = ("tsallis", "exp") if measure == "entropy" else measure.split("_")
        entropy, most = _entropy(log_probs, kind, TSALLIS_ALPHA if measure == "entropy" else float(alpha))
        if normalisation == "lin":
            out = 1.0 - entropy / most
        else:
            floor = math.exp(-most)
            out = ((-entropy).exp() - floor) / (1.0 - floor)
    return out.float().clamp(0.0, 1.0)


def aggregate(scores: Sequence[float], aggregation: str = DEFAULT_AGGREGATION) -> float:
    """A word's confidence from its tokens' ``scores`` (:data:`AGGREGATIONS`).

    Raises:
        ValueError: an unknown ``aggregation`` (listing the allowed ones).
    """
    if aggregation == "min":
        return float(min(scores))
    if aggregation == "mean":
        return float(np.mean(scores))
    if aggregation == "product":
        return float(np.prod(scores))
    raise ValueError(f"word aggregation {aggregation!r}; allowed values: {', '.join(AGGREGATIONS)}")


@dataclass(frozen=True)
class ConfidenceMethod:
    """One way of scoring words (module docstring): the frame measure, its entropy order, how a word aggregates its
    tokens (the best path) and the temperature of the N-best posterior (the LM beam); or, with ``estimator``, the
    learned word confidence (:mod:`~adaptspeech.decoding.confidence_estimator`) whose JSON file it names (``""``: the
    one beside the model, see :meth:`beside_model`); the frame measure then only scores utterances without words.

    Raises:
        ValueError: an unknown measure or aggregation, an ``alpha`` or a temperature that is not > 0, an estimator
            file that is missing or not an estimator (one line naming it).
    """

    measure: str = DEFAULT_MEASURE
    alpha: float = TSALLIS_ALPHA
    aggregation: str = DEFAULT_AGGREGATION
    nbest_temperature: float = 1.0
    estimator: str | None = None

    def __post_init__(self) -> None:
        _check_measure(self.measure, self.alpha)
        aggregate([1.0], self.aggregation)
        if not (isinstance(self.nbest_temperature, (int, float)) and math.isfinite(self.nbest_temperature)
                and self.nbest_temperature > 0):
            raise ValueError(f"N-best temperature {self.nbest_temperature!r}: must be a number > 0")
        if self.estimator:
            load_estimator(self.estimator)

    @property
    def name(self) -> str:
        """``measure[@alpha]/aggregation``, or ``learned[:FILE]`` (what :meth:`parse` reads; the temperature is not
        part of it)."""
        if self.estimator is not None:
            return f"{LEARNED}:{self.estimator}" if self.estimator else LEARNED
        order = f"@{self.alpha:g}" if self.measure.split("_")[0] in ("tsallis", "renyi") else ""
        return f"{self.measure}{order}/{self.aggregation}"

    @classmethod
    def parse(cls, text: str) -> ConfidenceMethod:
        """From ``measure[@alpha][/aggregation]``, e.g. ``tsallis_exp@0.25/product`` or ``max_prob``, or from
        ``learned[:FILE]``."""
        if text == LEARNED or text.startswith(f"{LEARNED}:"):
            return cls(estimator=text[len(LEARNED) + 1 :])
        head, _, aggregation = text.partition("/")
        measure, _, alpha = head.partition("@")
        try:
            order = float(alpha) if alpha else TSALLIS_ALPHA
        except ValueError:
            raise ValueError(f"confidence method {text!r}: alpha {alpha!r} is not a number") from None
        return cls(measure, order, aggregation or DEFAULT_AGGREGATION)

    def beside_model(self, model_dir: str | Path) -> ConfidenceMethod:
        """``learned`` without a file: the estimator saved beside the model in ``model_dir`` (checked now);
        any other method unchanged."""
        if self.estimator != "":
            return self
        return replace(self, estimator=str(Path(model_dir) / ESTIMATOR_FILE))

    @property
    def acoustic(self) -> ConfidenceMethod:
        """The method without its estimator (the frame measure and aggregation alone)."""
        return replace(self, estimator=None)

    def estimator_model(self, decoder: str) -> WordConfidenceEstimator:
        """The :class:`~adaptspeech.decoding.confidence_estimator.WordConfidenceEstimator` of a learned method, which
        must have been fitted on ``decoder``'s words (``lm_beam`` or ``best_path``).

        Raises:
            ValueError: no estimator file given, or one fitted on the other decoder's words (naming the file).
        """
        if not self.estimator:
            raise ValueError(f"confidence method {LEARNED}: no estimator file; give {LEARNED}:FILE (or save one "
                             "beside the model)")
        model = load_estimator(self.estimator)
        if model.decoder != decoder:
            need = "an LM (--lm)" if model.decoder == LM_BEAM else "the best path (no --lm)"
            raise ValueError(f"confidence estimator {self.estimator}: fitted on {model.decoder} words, these are "
                             f"{decoder} words; it scores words decoded with {need}")
        return model


@dataclass(frozen=True)
class ScoredWord:
    """A word with its confidence and its output frames ``[start, end)``."""

    text: str
    confidence: float
    start: int
    end: int

    def to_dict(self, seconds_per_frame: float) -> dict[str, Any]:
        """``{"text", "start", "end", "confidence"}`` (seconds), as the timestamps of ``transcribe`` look."""
        return {"text": self.text, "start": round(self.start * seconds_per_frame, 6),
                "end": round(self.end * seconds_per_frame, 6), "confidence": round(self.confidence, 6)}


def _label_texts(tokenizer: Any) -> tuple[dict[int, str], int, int, set[int]]:
    """``({id: token}, blank id, word delimiter id, ids left out of the text)`` of a ``Wav2Vec2CTCTokenizer`` (the
    special tokens ``<s>``, ``</s>``, ``[UNK]``, which greedy decoding's text drops too)."""
    vocab = {index: token for token, index in tokenizer.get_vocab().items()}
    delimiter = tokenizer.convert_tokens_to_ids(tokenizer.word_delimiter_token)
    return vocab, tokenizer.pad_token_id, delimiter, set(tokenizer.all_special_ids) - {delimiter}


def best_path_words(log_probs: torch.Tensor, tokenizer: Any, measure: str = DEFAULT_MEASURE,
                    method: ConfidenceMethod | None = None) -> list[ScoredWord]:
    """The words of the best CTC path of ``log_probs`` ``[T, V]`` (real frames only) with their confidences (module
    docstring); their text is what CTC greedy decoding writes. ``method`` (default: ``measure``, the minimum over
    tokens) scores them; a learned one with its best-path estimator."""
    method = method or ConfidenceMethod(measure)
    vocab, blank, delimiter, dropped = _label_texts(tokenizer)
    confidence = frame_confidence(log_probs, method.measure, method.alpha).numpy()
    best = log_probs.argmax(-1).tolist()
    words: list[ScoredWord] = []
    chars: list[str] = []
    scores: list[float] = []
    start = end = 0

    def close() -> None:
        if chars:
            words.append(ScoredWord("".join(chars), aggregate(scores, method.aggregation), start, end))
            chars.clear()
            scores.clear()

    t = 0
    while t < len(best):
        label = best[t]
        run_end = t + 1
        while run_end < len(best) and best[run_end] == label:
            run_end += 1
        if label == delimiter:
            close()
        elif label != blank and label not in dropped:
            if not chars:
                start = t
            chars.append(vocab[label])
            scores.append(float(confidence[t:run_end].mean()))
            end = run_end
        t = run_end
    close()
    if method.estimator is not None and words:
        learned = method.estimator_model(BEST_PATH).predict(best_path_features(log_probs, words))
        words = [replace(w, confidence=float(c)) for w, c in zip(words, learned, strict=True)]
    return words


def utterance_confidence(words: Sequence[ScoredWord], log_probs: torch.Tensor | None = None,
                         measure: str = DEFAULT_MEASURE) -> float:
    """The mean confidence of ``words``; without words, the mean frame confidence of ``log_probs`` ``[T, V]`` (0 when
    neither is given)."""
    if words:
        return float(np.mean([w.confidence for w in words]))
    if log_probs is None or len(log_probs) == 0:
        return 0.0
    return float(frame_confidence(log_probs, measure).mean())


def span_confidence(confidence: np.ndarray, start: int, end: int) -> float:
    """The least frame confidence ``[T]`` over frames ``[start, end)`` (1 for an empty span)."""
    span = confidence[max(start, 0) : max(end, start + 1)]
    return float(span.min()) if len(span) else 1.0


def nbest_word_posteriors(beams: Sequence[tuple[Sequence[tuple[str, tuple[int, int]]], float]],
                          min_overlap: float = 0.5, temperature: float = 1.0) -> list[float]:
    """The N-best posterior of each word of the first (best) beam.

    Args:
        beams: ``[(words [(text, (start_frame, end_frame)), ...], score), ...]``, best first; ``score`` a log
            score (the beam posterior is the softmax of the scores).
        min_overlap: a beam holds the word when one of its words has the same text and its frames overlap the best
            beam's word by at least this share of the shorter of the two.
        temperature: the beams are weighted by ``softmax(score / temperature)`` (above 1: flatter, less sure).

    Returns:
        ``[len(beams[0][0])]`` posteriors in [0, 1].
    """
    if not beams:
        return []
    scores = np.array([score for _, score in beams], dtype=np.float64)
    weights = np.exp((scores - scores.max()) / temperature)
    weights /= weights.sum()
    out = []
    for text, (start, end) in beams[0][0]:
        mass = 0.0
        for (words, _), weight in zip(beams, weights, strict=True):
            for other, (a, b) in words:
                shorter = max(min(end - start, b - a), 1)
                if other == text and min(end, b) - max(start, a) >= min_overlap * shorter:
                    mass += weight
                    break
        out.append(float(min(mass, 1.0)))
    return out


NBest = Sequence[tuple[Sequence[tuple[str, tuple[int, int]]], float]]
"""An N-best list: ``[(words [(text, (start_frame, end_frame)), ...], log score), ...]``, best first."""
TEMPERATURE_GRID: tuple[float, ...] = tuple(float(t) for t in np.geomspace(0.125, 64.0, 28))
"""The N-best temperatures :func:`fit_nbest_temperature` tries (0.125 to 64, evenly on a log scale)."""


def nbest_word_confidences(beams: NBest, frame_scores: np.ndarray, temperature: float = 1.0) -> list[float]:
    """The confidence of each word of the best beam: its N-best posterior at ``temperature`` times the least frame
    confidence ``frame_scores`` ``[T]`` over its frames (module docstring)."""
    if not beams:
        return []
    posteriors = nbest_word_posteriors(beams, temperature=temperature)
    return [posterior * span_confidence(frame_scores, start, end)
            for (_, (start, end)), posterior in zip(beams[0][0], posteriors, strict=True)]


def fit_nbest_temperature(nbests: Sequence[NBest], frame_scores: Sequence[np.ndarray],
                          correct: Sequence[Sequence[bool]], grid: Sequence[float] = TEMPERATURE_GRID
                          ) -> tuple[float, list[float]]:
    """The N-best temperature of ``grid`` whose word confidences (:func:`nbest_word_confidences`) have the least
    log loss against whether each word is correct (temperature scaling, Guo et al. 2017, on the beams' scores).

    Args:
        nbests: per utterance of a labelled split, its N-best list.
        frame_scores: per utterance, ``[T]`` frame confidences.
        correct: per utterance, one flag per word of its best beam.

    Returns:
        ``(temperature, log loss per grid value)``.

    Raises:
        ValueError: no word to fit on, or flags that do not match the best beams' words.
    """
    for index, (beams, flags) in enumerate(zip(nbests, correct, strict=True)):
        if len(beams[0][0] if beams else []) != len(flags):
            raise ValueError(f"utterance {index}: {len(flags)} correctness flags for the "
                             f"{len(beams[0][0]) if beams else 0} words of its best beam")
    labels = np.array([flag for flags in correct for flag in flags], dtype=np.float64)
    if not len(labels):
        raise ValueError("no word to fit the N-best temperature on (every best beam is empty)")
    losses = []
    for temperature in grid:
        scores = np.clip([c for beams, frames in zip(nbests, frame_scores, strict=True)
                          for c in nbest_word_confidences(beams, frames, temperature)], 1e-6, 1 - 1e-6)
        losses.append(float(-np.mean(labels * np.log(scores) + (1 - labels) * np.log(1 - scores))))
    return float(grid[int(np.argmin(losses))]), losses


def frame_measures(log_probs: torch.Tensor) -> dict[str, np.ndarray]:
    """``{"maxprob", "entropy"}``: the ``[T]`` max-probability and Tsallis (order 1/3) frame confidences of CTC
    log-probabilities ``[T, V]`` (the learned confidence's frame features)."""
    return {"maxprob": frame_confidence(log_probs, "max_prob").numpy().astype(np.float64),
            "entropy": frame_confidence(log_probs, "entropy").numpy().astype(np.float64)}


def best_path_features(log_probs: torch.Tensor, words: Sequence[ScoredWord]) -> dict[str, np.ndarray]:
    """The learned confidence's features (:func:`~adaptspeech.decoding.confidence_estimator.word_features`) of
    best-path ``words`` of ``[T, V]`` CTC log-probabilities."""
    return word_features(frame_measures(log_probs), [(w.text, (w.start, w.end)) for w in words])


def lm_beam_features(log_probs: torch.Tensor, nbest: NBest, agreement: Sequence[bool],
                     lm_scores: Sequence[tuple[float, bool]] | None = None) -> dict[str, np.ndarray]:
    """The learned confidence's features of the best beam's words of an N-best list of ``[T, V]`` CTC
    log-probabilities: ``agreement`` (per word, whether the best path holds it at the same place), the N-best
    posterior at temperature 1 and ``lm_scores`` (per word, ``(log10 probability, out of vocabulary)``; None: no LM
    features)."""
    words = list(nbest[0][0]) if nbest else []
    return word_features(frame_measures(log_probs), words, agreement, nbest_word_posteriors(nbest), lm_scores)
