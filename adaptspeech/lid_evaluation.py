"""How well the language is told on a prepared split: accuracy overall and per language, the confusion counts, for
whole utterances or for their first seconds only.

A prefix is the first ``seconds`` of each utterance's model input, normalised over itself (as ``prepare`` would
normalise that audio alone: per-utterance standardisation does not see the rest; standardising the standardised
prefix again gives the same numbers as standardising the raw prefix).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch

from .data.array_rows import column_list, take_rows, with_array_rows
from .data.feature_types import FeatureType
from .runtime.features import normalize_utterance


def prefix_row(row: dict[str, Any], kind: FeatureType, seconds: float) -> dict[str, Any]:
    """``row`` with its model input cut to the first ``seconds`` (renormalised when the features are)."""
    units = kind.num_units(round(seconds * kind.sampling_rate))
    values = np.asarray(row[kind.input_name], np.float32)
    if len(values) <= units:
        return row
    values = values[:units]
    renormalize = kind.do_normalize and not kind.global_normalization  # global statistics: a prefix stays as it is
    return {**row, kind.input_name: normalize_utterance(values, axis=0) if renormalize else values}


@torch.no_grad()
def identify_dataset(identifier: Any, dataset: Any, processor: Any, batch_size: int = 16,
                     prefix_seconds: float | None = None, too_short: list[int] | None = None) -> np.ndarray:
    """Log-posteriors ``[N, L]`` (over ``identifier.languages``) of every row of a prepared split, in order.

    Args:
        identifier: a :class:`~adaptspeech.inference.language_id.identifiers.LanguageIdentifier`.
        dataset: the prepared split.
        processor: the routed model's processor (its feature type names the input column).
        prefix_seconds: read only the first seconds of each row (None: the whole row).
        too_short: collects the rows too short for the pooled statistics; they get the uniform posterior (every
            language ``log(1 / L)``: the first language wins).
    """
    from .data.collator import DataCollatorCTCWithPadding
    from .heads.lid import UtteranceTooShortError

    kind = FeatureType.of(processor.feature_extractor)
    collator = DataCollatorCTCWithPadding(processor, feature_type=kind.name, ctc_labels=False)
    rows = with_array_rows(dataset)
    lengths = column_list(dataset, "input_length") if "input_length" in dataset.column_names else [0] * len(dataset)
    order = sorted(range(len(dataset)), key=lambda i: lengths[i])
    out = np.zeros((len(dataset), len(identifier.languages)), np.float32)
    for start in range(0, len(order), batch_size):
        indices = order[start:start + batch_size]
        batch_rows = take_rows(rows, indices)
        if prefix_seconds is not None:
            batch_rows = [prefix_row(row, kind, prefix_seconds) for row in batch_rows]
        try:
            out[indices] = identifier.log_probs_batch(collator(batch_rows)).numpy()
        except UtteranceTooShortError:
            for i, row in zip(indices, batch_rows, strict=True):
                try:
                    out[i] = identifier.log_probs_batch(collator([row])).numpy()[0]
                except UtteranceTooShortError:
                    out[i] = -np.log(len(identifier.languages))
                    if too_short is not None:
                        too_short.append(i)
    return out


def accuracy_report(log_probs: np.ndarray, languages: Sequence[str], truth: Sequence[str]) -> dict[str, Any]:
    """Accuracy overall and per true language, and the confusion counts ``{true: {predicted: n}}``.

    Args:
        log_probs: ``[N, L]`` over ``languages``.
        truth: each row's language (a language outside ``languages`` counts as an error every time).
    """
    predicted = [languages[i] for i in np.asarray(log_probs).argmax(-1)]
    confusion: dict[str, Counter] = {}
    for true, guess in zip(truth, predicted, strict=True):
        confusion.setdefault(true, Counter())[guess] += 1
    per_language = {
        true: {"accuracy": counts[true] / sum(counts.values()), "num_utterances": sum(counts.values())}
        for true, counts in sorted(confusion.items())
    }
    correct = sum(t == p for t, p in zip(truth, predicted, strict=True))
    return {
        "accuracy": correct / max(len(truth), 1),
        "num_utterances": len(truth),
        "per_language": per_language,
        "confusion": {true: dict(sorted(counts.items())) for true, counts in sorted(confusion.items())},
        "languages": list(languages),
    }


def lid_accuracy(model: Any, dataset: Any, processor: Any, batch_size: int = 16,
                 prefix_seconds: float | None = None) -> dict[str, Any]:
    """:func:`accuracy_report` of ``model``'s own language-ID head on a prepared split."""
    from .inference.language_id.identifiers import HeadIdentifier

    identifier = HeadIdentifier(model, processor)
    log_probs = identify_dataset(identifier, dataset, processor, batch_size, prefix_seconds)
    return accuracy_report(log_probs, identifier.languages, column_list(dataset, "language"))


