"""Grid search of the LM weight ``alpha`` and the word bonus ``beta`` on a dev set: the encoder runs once, every
(alpha, beta) decodes the cached CTC log-probabilities; the pair with the lowest WER (ties: lower CER) wins."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from datasets import Dataset

from ..data.collator import model_collator
from ..decoding import evaluating, model_decoding_inputs
from ..metrics import compute_error_rates


@torch.no_grad()
def dev_log_probs(model: Any, dataset: Dataset, processor: Any, batch_size: int = 16) -> list[torch.Tensor]:
    """CTC log-probabilities ``[T_i, V]`` (real frames) of every row, in dataset order."""
    collator = model_collator(model, processor)
    rows: list[torch.Tensor] = []
    with evaluating(model):
        for start in range(0, len(dataset), batch_size):
            batch = collator([dataset[i] for i in range(start, min(start + batch_size, len(dataset)))])
            batch = {k: v.to(model.device) for k, v in batch.items() if k != "labels"}
            encoded = model_decoding_inputs(model, batch[model.main_input_name], batch.get("attention_mask"),
                                            batch.get("lang_ids"))
            rows.extend(r[:n].cpu() for r, n in zip(encoded.ctc_log_probs, encoded.ctc_lengths.tolist(), strict=True))
    return rows


def grid_search(lm_decoder: Any, log_probs: Sequence[torch.Tensor], references: Sequence[str],
                alphas: Sequence[float], betas: Sequence[float]) -> list[dict[str, float]]:
    """``[{"alpha", "beta", "wer", "cer"}, ...]`` for every pair, best first."""
    results = []
    for alpha in alphas:
        for beta in betas:
            lm_decoder.set_weights(alpha, beta)
            hypotheses = [lm_decoder.decode(row)[0] for row in log_probs]
            rates = compute_error_rates(hypotheses, list(references))["overall"]
            results.append({"alpha": float(alpha), "beta": float(beta), "wer": rates["wer"], "cer": rates["cer"]})
    return sorted(results, key=lambda r: (r["wer"], r["cer"]))
