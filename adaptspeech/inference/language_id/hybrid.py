"""Hybrid language scoring: the acoustic head's top-k languages re-scored with what each language's own system says.

For each of the ``k`` most probable languages of the language-ID head (its log-posterior ``lid_log_prob``), the
utterance is run once through that language's system (its adapter above the shared encoder prefix,
:func:`~adaptspeech.inference.language_id.routing.routed_to`) and two more features are read:

* ``ctc_per_frame``: the CTC log-likelihood of the system's best-path hypothesis, per encoder frame (how well the
  language's adapter and CTC head explain the audio);
* ``lm_per_char``: where the model folder holds an n-gram LM for every language (``language_models/<language>/``,
  an ``adaptspeech lm build`` folder: ``lm.arpa`` and ``unigrams.txt``), the LM log-probability (natural log, with
  ``<s>`` and ``</s>``) of that hypothesis per character (plus one for ``</s>``): whether the words look like the
  language's text (sk and cs write differently where they sound alike). A word LM knows only the words of its
  text; a **character** LM (:func:`build_char_lm`: its tokens are the characters, ``|`` between words, and its
  folder says so in ``unit.txt``) also scores words it has never seen by their spelling.

A calibrated linear score ``sum_f w_f * feature_f`` over the candidates decides the language
(:class:`LIDCalibration`). The weights are fitted on a prepared dev split as a conditional logit (a softmax over
each utterance's candidates, maximum likelihood of the true language, a small L2 penalty: :func:`fit_weights`) and
saved in the model folder as ``lid_calibration.json`` (``adaptspeech evaluate --language auto --lid-top-k K
--fit-lid-calibration``).

Cost: the language-ID pass (the encoder without adapters up to the pooled layer), then ``k`` passes above the shared
prefix (one per candidate: hypothesis and its CTC score from the same pass), then the chosen language's decoding.
"""

from __future__ import annotations

import json
import math
import os
import shutil
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from . import TEXT_SCORES

CALIBRATION_NAME = "lid_calibration.json"
"""The calibration's file in a model folder."""
LANGUAGE_MODELS_DIR = "language_models"
"""The folder of a model folder that holds one ``adaptspeech lm build`` folder per language."""
LM_UNIT_NAME = "unit.txt"
"""The file of a per-language LM folder that names its tokens (:data:`LM_UNITS`); without it, words."""
LM_UNITS = ("word", "char")
WORD_DELIMITER = "|"
"""A character LM's token between words."""
FEATURES = ("lid_log_prob", "ctc_per_frame", "lm_per_char")
"""The features a calibration may weigh, in this order."""
FORMAT = "adaptspeech-lid-calibration"


class CalibrationError(ValueError):
    """A calibration file or setting that cannot work (one line naming it)."""


