"""WER / CER per language for ``Trainer`` evaluation (greedy CTC decoding of the argmax ids)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch
from transformers import EvalPrediction

from ..metrics import compute_error_rates


def argmax_logits(logits: torch.Tensor | tuple, labels: Any) -> torch.Tensor:
    """``preprocess_logits_for_metrics``: keep only the CTC argmax ids [B, T] (not [B, T, V] logits).

    The model's outputs reach here as ``(logits [B, T, V], frame_lengths [B])``; frames past each utterance's length
    are padding whose argmax is noise, so they are set to -100 (dropped by :func:`collapse_ctc`).
    """
    lengths = None
    if isinstance(logits, tuple):
        logits, lengths = logits[0], (logits[1] if len(logits) > 1 else None)
    ids = logits.argmax(-1)
    if lengths is not None and lengths.dim() == 1:
        padded = torch.arange(ids.shape[1], device=ids.device)[None, :] >= lengths[:, None]
        ids = ids.masked_fill(padded, -100)
    return ids


def collapse_ctc(ids: Sequence[int], blank_id: int) -> list[int]:
    """Merge repeats, drop blanks (and the -100 padding the Trainer adds between batches)."""
    out: list[int] = []
    previous = None
    for i in ids:
        i = int(i)
        if i != previous and i != blank_id and i >= 0:
            out.append(i)
        previous = i
    return out


def build_compute_metrics(
    tokenizer: Any, languages: Sequence[str] | None = None, blank_id: int | None = None
) -> Callable[[EvalPrediction], dict[str, float]]:
    """``compute_metrics`` for a Trainer whose ``label_names`` are ``["labels", "lang_ids"]`` (or just labels).

    Args:
        tokenizer: a ``Wav2Vec2CTCTokenizer`` (decodes ids to text, ``|`` -> space).
        languages: position -> language code, as the model's ``adapter_languages``; None = one overall figure.
        blank_id: the CTC blank (defaults to the tokenizer's pad id).
    """
    blank = tokenizer.pad_token_id if blank_id is None else blank_id

    def compute_metrics(prediction: EvalPrediction) -> dict[str, float]:
        pred_ids = prediction.predictions
        if isinstance(pred_ids, tuple):
            pred_ids = pred_ids[0]
        label_ids = prediction.label_ids
        lang_ids = None
        if isinstance(label_ids, tuple):
            label_ids, lang_ids = label_ids[0], (label_ids[1] if len(label_ids) > 1 else None)
        hypotheses = [tokenizer.decode(collapse_ctc(row, blank), group_tokens=False) for row in pred_ids]
        references = [
            tokenizer.decode([int(i) for i in row if i >= 0], group_tokens=False) for row in np.asarray(label_ids)
        ]
        langs = None
        if lang_ids is not None and languages is not None:
            langs = [languages[int(i)] for i in np.asarray(lang_ids).reshape(-1)]
        rates = compute_error_rates(hypotheses, references, languages=langs)
        metrics = {"wer": rates["overall"]["wer"], "cer": rates["overall"]["cer"]}
        for lang, entry in rates.get("per_language", {}).items():
            metrics[f"wer_{lang}"] = entry["wer"]
            metrics[f"cer_{lang}"] = entry["cer"]
        return metrics

    return compute_metrics
