"""A learned word confidence: a logistic regression over cheap per-word features, fitted on a labelled split.

The frame measures and the N-best posterior of :mod:`adaptspeech.decoding.confidence` rank right above wrong words
only so well, and none of them is a probability (max-probability is over-confident, the N-best posterior of a few
beams is near 1 for most words). As the literature does (Kumar et al. 2020, NeMo's confidence estimation; Qiu et al.
2021, "Learning word-level confidence for subword end-to-end ASR"), a small estimator maps per-word features to the
probability that the word is correct; fitted by maximum likelihood, its output is calibrated on the split it was
fitted on by construction (a logistic regression's mean prediction equals the share of correct words, and so on
along each feature).

**Features** (:func:`word_features`, from the frame measures of
:func:`~adaptspeech.decoding.confidence.frame_measures`; :data:`LM_BEAM_FEATURES` and :data:`BEST_PATH_FEATURES` say
which each decoder has; :func:`~adaptspeech.decoding.confidence.lm_beam_features` and
:func:`~adaptspeech.decoding.confidence.best_path_features` gather them), for a word on output frames
``[start, end)`` of an utterance's ``[T, V]`` CTC log-probabilities:

- ``maxprob_min``, ``maxprob_mean``, ``entropy_min``, ``entropy_mean``: the least and the mean frame confidence over
  the word's frames, max-probability and the Tsallis entropy measure (``entropy``: ``tsallis_exp`` of order 1/3), as
  log-odds (``log(p / (1 - p))``, ``p`` clipped to [1e-4, 1 - 1e-4]);
- ``agreement``: 1 when the word also stands at the same place of the best-path hypothesis (the WER alignment of the
  two word sequences matches it to an equal word, :func:`~adaptspeech.metrics.confidence.word_correctness`), else 0;
  WeNet NST's agreement filter, per word (LM beam only);
- ``nbest_posterior``: its N-best posterior at temperature 1, as log-odds (LM beam only);
- ``lm_logprob``, ``lm_oov``: its log10 probability under the n-gram LM given the words before it, and 1 when the LM
  does not know it (LM beam only);
- ``chars``: its length in characters; ``log_frames``: ``log(1 + end - start)``; ``first``, ``last``: 1 for the
  utterance's first / last word.

**The estimator** (:class:`WordConfidenceEstimator`): the features standardised by their mean and standard deviation
on the fitting split, a weight per feature and a bias, fitted by Newton's method on the log loss with an L2 penalty
(:func:`fit_estimator`); saved as JSON (:meth:`WordConfidenceEstimator.save`, by default
``confidence_estimator.json`` beside the model: :data:`ESTIMATOR_FILE`) and read back with every value checked
(:func:`load_estimator`: a bad file is refused in one line naming it). The method name ``learned`` (or
``learned:FILE``) of :class:`~adaptspeech.decoding.confidence.ConfidenceMethod` scores words with it.
"""

from __future__ import annotations

import functools
import json
import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

ESTIMATOR_FILE = "confidence_estimator.json"
"""The estimator's file name beside a model (``--confidence-method learned`` without a file reads it)."""
ESTIMATOR_FORMAT = "adaptspeech word confidence estimator"
LM_BEAM = "lm_beam"
BEST_PATH = "best_path"
DECODERS = (LM_BEAM, BEST_PATH)
FRAME_FEATURES = ("maxprob_min", "maxprob_mean", "entropy_min", "entropy_mean")
SHAPE_FEATURES = ("chars", "log_frames", "first", "last")
BEST_PATH_FEATURES: tuple[str, ...] = (*FRAME_FEATURES, *SHAPE_FEATURES)
"""The features of a best-path word."""
LM_BEAM_FEATURES: tuple[str, ...] = (*FRAME_FEATURES, "agreement", "nbest_posterior", "lm_logprob", "lm_oov",
                                     *SHAPE_FEATURES)
"""The features of an LM beam word (its LM features only when the decoder has an n-gram LM)."""
FEATURES = {LM_BEAM: LM_BEAM_FEATURES, BEST_PATH: BEST_PATH_FEATURES}
"""The features each decoder's words have (what an estimator may read)."""
DEFAULT_FEATURES = {LM_BEAM: ("agreement", "nbest_posterior", "lm_logprob", "lm_oov", "chars"),
                    BEST_PATH: BEST_PATH_FEATURES}