@dataclass(frozen=True)
class LIDCalibration:
    """The weights of the hybrid score.

    Args:
        weights: feature name (of :data:`FEATURES`) -> weight; the features it names are the ones used.
        top_k: the candidates it was fitted with (the default ``k`` when it is used).
        languages: the language-ID head's languages it was fitted for.
        fitted_on: what it was fitted on (rows, accuracies), for the record.
        text_score: which hypotheses the LMs score (:data:`TEXT_SCORES`; a file without it: ``own``).
    """

    weights: Mapping[str, float]
    top_k: int
    languages: tuple[str, ...]
    fitted_on: Mapping[str, Any] = field(default_factory=dict)
    text_score: str = "own"

    def __post_init__(self) -> None:
        check_text_score(self.text_score)

    @property
    def features(self) -> tuple[str, ...]:
        """The features used, in :data:`FEATURES` order."""
        return tuple(name for name in FEATURES if name in self.weights)

    def score(self, features: Mapping[str, float]) -> float:
        """``sum_f w_f * features[f]``."""
        return float(sum(self.weights[name] * features[name] for name in self.features))

    def to_dict(self) -> dict[str, Any]:
        return {"format": FORMAT, "version": 1, "weights": {k: self.weights[k] for k in self.features},
                "top_k": self.top_k, "languages": list(self.languages), "text_score": self.text_score,
                "fitted_on": dict(self.fitted_on)}

    def save(self, folder: str | os.PathLike) -> Path:
        """Write ``folder/lid_calibration.json`` (beside, then renamed into place)."""
        path = Path(folder) / CALIBRATION_NAME
        partial = path.with_suffix(".json.partial")
        partial.write_text(json.dumps(self.to_dict(), indent=1) + "\n", encoding="utf-8")
        os.replace(partial, path)
        return path

    @classmethod
    def from_dict(cls, data: Any, where: str = CALIBRATION_NAME) -> LIDCalibration:
        """From :meth:`to_dict`'s layout; anything else is a :class:`CalibrationError` naming ``where``."""
        if not isinstance(data, dict) or data.get("format") != FORMAT:
            raise CalibrationError(f"{where}: not a language-ID calibration (no \"format\": \"{FORMAT}\")")
        weights = data.get("weights")
        if (not isinstance(weights, dict) or not weights or set(weights) - set(FEATURES)
                or not all(isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
                           for v in weights.values())):
            raise CalibrationError(f"{where}: weights must map some of {', '.join(FEATURES)} to finite numbers, got "
                                   f"{weights!r}")
        top_k, languages = data.get("top_k"), data.get("languages")
        if not isinstance(top_k, int) or isinstance(top_k, bool) or top_k < 2:
            raise CalibrationError(f"{where}: top_k must be an integer of at least 2, got {top_k!r}")
        if not isinstance(languages, list) or not all(isinstance(x, str) for x in languages):
            raise CalibrationError(f"{where}: languages must be a list of language codes, got {languages!r}")
        text_score = data.get("text_score", "own")
        if text_score not in TEXT_SCORES:
            raise CalibrationError(f"{where}: text_score must be one of {', '.join(TEXT_SCORES)}, got {text_score!r}")
        return cls({k: float(v) for k, v in weights.items()}, top_k, tuple(languages), data.get("fitted_on") or {},
                   text_score)

    @classmethod
    def load(cls, folder: str | os.PathLike) -> LIDCalibration:
        """``folder/lid_calibration.json``.

        Raises:
            CalibrationError: missing (saying how to fit one), unreadable or malformed, naming the file.
        """
        path = Path(folder) / CALIBRATION_NAME
        if not path.is_file():
            raise CalibrationError(
                f"{path}: missing; hybrid language scoring needs weights fitted on a dev split: run `adaptspeech "
                f"evaluate --model {folder} --data PREPARED --split dev --language auto --lid-top-k 3 "
                "--fit-lid-calibration`")
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as err:
            raise CalibrationError(f"{path}: unreadable ({' '.join(str(err).split())}); fit it again") from None
        return cls.from_dict(data, str(path))


def check_text_score(text_score: Any, where: str = "text_score") -> str:
    """``text_score`` when it is one of :data:`TEXT_SCORES`.

    Raises:
        ValueError: anything else, in one line naming ``where``.
    """
    if text_score not in TEXT_SCORES:
        raise ValueError(f"{where} must be one of {', '.join(TEXT_SCORES)}, got {text_score!r}")
    return str(text_score)


def lm_log_prob_per_char(lm: Any, text: str) -> float:
    """A KenLM model's natural-log probability of ``text`` (with ``<s>`` and ``</s>``) per character of the text,
    ``</s>`` counted as one."""
    return math.log(10.0) * float(lm.score(text, bos=True, eos=True)) / (len(text) + 1)


def char_tokens(text: str) -> str:
    """``text`` as a character LM's tokens: its characters separated by spaces, :data:`WORD_DELIMITER` between
    words (``"ab c"`` -> ``"a b | c"``)."""
    return f" {WORD_DELIMITER} ".join(" ".join(word) for word in text.split())


def lm_unit(folder: str | os.PathLike) -> str:
    """The tokens of the LM in ``folder`` (its :data:`LM_UNIT_NAME`; ``"word"`` without one).

    Raises:
        ValueError: a unit file naming something else than :data:`LM_UNITS` (naming the file).
    """
    path = Path(folder) / LM_UNIT_NAME
    if not path.is_file():
        return "word"
    unit = path.read_text(encoding="utf-8").strip()
    if unit not in LM_UNITS:
        raise ValueError(f"{path}: the LM's unit must be one of {', '.join(LM_UNITS)}, got {unit!r}")
    return unit


def build_char_lm(texts: Sequence[str], out_dir: str | os.PathLike, order: int = 5) -> Path:
    """A character ``order``-gram LM of ``texts`` (one sentence each, normalised as the transcripts are) in
    ``out_dir``: ``lm.arpa`` over :func:`char_tokens` (``adaptspeech lm build``'s estimator), ``unigrams.txt`` and
    :data:`LM_UNIT_NAME` saying ``char``. Returns ``out_dir``."""
    from ...lm.build import build_arpa

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    text = out / "char_text.txt"
    text.write_text("\n".join(char_tokens(t) for t in texts if t.strip()) + "\n", encoding="utf-8")
    build_arpa(text, out, order=order, progress=False)
    text.unlink()
    (out / LM_UNIT_NAME).write_text("char\n", encoding="utf-8")
    return out