def evaluate_dataset_auto(
    model: Any,
    dataset: Any,
    processor: Any,
    identifier: Any,
    method: str = "ctc_greedy",
    batch_size: int = 16,
    top_k: int = 1,
    prior_weight: float = 1.0,
    progress: bool = True,
    lm_decoder: Any = None,
    return_hypotheses: bool = False,
    hybrid: Any = None,
    **options: Any,
) -> dict[str, Any]:
    """:func:`~adaptspeech.evaluation.evaluate_dataset` with every row routed to the language ``identifier`` finds
    (:mod:`adaptspeech.inference.language_id.routing`): rows are decoded in groups of one routed language; the rates are
    scored against the rows' own references and languages.

    Args:
        hybrid: a :class:`~adaptspeech.inference.language_id.hybrid.HybridScorer`: the ``top_k`` candidates are scored
            with its calibration (:func:`candidate_feature_table`; ``prior_weight`` is not used) and only the chosen
            language's system decodes each row.

    Returns:
        the error rates as ``evaluate_dataset`` gives them, plus ``"lid"`` (:func:`accuracy_report` of the chosen
        languages, whole utterances), ``"routing"`` (``top_k``, ``prior_weight`` or ``scoring: hybrid``, rows per
        system) and, with ``return_hypotheses``, ``"hypotheses"`` and ``"routed_languages"`` (dataset order).
    """
    import time

    from .evaluation import transcribe_dataset
    from .inference.language_id.routing import ctc_log_likelihoods, routed_processor, routed_to, top_languages

    if top_k < 1:
        raise ValueError(f"top_k must be at least 1, got {top_k}")
    start = time.perf_counter()
    too_short: list[int] = []
    log_probs = torch.from_numpy(identify_dataset(identifier, dataset, processor, batch_size, too_short=too_short))
    candidates = [top_languages(row, identifier.languages, top_k) for row in log_probs]
    if hybrid is not None:
        return _evaluate_hybrid(model, dataset, processor, identifier, candidates, hybrid, method, batch_size,
                                progress, lm_decoder, return_hypotheses, start, too_short, **options)
    wanted: dict[str, list[int]] = {}
    for i, row in enumerate(candidates):
        for language, _ in row:
            wanted.setdefault(language, []).append(i)
    texts: dict[tuple[int, str], str] = {}
    scores: dict[tuple[int, str], float] = {}
    for language, indices in wanted.items():
        subset = dataset.select(indices)
        routed = routed_processor(model, language, processor)
        with routed_to(model, language):
            hypotheses = transcribe_dataset(model, subset, routed, method, batch_size, progress, lm_decoder,
                                            **options)
            if top_k > 1:
                for offset, likelihood in enumerate(_ctc_scores(model, subset, routed, hypotheses, batch_size,
                                                                ctc_log_likelihoods)):
                    scores[(indices[offset], language)] = likelihood
        for i, text in zip(indices, hypotheses, strict=True):
            texts[(i, language)] = text
    chosen = [max(row, key=lambda c, i=i: scores.get((i, c[0]), 0.0) + prior_weight * c[1])[0]
              for i, row in enumerate(candidates)]
    hypotheses = [texts[(i, language)] for i, language in enumerate(chosen)]
    routing = {"top_k": top_k, "prior_weight": prior_weight}
    return _routed_result(model, dataset, identifier, chosen, hypotheses, routing, method, lm_decoder, start,
                          too_short, return_hypotheses)


def _routed_result(model: Any, dataset: Any, identifier: Any, chosen: list[str], hypotheses: list[str],
                   routing: dict[str, Any], method: str, lm_decoder: Any, start: float, too_short: list[int],
                   return_hypotheses: bool) -> dict[str, Any]:
    """The result of :func:`evaluate_dataset_auto` from the chosen languages and their hypotheses (dataset order)."""
    import time

    from .inference.language_id.routing import system_for
    from .metrics import compute_error_rates

    truth = column_list(dataset, "language")
    result = compute_error_rates(hypotheses, list(dataset["text"]), languages=truth)
    result["method"] = "ctc_lm" if lm_decoder is not None else method
    result["decode_seconds"] = time.perf_counter() - start
    index = {lang: i for i, lang in enumerate(identifier.languages)}
    one_hot = np.full((len(chosen), len(identifier.languages)), -np.inf, np.float32)
    one_hot[np.arange(len(chosen)), [index[lang] for lang in chosen]] = 0.0
    result["lid"] = accuracy_report(one_hot, identifier.languages, truth)
    paths = column_list(dataset, "path") if "path" in dataset.column_names else list(range(len(dataset)))
    result["routing"] = {**routing, "systems": dict(Counter(system_for(model, lang) for lang in chosen)),
                         "too_short_to_identify": [paths[i] for i in sorted(too_short)]}
    if return_hypotheses:
        result["hypotheses"], result["routed_languages"] = hypotheses, chosen
    return result


