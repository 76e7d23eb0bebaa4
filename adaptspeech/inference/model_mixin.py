"""What transformers' pipeline and MMS-style loading ask of every adaptspeech model: the language chosen at load time
(``from_pretrained(folder, target_lang="ro")``) and ``config.inputs_to_logits_ratio`` (input samples per output
frame, which the pipeline's chunking and timestamps read)."""

from __future__ import annotations

import os
from typing import Any

from ..data.feature_types import FeatureType

MODEL_SAMPLING_RATE = 16000
"""The rate of every adaptspeech model's input (the feature extractors refuse other rates)."""


def inputs_to_logits_ratio(model: Any) -> int:
    """Input samples (at 16 kHz) per encoder output frame, as the model's feature type counts them: the backbone's
    convolution strides for waveform models (320 for wav2vec2), the fbank hop times the subsampling for fbank models
    (160 x 4 = 640)."""
    return FeatureType.of_model(model).inputs_to_logits_ratio(model)


class InferenceMixin:
    """Mixed into :class:`~adaptspeech.modeling.AdaptSpeechPreTrainedModel` (before ``PreTrainedModel``)."""

    def post_init(self) -> None:
        super().post_init()
        self.config.inputs_to_logits_ratio = inputs_to_logits_ratio(self)

    @classmethod
    def from_pretrained(
        cls, pretrained_model_name_or_path: str | os.PathLike | None, *model_args: Any, target_lang: str | None = None,
        **kwargs: Any,
    ) -> Any:
        """``PreTrainedModel.from_pretrained``, plus MMS's ``target_lang``: the language whose adapter (and CTC head,
        when it has its own) runs, as :meth:`set_target_language` sets it. ``pipeline(..., model_kwargs={"target_lang":
        "ro"})`` passes it here. ``target_lang="auto"``: the pipeline identifies each utterance's language with the
        model's language-ID head and routes it (:mod:`adaptspeech.inference.language_id.routing`). Returns the model, or
        ``(model, loading_info)`` with ``output_loading_info=True``, as transformers does.

        Raises:
            KeyError: the model has no adapter for ``target_lang`` (naming the languages that have one).
            ValueError: ``target_lang="auto"`` for a model without a language-ID head.
        """
        loaded = super().from_pretrained(pretrained_model_name_or_path, *model_args, **kwargs)
        model = loaded[0] if kwargs.get("output_loading_info") else loaded  # (model, loading_info), as asked
        model.auto_language = target_lang == "auto"
        if model.auto_language and model.lid_head is None:
            raise ValueError(f"target_lang='auto': {pretrained_model_name_or_path} has no language-ID head; train one "
                             "with a stage whose model.trainable.lid is true (docs/lid.md)")
        if target_lang is not None and not model.auto_language:
            model.set_target_language(target_lang)
        return loaded