"""The features an estimator reads unless told otherwise. The LM beam's leave out the frame measures and the position:
on the demo's sk dev split (601 words, two-fold) all twelve give ROC AUC 0.840, these five 0.863: on a few hundred
words the weak frame features (alone 0.56-0.63 on LM words) add more noise than information."""
DEFAULT_L2 = 1.0
"""The L2 penalty on the standardised weights (the bias is not penalised)."""
_CLIP = 1e-4


def log_odds(p: np.ndarray | Sequence[float]) -> np.ndarray:
    """``log(p / (1 - p))`` of probabilities ``p``, clipped to [1e-4, 1 - 1e-4] first."""
    p = np.clip(np.asarray(p, dtype=np.float64), _CLIP, 1.0 - _CLIP)
    return np.log(p / (1.0 - p))


def word_features(measures: Mapping[str, np.ndarray], words: Sequence[tuple[str, tuple[int, int]]],
                  agreement: Sequence[bool] | None = None, nbest_posteriors: Sequence[float] | None = None,
                  lm_scores: Sequence[tuple[float, bool]] | None = None) -> dict[str, np.ndarray]:
    """The features of an utterance's words (module docstring).

    Args:
        measures: :func:`frame_measures` of the utterance (``[T]`` each).
        words: ``[(text, (start_frame, end_frame)), ...]``.
        agreement: per word, whether the best path holds it at the same place (None: no ``agreement`` feature).
        nbest_posteriors: per word, its N-best posterior (None: no ``nbest_posterior``).
        lm_scores: per word, ``(log10 probability, out of the LM's vocabulary)`` (None: no LM features).

    Returns:
        ``{feature name: [W] values}``.
    """
    count = len(words)
    for name, values in (("agreement", agreement), ("nbest_posteriors", nbest_posteriors), ("lm_scores", lm_scores)):
        if values is not None and len(values) != count:
            raise ValueError(f"{len(values)} {name} for {count} words")
    out: dict[str, np.ndarray] = {}
    length = len(next(iter(measures.values()))) if measures else 0
    for measure, values in measures.items():
        spans = [values[max(s, 0) : max(e, s + 1)] if length else np.ones(1) for _, (s, e) in words]
        spans = [span if len(span) else values[-1:] for span in spans]
        out[f"{measure}_min"] = log_odds([span.min() for span in spans])
        out[f"{measure}_mean"] = log_odds([span.mean() for span in spans])
    if agreement is not None:
        out["agreement"] = np.asarray(agreement, dtype=np.float64)
    if nbest_posteriors is not None:
        out["nbest_posterior"] = log_odds(nbest_posteriors)
    if lm_scores is not None:
        out["lm_logprob"] = np.array([score for score, _ in lm_scores], dtype=np.float64)
        out["lm_oov"] = np.array([oov for _, oov in lm_scores], dtype=np.float64)
    out["chars"] = np.array([len(text) for text, _ in words], dtype=np.float64)
    out["log_frames"] = np.log1p([max(e - s, 0) for _, (s, e) in words])
    out["first"] = (np.arange(count) == 0).astype(np.float64)
    out["last"] = (np.arange(count) == count - 1).astype(np.float64)
    return out


def concat_features(per_utterance: Sequence[Mapping[str, np.ndarray]]) -> dict[str, np.ndarray]:
    """The features of several utterances' words, one after the other (the names every utterance has)."""
    if not per_utterance:
        return {}
    names = [n for n in per_utterance[0] if all(n in f for f in per_utterance)]
    return {n: np.concatenate([np.asarray(f[n], dtype=np.float64) for f in per_utterance]) for n in names}


def _sigmoid(z: np.ndarray) -> np.ndarray:
    return 0.5 * (1.0 + np.tanh(0.5 * z))