BASE_PASS = None
"""The key of :func:`candidate_passes` for the encoder without adapters (the multilingual base and its CTC head)."""


def candidate_passes(model: Any, dataset: Any, processor: Any, wanted: Mapping[str | None, Sequence[int]],
                     batch_size: int = 16, prefix_seconds: float | None = None) -> dict[tuple[int, str | None],
                                                                                        tuple[str, float]]:
    """One pass of each wanted system over its rows of a prepared split: ``{(row, language): (best-path hypothesis,
    CTC log-likelihood per frame)}`` (:func:`~adaptspeech.inference.language_id.hybrid.best_path_scores`).

    Args:
        wanted: language -> the row indices it runs over (its adapter above the shared encoder prefix, as routed by
            ``--language``); :data:`BASE_PASS` (None) -> rows run through the encoder without adapters.
        prefix_seconds: read only the rows' first seconds (:func:`prefix_row`).
    """
    from .data.collator import model_collator
    from .inference.language_id.hybrid import best_path_scores
    from .inference.language_id.routing import routed_processor, routed_to

    rows = with_array_rows(dataset)
    kind = FeatureType.of(processor.feature_extractor)
    found: dict[tuple[int, str | None], tuple[str, float]] = {}
    for language, indices in wanted.items():
        routed = processor if language is BASE_PASS else routed_processor(model, language, processor)
        collator = model_collator(model, routed, ctc_labels=False)
        with model.without_adapters() if language is BASE_PASS else routed_to(model, language):
            for start in range(0, len(indices), batch_size):
                part = list(indices[start:start + batch_size])
                batch_rows = take_rows(rows, part)
                if prefix_seconds is not None:
                    batch_rows = [prefix_row(row, kind, prefix_seconds) for row in batch_rows]
                texts, per_frame = best_path_scores(model, collator(batch_rows), routed.tokenizer)
                for i, text, value in zip(part, texts, per_frame.tolist(), strict=True):
                    found[(i, language)] = (text, value)
    return found


def candidate_feature_table(model: Any, dataset: Any, processor: Any, candidates: Sequence[Sequence[tuple[str, float]]],
                            lms: Any = None, batch_size: int = 16, prefix_seconds: float | None = None,
                            text_score: str = "own") -> list[list[dict[str, float]]]:
    """Per row, per candidate ``(language, lid log-prob)`` of ``candidates``: the hybrid features
    (:func:`~adaptspeech.inference.language_id.hybrid.candidates_features`: one pass of each candidate language's system
    over the row, its best-path hypothesis, the CTC log-likelihood per frame and, with ``lms``, the LM score per
    character as ``text_score`` says; ``"base"`` adds a pass of the encoder without adapters). Rows are run in groups
    of one candidate language; with ``prefix_seconds`` only their first seconds (:func:`prefix_row`)."""
    from .inference.language_id.hybrid import candidates_features

    wanted: dict[str | None, list[int]] = {}
    for i, row in enumerate(candidates):
        for language, _ in row:
            wanted.setdefault(language, []).append(i)
    if lms is not None and text_score == "base":
        wanted[BASE_PASS] = list(range(len(candidates)))
    found = candidate_passes(model, dataset, processor, wanted, batch_size, prefix_seconds)
    return [candidates_features([lp for _, lp in row], [found[(i, lang)][1] for lang, _ in row],
                                [found[(i, lang)][0] for lang, _ in row], [lang for lang, _ in row], lms, text_score,
                                found.get((i, BASE_PASS), ("", 0.0))[0])
            for i, row in enumerate(candidates)]


