"""Model-card metadata with huggingface_hub's own classes (``ModelCardData``, ``EvalResult``): the adapter folders of
``adaptspeech push`` (:mod:`adaptspeech.hub`) and the ONNX folders of ``adaptspeech export``
(:mod:`adaptspeech.export.card`) write their ``README.md`` front matter here, so the Hub reads ``language``,
``base_model``, ``pipeline_tag``, the tags and a ``model-index`` with the WER / CER (and search finds a model by
language)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from huggingface_hub import EvalResult, ModelCardData

METRIC_NAMES = {"wer": "WER", "cer": "CER"}
_FLAT_METRIC = re.compile(r"^(?P<split>\w+?)_(?P<metric>wer|cer)$")


def eval_results(metrics: list[dict[str, Any]]) -> list[Any]:
    """``EvalResult`` objects from ``[{"metric": "wer"|"cer", "value": percent, "dataset": name, "split": split,
    "dataset_type": Hub id (default: the name), "config": subset (optional)}, ...]``.

    Raises:
        ValueError: a metric other than wer / cer, or a missing value or dataset (naming the entry).
    """
    results = []
    for number, entry in enumerate(metrics, 1):
        metric = str(entry.get("metric", "")).lower()
        if metric not in METRIC_NAMES:
            raise ValueError(f"metric {number} ({entry}): metric must be one of {', '.join(METRIC_NAMES)}")
        if "value" not in entry or "dataset" not in entry:
            raise ValueError(f"metric {number} ({entry}): needs a value and a dataset")
        results.append(EvalResult(
            task_type="automatic-speech-recognition", task_name="Speech Recognition",
            dataset_type=str(entry.get("dataset_type", entry["dataset"])), dataset_name=str(entry["dataset"]),
            dataset_split=entry.get("split"), dataset_config=entry.get("config"),
            metric_type=metric, metric_name=f"{METRIC_NAMES[metric]} (%)", metric_value=float(entry["value"]),
        ))
    return results


def metrics_from_rates(rates: Mapping[str, Any] | None, dataset: str) -> list[dict[str, Any]]:
    """``{"test_cer": 0.0612, "test_wer": 0.21, ...}`` (fractions, ``adaptspeech push --metrics``) -> the entries of
    :func:`eval_results` in percent; keys that are not ``SPLIT_wer`` / ``SPLIT_cer`` are left out."""
    entries = []
    for key, value in (rates or {}).items():
        match = _FLAT_METRIC.match(key)
        if match and isinstance(value, (int, float)) and not isinstance(value, bool):
            entries.append({"metric": match["metric"], "value": round(100 * float(value), 2), "dataset": dataset,
                            "split": match["split"]})
    return entries


def card_data(name: str, languages: list[str], tags: list[str], base_model: str | None, revision: str | None,
              metrics: list[dict[str, Any]], library_name: str) -> Any:
    """The ``ModelCardData`` of an adaptspeech card (speech recognition, Apache-2.0)."""
    return ModelCardData(
        model_name=name, language=languages or None, library_name=library_name,
        pipeline_tag="automatic-speech-recognition", tags=tags, base_model=base_model,
        base_model_revision=revision if base_model else None, license="apache-2.0",
        eval_results=eval_results(metrics) or None,
    )