@dataclass(frozen=True)
class WordConfidenceEstimator:
    """A logistic regression of "word correct" on standardised word features (module docstring).

    Args:
        decoder: whose words it scores, :data:`LM_BEAM` or :data:`BEST_PATH`.
        features: the feature names, in the order of ``mean``, ``scale`` and ``weights``.
        mean, scale: each feature's mean and standard deviation on the fitting split (``scale`` > 0).
        weights, bias: of the standardised features.
        fitted_on: what it was fitted on (recorded, e.g. words, share correct, split).
    """

    decoder: str
    features: tuple[str, ...]
    mean: tuple[float, ...]
    scale: tuple[float, ...]
    weights: tuple[float, ...]
    bias: float
    fitted_on: Mapping[str, Any] | None = None

    def matrix(self, features: Mapping[str, np.ndarray]) -> np.ndarray:
        """``[W, F]`` standardised features of ``W`` words (``features``: name -> ``[W]``).

        Raises:
            ValueError: a feature the estimator reads is missing (naming it and the decoder).
        """
        missing = [n for n in self.features if n not in features]
        if missing:
            raise ValueError(f"the {self.decoder} confidence estimator reads {', '.join(missing)}, which these words "
                             f"lack" + (" (an LM beam estimator needs --lm)" if self.decoder == LM_BEAM else ""))
        if not self.features:
            return np.zeros((0, 0))
        raw = np.stack([np.asarray(features[n], dtype=np.float64) for n in self.features], axis=-1)
        return (raw - np.asarray(self.mean)) / np.asarray(self.scale)

    def predict(self, features: Mapping[str, np.ndarray]) -> np.ndarray:
        """``[W]`` probabilities that each word is correct."""
        x = self.matrix(features)
        if x.shape[0] == 0:
            return np.zeros(0)
        return _sigmoid(x @ np.asarray(self.weights) + self.bias)

    def to_dict(self) -> dict[str, Any]:
        """The JSON form (:meth:`save`)."""
        return {"format": ESTIMATOR_FORMAT, "version": 1, "decoder": self.decoder, "features": list(self.features),
                "mean": list(self.mean), "scale": list(self.scale), "weights": list(self.weights),
                "bias": self.bias, "fitted_on": dict(self.fitted_on or {})}

    def save(self, path: str | os.PathLike[str]) -> Path:
        """Write the estimator as JSON at ``path``: a ``.json`` file, or else a folder (made if missing, e.g. the
        model's) and its :data:`ESTIMATOR_FILE`; returns the file."""
        target = Path(path)
        if target.suffix != ".json" or target.is_dir():
            target = target / ESTIMATOR_FILE
        target.parent.mkdir(parents=True, exist_ok=True)
        partial = target.with_name(f".{target.name}.partial")
        partial.write_text(json.dumps(self.to_dict(), indent=1) + "\n", encoding="utf-8")
        partial.replace(target)
        return target


def fit_estimator(features: Mapping[str, np.ndarray], correct: Sequence[bool] | np.ndarray, decoder: str,
                  names: Sequence[str] | None = None, l2: float = DEFAULT_L2, max_steps: int = 100,
                  fitted_on: Mapping[str, Any] | None = None) -> WordConfidenceEstimator:
    """Fit the logistic regression of ``correct`` on ``features`` by Newton's method (L2 penalty ``l2`` on the
    standardised weights) until the step is below 1e-9.

    Args:
        features: name -> ``[W]`` values of ``W`` words (:func:`word_features`, :func:`concat_features`).
        correct: ``[W]`` whether each word is correct.
        decoder: :data:`LM_BEAM` or :data:`BEST_PATH`.
        names: the features used (default: those of :data:`DEFAULT_FEATURES` that ``features`` holds; any of
            ``decoder``'s :data:`FEATURES`).

    Raises:
        ValueError: no word, or only correct / only wrong words (nothing to separate), an unknown decoder.
    """
    if decoder not in DECODERS:
        raise ValueError(f"decoder {decoder!r}; allowed values: {', '.join(DECODERS)}")
    y = np.asarray(correct, dtype=np.float64)
    if len(y) == 0 or y.min() == y.max():
        raise ValueError(f"cannot fit a word confidence on {len(y)} words of which {int(y.sum())} are correct: "
                         "both correct and wrong words are needed")
    names = tuple(names) if names is not None else tuple(n for n in DEFAULT_FEATURES[decoder] if n in features)
    unknown = [n for n in names if n not in FEATURES[decoder]]
    if unknown or not names:
        raise ValueError(f"features {', '.join(unknown) or '(none)'}: the {decoder} estimator reads a non-empty set "
                         f"of {', '.join(FEATURES[decoder])}")
    missing = [n for n in names if n not in features]
    if missing:
        raise ValueError(f"features {', '.join(missing)}: not among the words' features")
    raw = np.stack([np.asarray(features[n], dtype=np.float64) for n in names], axis=-1)
    if raw.shape[0] != len(y):
        raise ValueError(f"{raw.shape[0]} words of features for {len(y)} correctness flags")
    mean = raw.mean(0)
    scale = raw.std(0)
    scale[scale < 1e-12] = 1.0
    x = np.concatenate([(raw - mean) / scale, np.ones((len(y), 1))], axis=1)
    w = np.zeros(x.shape[1])
    w[-1] = math.log(y.mean() / (1.0 - y.mean()))
    penalty = np.full(x.shape[1], float(l2))
    penalty[-1] = 0.0
    for _ in range(max_steps):
        p = _sigmoid(x @ w)
        gradient = x.T @ (p - y) + penalty * w
        hessian = (x * (p * (1.0 - p))[:, None]).T @ x + np.diag(penalty + 1e-9)
        step = np.linalg.solve(hessian, gradient)
        w -= step
        if np.abs(step).max() < 1e-9:
            break
    record = {"words": len(y), "correct_share": float(y.mean()), "l2": float(l2), **dict(fitted_on or {})}
    return WordConfidenceEstimator(decoder, names, tuple(map(float, mean)), tuple(map(float, scale)),
                                   tuple(map(float, w[:-1])), float(w[-1]), record)