def choose_languages(model: Any, dataset: Any, processor: Any, identifier: Any, hybrid: Any = None,
                     top_k: int | None = None, batch_size: int = 16, prefix_seconds: float | None = None) -> list[str]:
    """The language each row of a prepared split is routed to (dataset order): the identifier's most probable one,
    or with ``hybrid`` the best hybrid score among its ``top_k`` (default: the calibration's) candidates; with
    ``prefix_seconds`` both read only the rows' first seconds."""
    from .inference.language_id.routing import top_languages

    log_probs = torch.from_numpy(identify_dataset(identifier, dataset, processor, batch_size, prefix_seconds))
    if hybrid is None:
        return [identifier.languages[int(i)] for i in log_probs.argmax(-1)]
    candidates = [top_languages(row, identifier.languages, top_k or hybrid.calibration.top_k) for row in log_probs]
    table = candidate_feature_table(model, dataset, processor, candidates, hybrid.lms, batch_size, prefix_seconds,
                                    hybrid.text_score)
    return [row[int(np.argmax([hybrid.score(f) for f in features]))][0]
            for row, features in zip(candidates, table, strict=True)]


def _evaluate_hybrid(model: Any, dataset: Any, processor: Any, identifier: Any,
                     candidates: list[list[tuple[str, float]]], hybrid: Any, method: str, batch_size: int,
                     progress: bool, lm_decoder: Any, return_hypotheses: bool, start: float, too_short: list[int],
                     **options: Any) -> dict[str, Any]:
    """:func:`evaluate_dataset_auto` with the hybrid score: candidates scored, then each chosen language decodes its
    rows."""
    from .evaluation import transcribe_dataset
    from .inference.language_id.routing import routed_processor, routed_to

    table = candidate_feature_table(model, dataset, processor, candidates, hybrid.lms, batch_size,
                                    text_score=hybrid.text_score)
    chosen = [row[int(np.argmax([hybrid.score(f) for f in features]))][0]
              for row, features in zip(candidates, table, strict=True)]
    hypotheses = [""] * len(chosen)
    for language in dict.fromkeys(chosen):
        indices = [i for i, lang in enumerate(chosen) if lang == language]
        with routed_to(model, language):
            texts = transcribe_dataset(model, dataset.select(indices), routed_processor(model, language, processor),
                                       method, batch_size, progress, lm_decoder, **options)
        for i, text in zip(indices, texts, strict=True):
            hypotheses[i] = text
    routing = {"top_k": len(candidates[0]) if candidates else 0, "scoring": "hybrid",
               "weights": dict(hybrid.calibration.weights), "text_score": hybrid.text_score}
    return _routed_result(model, dataset, identifier, chosen, hypotheses, routing, method, lm_decoder, start,
                          too_short, return_hypotheses)


def fit_lid_calibration(model: Any, dataset: Any, processor: Any, identifier: Any, top_k: int, lms: Any = None,
                        batch_size: int = 16, l2: float = 1e-3, text_score: str = "own") -> Any:
    """Fit the hybrid score's weights on a prepared (dev) split
    (:func:`~adaptspeech.inference.language_id.hybrid.fit_calibration` of :func:`candidate_feature_table`'s features,
    the LMs scoring the hypotheses ``text_score`` names).

    Raises:
        ValueError: ``top_k`` below 2 (nothing to choose between), an unknown ``text_score``, or one other than
            ``own`` without ``lms``.
    """
    from .inference.language_id.hybrid import check_text_score, fit_calibration
    from .inference.language_id.routing import top_languages

    if top_k < 2:
        raise ValueError(f"--lid-top-k {top_k}: fitting the hybrid score needs at least 2 candidate languages")
    check_text_score(text_score, "--lid-text-score")
    if lms is None and text_score != "own":
        raise ValueError(f"--lid-text-score {text_score}: the LMs score the hypotheses, and the model folder has no "
                         "language_models/ for every language (add them with --lid-lms)")
    log_probs = torch.from_numpy(identify_dataset(identifier, dataset, processor, batch_size))
    candidates = [top_languages(row, identifier.languages, top_k) for row in log_probs]
    table = candidate_feature_table(model, dataset, processor, candidates, lms, batch_size, text_score=text_score)
    return fit_calibration(table, [[lang for lang, _ in row] for row in candidates], column_list(dataset, "language"),
                           identifier.languages, top_k, l2, text_score=text_score)


def _ctc_scores(model: Any, subset: Any, processor: Any, texts: Sequence[str], batch_size: int,
                score: Any) -> list[float]:
    """``log p_CTC(text | row)`` of every row of ``subset`` under the model as routed now."""
    from .data.collator import model_collator

    collator = model_collator(model, processor, ctc_labels=False)
    rows = with_array_rows(subset)
    out: list[float] = []
    for start in range(0, len(subset), batch_size):
        indices = list(range(start, min(start + batch_size, len(subset))))
        batch = collator(take_rows(rows, indices))
        out += score(model, batch, [texts[i] for i in indices], processor.tokenizer).tolist()
    return out
