"""Decode a prepared dataset with a model and score it: WER / CER overall and per language (a model's batches:
:func:`~adaptspeech.data.collator.model_collator`)."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import torch
from datasets import Dataset
from tqdm.auto import tqdm

from .data.array_rows import column_list, take_rows, with_array_rows
from .data.collator import model_collator
from .decoding import evaluating, model_decoding_inputs, transcribe_batch
from .metrics import compute_error_rates


@torch.no_grad()
def transcribe_dataset(
    model: Any,
    dataset: Dataset,
    processor: Any,
    method: str = "ctc_greedy",
    batch_size: int = 16,
    progress: bool = True,
    lm_decoder: Any = None,
    **options: Any,
) -> list[str]:
    """Decoded text for every row of a prepared dataset (in order), with any decoding method, or with an n-gram LM
    (``lm_decoder``: an :class:`~adaptspeech.lm.decoder.LMDecoder` reading the CTC log-probabilities)."""
    model.eval()
    collator = model_collator(model, processor)
    tokenizer = processor.tokenizer
    # decode in length order (less padding), then restore the dataset order
    lengths = column_list(dataset, "input_length") if "input_length" in dataset.column_names else [0] * len(dataset)
    rows = with_array_rows(dataset)
    order = sorted(range(len(dataset)), key=lambda i: lengths[i])
    decoded: dict[int, str] = {}
    bar = tqdm(total=len(order), desc=f"decoding ({method})", disable=not progress, leave=False)
    for start in range(0, len(order), batch_size):
        indices = order[start : start + batch_size]
        batch = collator(take_rows(rows, indices))
        batch.pop("labels", None)
        batch = {k: v.to(model.device) for k, v in batch.items()}
        if lm_decoder is not None:
            for i, text in zip(indices, _lm_texts(model, batch, lm_decoder, options), strict=True):
                decoded[i] = text
        else:
            ids = transcribe_batch(model, batch, method, **options)
            for i, row in zip(indices, ids, strict=True):
                decoded[i] = tokenizer.decode(row, group_tokens=False, skip_special_tokens=True)
        bar.update(len(indices))
    bar.close()
    return [decoded[i] for i in range(len(dataset))]


def _lm_texts(model: Any, batch: dict[str, torch.Tensor], lm_decoder: Any, options: dict[str, Any]) -> list[str]:
    """The LM decoder's text for every utterance of a collated batch (its real CTC frames only)."""
    with evaluating(model):
        encoded = model_decoding_inputs(model, batch[model.main_input_name], batch.get("attention_mask"),
                                        batch.get("lang_ids"))
    return [lm_decoder.decode(row[:length], **options)[0]
            for row, length in zip(encoded.ctc_log_probs, encoded.ctc_lengths.tolist(), strict=True)]


def evaluate_dataset(
    model: Any,
    dataset: Dataset,
    processor: Any,
    method: str = "ctc_greedy",
    batch_size: int = 16,
    progress: bool = True,
    examples: int = 3,
    return_hypotheses: bool = False,
    lm_decoder: Any = None,
    **options: Any,
) -> dict[str, Any]:
    """WER / CER overall and per language (corpus-level rates) of ``model`` on ``dataset``.

    The references are the dataset's normalised ``text`` column (what the model was trained to output). With
    ``return_hypotheses=True`` the result also holds every decoded text under ``"hypotheses"`` (dataset order),
    e.g. for :func:`~adaptspeech.metrics.significance.paired_bootstrap`.
    """
    start = time.perf_counter()
    hypotheses = transcribe_dataset(model, dataset, processor, method, batch_size, progress, lm_decoder, **options)
    references = list(dataset["text"])
    languages: Sequence[str] | None = list(dataset["language"]) if "language" in dataset.column_names else None
    result = compute_error_rates(hypotheses, references, languages=languages)
    result["method"] = "ctc_lm" if lm_decoder is not None else method
    result["decode_seconds"] = time.perf_counter() - start
    if return_hypotheses:
        result["hypotheses"] = hypotheses
    result["examples"] = [
        {"reference": r, "hypothesis": h, **({"language": languages[i]} if languages else {})}
        for i, (r, h) in enumerate(zip(references[:examples], hypotheses[:examples], strict=True))
    ]
    return result