def _check(condition: bool, path: Path, what: str) -> None:
    if not condition:
        raise ValueError(f"confidence estimator {path}: {what}")


def _numbers(values: Any, count: int) -> bool:
    return (isinstance(values, list) and len(values) == count
            and all(isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) for v in values))


@functools.lru_cache(maxsize=8)
def _load(path: str, stamp: tuple[int, int]) -> WordConfidenceEstimator:
    file = Path(path)
    try:
        data = json.loads(file.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise ValueError(f"confidence estimator {file}: not a readable JSON file ({err})") from None
    _check(isinstance(data, dict) and data.get("format") == ESTIMATOR_FORMAT, file,
           f"not an {ESTIMATOR_FORMAT} (no \"format\": \"{ESTIMATOR_FORMAT}\")")
    _check(data.get("version") == 1, file, f"version {data.get('version')!r}; this adaptspeech reads version 1")
    decoder = data.get("decoder")
    _check(decoder in DECODERS, file, f"decoder {decoder!r}; allowed values: {', '.join(DECODERS)}")
    names = data.get("features")
    _check(isinstance(names, list) and len(names) > 0 and all(n in FEATURES[decoder] for n in names)
           and len(set(names)) == len(names), file,
           f"features {names!r}: a non-empty list of distinct names of {', '.join(FEATURES[decoder])}")
    for key in ("mean", "scale", "weights"):
        _check(_numbers(data.get(key), len(names)), file, f"{key!r} must be {len(names)} finite numbers")
    _check(all(s > 0 for s in data["scale"]), file, "'scale' must be > 0")
    bias = data.get("bias")
    _check(isinstance(bias, (int, float)) and not isinstance(bias, bool) and math.isfinite(bias), file,
           f"bias {bias!r} is not a finite number")
    return WordConfidenceEstimator(decoder, tuple(names), tuple(map(float, data["mean"])),
                                   tuple(map(float, data["scale"])), tuple(map(float, data["weights"])),
                                   float(bias), data.get("fitted_on") if isinstance(data.get("fitted_on"), dict)
                                   else None)


def load_estimator(path: str | os.PathLike[str]) -> WordConfidenceEstimator:
    """The estimator saved at ``path`` (a file, or a folder holding :data:`ESTIMATOR_FILE`), every value checked.

    Raises:
        ValueError: one line naming the file: missing, not JSON, not an estimator, or a value out of place.
    """
    file = Path(path)
    if file.is_dir():
        file = file / ESTIMATOR_FILE
    if not file.is_file():
        raise ValueError(f"confidence estimator {file}: no such file (fit one with scripts/confidence_calibration.py "
                         "--save-estimator)")
    status = file.stat()
    return _load(str(file.resolve()), (status.st_mtime_ns, status.st_size))
