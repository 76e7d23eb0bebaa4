"""The language-ID options of ``transcribe`` and ``evaluate``: ``--language auto`` with the model's own language-ID
head or a separate ``--lid-model``, the top-k re-ranking (:mod:`adaptspeech.inference.language_id.routing`) and the
hybrid scoring with its calibration (:mod:`adaptspeech.inference.language_id.hybrid`)."""

from __future__ import annotations

import argparse
from typing import Any

from ..inference.language_id import TEXT_SCORES
from .common import CommandError, _non_negative_float, _positive_int

AUTO = "auto"
"""The ``--language`` value that identifies each utterance's language."""
LID_SCORINGS = ("acoustic", "hybrid")
"""``--lid-scoring``: the head's posterior (with the top-k CTC re-ranking), or the calibrated hybrid score."""


def add_lid_options(parser: argparse.ArgumentParser) -> None:
    """``--lid-model``, ``--lid-label-map``, ``--lid-top-k``, ``--lid-prior-weight`` (used with ``--language auto``)."""
    group = parser.add_argument_group("language identification (--language auto)")
    group.add_argument("--lid-model", default=None, metavar="DIR",
                       help="a transformers Wav2Vec2ForSequenceClassification folder (the MMS-LID format) that tells "
                       "the language instead of the model's own language-ID head")
    group.add_argument("--lid-label-map", default=None, metavar="LABEL=LANGUAGE,...",
                       help="--lid-model labels that are spelled otherwise than the model's languages (e.g. "
                       "ron=ro,ces=cs); labels equal to a language need no entry")
    group.add_argument("--lid-top-k", type=_positive_int, default=1, metavar="K",
                       help="decode with the K most probable languages and keep the best CTC log-likelihood plus "
                       "the weighted language-ID log-prior (default 1: the most probable language only)")
    group.add_argument("--lid-prior-weight", type=_non_negative_float, default=1.0, metavar="W",
                       help="weight (at least 0) of the language-ID log-prior in the top-K score (default 1)")
    group.add_argument("--lid-scoring", choices=LID_SCORINGS, default="acoustic",
                       help="hybrid: score the top-K languages with the language-ID log-prior, each language's CTC "
                       "log-likelihood per frame and its n-gram LM per character (the model folder's language_models/"
                       "), weighted by the model folder's lid_calibration.json; K is --lid-top-k, else the "
                       "calibration's (default acoustic; docs/lid.md)")


def add_calibration_options(parser: argparse.ArgumentParser) -> None:
    """``evaluate``'s ``--fit-lid-calibration`` and ``--lid-lms``."""
    group = parser.add_argument_group("fitting the hybrid language score (--language auto)")
    group.add_argument("--fit-lid-calibration", action="store_true",
                       help="fit the hybrid score's weights on this split (use dev) with the --lid-top-k candidates "
                       "of the model's language-ID head, write lid_calibration.json into the model folder and stop")
    group.add_argument("--lid-lms", default=None, metavar="LANGUAGE=DIR,...",
                       help="with --fit-lid-calibration: copy these `adaptspeech lm build` folders into the model "
                       "folder's language_models/ first (the LM score is fitted when every language has one)")
    group.add_argument("--lid-text-score", default=None, choices=TEXT_SCORES,
                       help="with --fit-lid-calibration: which hypotheses each candidate's LM scores (saved with the "
                       "weights): own (its own system's), shared (every candidate's, averaged), base (the encoder's "
                       "without adapters); default own (docs/lid.md)")


def language_identifier(args: argparse.Namespace, model: Any, processor: Any) -> Any | None:
    """The identifier of ``--language auto`` (the ``--lid-model`` folder, else the model's own head), or None for
    another ``--language``; language-ID options without ``--language auto`` are refused.

    Raises:
        CommandError: one line naming the setting that cannot work.
    """
    from ..inference.language_id.identifiers import (
        HeadIdentifier,
        LanguageIDError,
        SequenceClassificationIdentifier,
        parse_label_map,
    )

    if args.language != AUTO:
        given = [flag for flag, value in (("--lid-model", args.lid_model), ("--lid-label-map", args.lid_label_map),
                                          ("--lid-top-k", args.lid_top_k != 1),
                                          ("--lid-prior-weight", args.lid_prior_weight != 1.0)) if value]
        if given:
            raise CommandError(f"{', '.join(given)}: used with --language auto only")
        return None
    try:
        if args.lid_model is not None:
            return SequenceClassificationIdentifier.from_folder(args.lid_model, model.adapter_languages,
                                                                parse_label_map(args.lid_label_map))
        if args.lid_label_map:
            raise CommandError("--lid-label-map maps the labels of --lid-model; pass --lid-model DIR")
        return HeadIdentifier(model, processor)
    except LanguageIDError as err:
        raise CommandError(str(err)) from None