class LanguageLMs:
    """The per-language n-gram LMs of a model folder (``language_models/<language>/``), loaded with ``kenlm``.

    Args:
        files: language -> its KenLM file (ARPA or binary).
        units: language -> its LM's tokens (:data:`LM_UNITS`; default: words).
    """

    def __init__(self, files: Mapping[str, Path], units: Mapping[str, str] | None = None) -> None:
        import kenlm

        self.files = dict(files)
        self.units = {language: (units or {}).get(language, "word") for language in self.files}
        self.models = {language: kenlm.Model(str(path)) for language, path in self.files.items()}

    @classmethod
    def from_folder(cls, folder: str | os.PathLike, languages: Sequence[str]) -> LanguageLMs | None:
        """The LMs of ``languages`` in ``folder/language_models/``; None when that folder lacks one of them.

        Raises:
            ValueError: an LM file of a language that is there is cut short (naming it).
        """
        from ...lm.files import locate_lm

        root = Path(folder) / LANGUAGE_MODELS_DIR
        if not all((root / language).is_dir() for language in languages):
            return None
        return cls({language: locate_lm(root / language)[0] for language in languages},
                   {language: lm_unit(root / language) for language in languages})

    def per_char(self, language: str, text: str) -> float:
        """:func:`lm_log_prob_per_char` of ``text`` under ``language``'s LM (a character LM scores
        :func:`char_tokens` of it, over the same characters)."""
        model = self.models[language]
        if self.units[language] == "char":
            return math.log(10.0) * float(model.score(char_tokens(text), bos=True, eos=True)) / (len(text) + 1)
        return lm_log_prob_per_char(model, text)


def install_language_lms(folder: str | os.PathLike, lm_dirs: Mapping[str, str | os.PathLike]) -> list[Path]:
    """Copy ``adaptspeech lm build`` folders (language -> folder with ``lm.arpa`` and ``unigrams.txt``; a character
    LM's :data:`LM_UNIT_NAME` too) into ``folder/language_models/<language>/``; each is checked first (a cut-short ARPA
    or a bad unit file is refused, naming it)."""
    from ...lm.build import UNIGRAMS_NAME
    from ...lm.files import locate_lm

    out = []
    for language, lm_dir in lm_dirs.items():
        kenlm_file, _ = locate_lm(lm_dir)
        lm_unit(lm_dir)  # a bad unit file is refused before anything is copied
        target = Path(folder) / LANGUAGE_MODELS_DIR / language
        target.mkdir(parents=True, exist_ok=True)
        for source in (kenlm_file, kenlm_file.parent / UNIGRAMS_NAME, Path(lm_dir) / LM_UNIT_NAME):
            if source.is_file():
                shutil.copyfile(source, target / source.name)
        if not (Path(lm_dir) / LM_UNIT_NAME).is_file():
            (target / LM_UNIT_NAME).unlink(missing_ok=True)  # a word LM replacing a character LM
        out.append(target)
    return out


@torch.no_grad()
def best_path_scores(model: Any, batch: Mapping[str, torch.Tensor], tokenizer: Any) -> tuple[list[str], torch.Tensor]:
    """One forward pass of ``model`` as routed now: the best-path (CTC greedy) hypotheses and their CTC
    log-likelihood per encoder frame (forward algorithm over all alignments of the hypothesis).

    Args:
        batch: collated model inputs of ``B`` utterances (no labels needed).
        tokenizer: the routed system's tokenizer (its ids are the CTC head's outputs).

    Returns:
        ``(texts [B], log-likelihood per frame [B] float32)``.
    """
    from ...decoding import evaluating
    from ...decoding.ctc_greedy import ctc_greedy_decode

    if getattr(model, "ctc_head", None) is None:
        raise ValueError(f"hybrid language scoring reads the CTC head; this model has head={model.config.head!r}: "
                         "use --lid-scoring acoustic")
    inputs = batch[model.main_input_name].to(model.device)
    mask = batch.get("attention_mask")
    with evaluating(model):
        out = model(**{model.main_input_name: inputs}, attention_mask=None if mask is None else mask.to(model.device))
    log_probs = out.logits.float().log_softmax(-1).cpu()  # [B, T, V]
    frames = out.frame_lengths.cpu().long()
    blank = model.config.pad_token_id
    ids = ctc_greedy_decode(log_probs, frames, blank_id=blank)
    flat = torch.tensor([i for row in ids for i in row], dtype=torch.long)
    lengths = torch.tensor([len(row) for row in ids], dtype=torch.long)
    likelihood = -torch.nn.functional.ctc_loss(log_probs.transpose(0, 1), flat, frames, lengths, blank=blank,
                                               reduction="none", zero_infinity=False)
    texts = [tokenizer.decode(row, group_tokens=False) for row in ids]
    return texts, likelihood / frames.clamp_min(1).to(likelihood.dtype)


