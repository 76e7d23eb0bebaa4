"""The language-ID options of ``transcribe`` and ``evaluate``: ``--language auto`` with the model's own language-ID
head or a separate ``--lid-model``, the top-k re-ranking (:mod:`adaptspeech.inference.language_routing`)."""

from __future__ import annotations

import argparse
from typing import Any

from .common import CommandError, _non_negative_float, _positive_int

AUTO = "auto"
"""The ``--language`` value that identifies each utterance's language."""


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


def language_identifier(args: argparse.Namespace, model: Any, processor: Any) -> Any | None:
    """The identifier of ``--language auto`` (the ``--lid-model`` folder, else the model's own head), or None for
    another ``--language``; language-ID options without ``--language auto`` are refused.

    Raises:
        CommandError: one line naming the setting that cannot work.
    """
    from ..inference.language_id import (
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
