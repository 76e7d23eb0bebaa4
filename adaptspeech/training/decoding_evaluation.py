"""WER / CER during training, by the engine of ``adaptspeech evaluate``.

:class:`DecodingEvaluation` decodes the evaluation split with :func:`adaptspeech.evaluation.evaluate_dataset` (the
same collator, decoder, text decoding with special tokens skipped, and references from the dataset's ``text``
column), so the ``eval_cer`` the Trainer logs is exactly the figure ``adaptspeech evaluate`` gives for the same
weights, split and decoder, for every head (``ctc``, ``las``, ``ctc_las``). There is no second decoding path: the
Trainer's ``compute_metrics`` / ``preprocess_logits_for_metrics`` are not used for it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..evaluation import evaluate_dataset
from ..heads import HEADS


def default_method(model: Any) -> str:
    """The decoder of ``adaptspeech evaluate`` without ``--method``: the head's default
    (``HEADS.get(head).default_decoder``)."""
    return HEADS.get(model.config.head).default_decoder


@dataclass
class DecodingEvaluation:
    """The evaluation settings of a stage (its ``evaluation`` section) and the processor to decode with.

    Args:
        processor: the stage's ``Wav2Vec2Processor``.
        method: the decoder (``None``: :func:`default_method` of the model).
        batch_size: utterances per decoding batch.
        options: decoder options (``beam_size``, ``ctc_weight`` ...).
    """

    processor: Any
    method: str | None = None
    batch_size: int = 16
    options: dict[str, Any] = field(default_factory=dict)

    def result(self, model: Any, dataset: Any) -> dict[str, Any]:
        """:func:`~adaptspeech.evaluation.evaluate_dataset` of ``model`` on ``dataset`` with these settings."""
        was_training = model.training
        try:
            return evaluate_dataset(
                model,
                dataset,
                self.processor,
                method=self.method or default_method(model),
                batch_size=self.batch_size,
                progress=False,
                **self.options,
            )
        finally:
            model.train(was_training)

    def __call__(self, model: Any, dataset: Any) -> dict[str, float]:
        """``{"wer", "cer", "wer_<lang>", "cer_<lang>", ...}`` of ``model`` on ``dataset`` (the Trainer prefixes
        ``eval_``)."""
        return flat_metrics(self.result(model, dataset))


def flat_metrics(result: dict[str, Any]) -> dict[str, float]:
    """The rates of an :func:`~adaptspeech.evaluation.evaluate_dataset` result as flat Trainer metrics."""
    metrics = {"wer": float(result["overall"]["wer"]), "cer": float(result["overall"]["cer"])}
    for language, entry in result.get("per_language", {}).items():
        if language:
            metrics[f"wer_{language}"] = float(entry["wer"])
            metrics[f"cer_{language}"] = float(entry["cer"])
    return metrics