def lm_matrix(lms: LanguageLMs, languages: Sequence[str], texts: Sequence[str]) -> np.ndarray:
    """``M[i, j]``: the LM of ``languages[j]`` on ``texts[i]``, per character (:meth:`LanguageLMs.per_char`).

    Returns:
        ``[len(texts), len(languages)]`` float64.
    """
    return np.array([[lms.per_char(language, text) for language in languages] for text in texts], np.float64)


def text_scores(lms: LanguageLMs, languages: Sequence[str], texts: Sequence[str], text_score: str = "own",
                base_text: str | None = None) -> np.ndarray:
    """Each candidate language's text score (``lm_per_char``) as :data:`TEXT_SCORES` says.

    Args:
        languages: the candidates ``[k]``.
        texts: their systems' hypotheses ``[k]`` (``texts[i]`` of ``languages[i]``'s system).
        base_text: the hypothesis of the encoder without adapters (needed by ``base``).

    Returns:
        ``[k]``: ``own``: ``M[j, j]``; ``shared``: ``mean_i M[i, j]``; ``base``: the LM of ``languages[j]`` on
        ``base_text`` (``M`` of :func:`lm_matrix`).

    Raises:
        ValueError: an unknown ``text_score``, ``base`` without ``base_text``, or texts and languages that differ in
            number.
    """
    check_text_score(text_score)
    if len(texts) != len(languages):
        raise ValueError(f"text_scores: {len(texts)} hypotheses for {len(languages)} candidate languages")
    if text_score == "base":
        if base_text is None:
            raise ValueError("text_score 'base' needs the hypothesis of the encoder without adapters (base_text)")
        return lm_matrix(lms, languages, [base_text])[0]
    matrix = lm_matrix(lms, languages, texts)
    return np.diag(matrix).copy() if text_score == "own" else matrix.mean(axis=0)


def candidates_features(lid_log_probs: Sequence[float], ctc_per_frame: Sequence[float], texts: Sequence[str],
                        languages: Sequence[str], lms: LanguageLMs | None, text_score: str = "own",
                        base_text: str | None = None) -> list[dict[str, float]]:
    """The features of an utterance's ``k`` candidates (``lm_per_char`` only with ``lms``: :func:`text_scores`).

    Args:
        lid_log_probs, ctc_per_frame, texts, languages: per candidate ``[k]``: the head's log-posterior, its system's
            CTC score per frame and best-path hypothesis, its language.
    """
    rows = [{"lid_log_prob": float(p), "ctc_per_frame": float(c)}
            for p, c in zip(lid_log_probs, ctc_per_frame, strict=True)]
    if lms is not None:
        for row, value in zip(rows, text_scores(lms, languages, texts, text_score, base_text), strict=True):
            row["lm_per_char"] = float(value)
    return rows