def parse_language_dirs(text: str | None, option: str = "--lid-lms") -> dict[str, str]:
    """``"sk=lm/sk,cs=lm/cs"`` -> ``{"sk": "lm/sk", "cs": "lm/cs"}``.

    Raises:
        CommandError: an entry without ``=``, or a language given twice (naming it).
    """
    out: dict[str, str] = {}
    for entry in filter(None, (part.strip() for part in (text or "").split(","))):
        language, sep, folder = (x.strip() for x in entry.partition("="))
        if not sep or not language or not folder:
            raise CommandError(f"{option}: {entry!r} is not LANGUAGE=DIR")
        if language in out:
            raise CommandError(f"{option}: language {language!r} is given twice")
        out[language] = folder
    return out


def routing_options(args: argparse.Namespace, identifier: Any | None) -> dict[str, Any]:
    """The routing keyword arguments of ``transcribe_auto`` / ``evaluate_dataset_auto`` (empty without an
    identifier): ``identifier``, ``top_k``, ``prior_weight`` and, with ``--lid-scoring hybrid``, ``hybrid`` (the
    model folder's calibration and LMs; ``top_k`` the calibration's unless ``--lid-top-k`` is given).

    Raises:
        CommandError: ``--lid-scoring`` without ``--language auto``; hybrid scoring without a calibration that
            fits the identifier's languages (or the LMs it weighs), or with ``--lid-prior-weight`` (one line).
    """
    from ..inference.language_id.hybrid import CalibrationError, HybridScorer

    if identifier is None:
        if args.lid_scoring != "acoustic":
            raise CommandError("--lid-scoring: used with --language auto only")
        return {}
    routing = {"identifier": identifier, "top_k": args.lid_top_k, "prior_weight": args.lid_prior_weight}
    if args.lid_scoring == "hybrid":
        if args.lid_prior_weight != 1.0:
            raise CommandError("--lid-prior-weight: not used with --lid-scoring hybrid (lid_calibration.json holds its "
                               "weights)")
        try:
            scorer = HybridScorer.from_folder(args.model, identifier.languages)
        except (CalibrationError, ValueError, FileNotFoundError) as err:
            raise CommandError(str(err)) from None
        routing.update(hybrid=scorer, top_k=args.lid_top_k if args.lid_top_k != 1 else scorer.calibration.top_k)
    return routing


def fit_calibration_command(args: argparse.Namespace, model: Any, data: Any, processor: Any,
                            identifier: Any | None) -> int:
    """``evaluate --fit-lid-calibration``: fit on ``data`` and write ``lid_calibration.json`` into ``args.model``.

    Raises:
        CommandError: without ``--language auto``, with ``--lid-model`` or ``--lid-top-k`` below 2, a bad
            ``--lid-lms`` (one line).
    """
    from pathlib import Path

    from ..inference.language_id.hybrid import LanguageLMs, install_language_lms
    from ..lid_evaluation import fit_lid_calibration

    if identifier is None or args.lid_model is not None:
        raise CommandError("--fit-lid-calibration: fits the model's own language-ID head; use --language auto "
                           "without --lid-model")
    if args.lid_top_k < 2:
        raise CommandError(f"--fit-lid-calibration: --lid-top-k {args.lid_top_k}; the hybrid score chooses between "
                           "at least 2 candidate languages (e.g. --lid-top-k 3)")
    if not Path(args.model, "config.json").is_file():
        raise CommandError(f"--fit-lid-calibration writes into the model folder; {args.model} is not a local one")
    lm_dirs = parse_language_dirs(args.lid_lms)
    unknown = sorted(set(lm_dirs) - set(identifier.languages))
    if unknown:
        raise CommandError(f"--lid-lms: {', '.join(unknown)} is not a language of the language-ID head "
                           f"({', '.join(identifier.languages)})")
    try:
        install_language_lms(args.model, lm_dirs)
        lms = LanguageLMs.from_folder(args.model, identifier.languages)
    except (ValueError, FileNotFoundError) as err:
        raise CommandError(str(err)) from None
    try:
        calibration = fit_lid_calibration(model, data, processor, identifier, args.lid_top_k, lms, args.batch_size,
                                          text_score=args.lid_text_score or "own")
    except ValueError as err:
        raise CommandError(str(err)) from None
    path = calibration.save(args.model)
    record = calibration.fitted_on
    weights = ", ".join(f"{k} {v:.4g}" for k, v in calibration.weights.items())
    acoustic, hybrid = 100 * record["accuracy_acoustic"], 100 * record["accuracy_hybrid"]
    print(f"language ID\tacoustic {acoustic:.2f}%\thybrid {hybrid:.2f}%\t{record['rows']} utt (truth among the top "
          f"{calibration.top_k}: {record['truth_among_candidates']})")
    print(f"weights\t{weights}\ttext score {calibration.text_score}")
    print(f"wrote {path}")
    return 0