@dataclass
class HybridScorer:
    """Scores candidates with a calibration (and the LMs its features need).

    Args:
        calibration: the fitted weights.
        lms: the per-language LMs (needed when the calibration weighs ``lm_per_char``).
    """

    calibration: LIDCalibration
    lms: LanguageLMs | None = None

    @classmethod
    def from_folder(cls, folder: str | os.PathLike, languages: Sequence[str]) -> HybridScorer:
        """The calibration of a model folder and, when it weighs the LM score, the folder's per-language LMs.

        Raises:
            CalibrationError: no calibration, one fitted for other languages, or an LM it needs is missing.
        """
        calibration = LIDCalibration.load(folder)
        if list(calibration.languages) != list(languages):
            raise CalibrationError(f"{Path(folder) / CALIBRATION_NAME}: fitted for languages "
                                   f"{list(calibration.languages)}, the language-ID head has {list(languages)}; fit "
                                   "it again")
        lms = None
        if "lm_per_char" in calibration.features:
            lms = LanguageLMs.from_folder(folder, languages)
            if lms is None:
                missing = [x for x in languages if not (Path(folder) / LANGUAGE_MODELS_DIR / x).is_dir()]
                raise CalibrationError(f"{Path(folder) / LANGUAGE_MODELS_DIR}: no LM for {', '.join(missing)}, which "
                                       f"{CALIBRATION_NAME} weighs (lm_per_char); add them or fit it again without")
        return cls(calibration, lms)

    @property
    def text_score(self) -> str:
        """Which hypotheses the LMs score (the calibration's :data:`TEXT_SCORES` entry)."""
        return self.calibration.text_score

    def features(self, lid_log_probs: Sequence[float], ctc_per_frame: Sequence[float], texts: Sequence[str],
                 languages: Sequence[str], base_text: str | None = None) -> list[dict[str, float]]:
        """:func:`candidates_features` with this scorer's LMs and text score."""
        return candidates_features(lid_log_probs, ctc_per_frame, texts, languages, self.lms, self.text_score,
                                   base_text)

    def score(self, features: Mapping[str, float]) -> float:
        return self.calibration.score(features)


def fit_weights(candidates: Sequence[np.ndarray], truth: Sequence[int | None], l2: float = 1e-3) -> np.ndarray:
    """Maximum-likelihood weights ``w`` ``[F]`` of a conditional logit: ``P(candidate j | utterance) =
    softmax_j(features_j . w)``, with the penalty ``l2 * |w|^2`` (per utterance).

    Args:
        candidates: per utterance its candidates' features ``[k_i, F]``.
        truth: per utterance the index of the true candidate, or None where the truth is not among them (left out).

    Raises:
        ValueError: no utterance whose truth is among its candidates.
    """
    rows = [(torch.as_tensor(c, dtype=torch.float64), t) for c, t in zip(candidates, truth, strict=True)
            if t is not None and len(c) > 1]
    if not rows:
        raise ValueError("fitting the language-ID calibration needs utterances whose true language is among at "
                         "least 2 candidates; none are (raise --lid-top-k, or use more dev rows)")
    width = rows[0][0].shape[1]
    weights = torch.zeros(width, dtype=torch.float64, requires_grad=True)
    optimizer = torch.optim.LBFGS([weights], lr=1.0, max_iter=200, tolerance_grad=1e-10, tolerance_change=1e-12,
                                  line_search_fn="strong_wolfe")

    def closure() -> torch.Tensor:
        optimizer.zero_grad()
        loss = sum(-torch.log_softmax(c @ weights, 0)[t] for c, t in rows) / len(rows) + l2 * weights.pow(2).sum()
        loss.backward()
        return loss

    optimizer.step(closure)
    return weights.detach().numpy()


def fit_calibration(candidates: Sequence[Sequence[Mapping[str, float]]], candidate_languages: Sequence[Sequence[str]],
                    truth: Sequence[str], languages: Sequence[str], top_k: int, l2: float = 1e-3,
                    fitted_on: Mapping[str, Any] | None = None, text_score: str = "own") -> LIDCalibration:
    """A :class:`LIDCalibration` fitted on dev utterances: per utterance its candidates' features (each a
    :func:`candidates_features` dict, the same names in all, its LM score as ``text_score`` says) and languages, and
    the true language.

    ``fitted_on`` records the rows, how many had the truth among the candidates, and the accuracy of the acoustic
    head (the first candidate) and of the fitted score on these rows."""
    names = [name for name in FEATURES if name in candidates[0][0]]
    arrays = [np.array([[c[name] for name in names] for c in row], np.float64) for row in candidates]
    index = [langs.index(t) if t in langs else None for langs, t in zip(candidate_languages, truth, strict=True)]
    weights = fit_weights(arrays, index, l2)
    chosen = [int(np.argmax(a @ weights)) for a in arrays]
    record = {"rows": len(truth), "truth_among_candidates": sum(i is not None for i in index),
              "accuracy_acoustic": float(np.mean([langs[0] == t for langs, t in zip(candidate_languages, truth,
                                                                                     strict=True)])),
              "accuracy_hybrid": float(np.mean([langs[j] == t for langs, j, t in zip(candidate_languages, chosen,
                                                                                      truth, strict=True)])),
              "l2": l2, **dict(fitted_on or {})}
    return LIDCalibration(dict(zip(names, map(float, weights), strict=True)), top_k, tuple(languages), record,
                          text_score)
