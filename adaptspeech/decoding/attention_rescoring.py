"""Attention rescoring of a CTC n-best (WeNet U2's "attention rescoring", Zhang et al. 2020): at the end of an
utterance every hypothesis ``y`` of the CTC prefix beam search is scored by the attention (LAS) decoder teacher-forced
on the whole encoder output,

    ``log P_att(y | x) = sum_i log P(y_i | y_<i, x) + log P(</s> | y, x)``,

and the n-best is re-ranked by ``ctc_weight * log p_ctc(y | x) + (1 - ctc_weight) * log P_att(y | x)`` (plus the
n-gram LM's fusion term when the search had one: ``scores["lm"]``, unchanged). The decoder runs once over all the
hypotheses as a batch (padded to the longest), step by step through :meth:`~adaptspeech.heads.las.LASDecoder.step`.
"""

from __future__ import annotations

import torch

from ..heads.las import LASDecoder
from .hypothesis import Hypothesis


@torch.no_grad()
def attention_log_probs(decoder: LASDecoder, encoder_hidden_states: torch.Tensor,
                        hypotheses: list[list[int]]) -> torch.Tensor:
    """``log P_att(y | x)`` of every label sequence, ``</s>`` included, the decoder teacher-forced on ``<s> + y``.

    Args:
        decoder: the LAS head (``eval()`` mode).
        encoder_hidden_states: ``[1, T, D]`` or ``[T, D]`` the encoder's output for the whole utterance.
        hypotheses: N label sequences (without ``<s>`` / ``</s>``; may be empty).

    Returns:
        ``[N]`` float log-probabilities.
    """
    hidden = encoder_hidden_states if encoder_hidden_states.dim() == 3 else encoder_hidden_states[None]
    if hidden.shape[0] != 1:
        raise ValueError(f"encoder_hidden_states must be one utterance [1, T, D]; got shape {tuple(hidden.shape)}")
    count = len(hypotheses)
    if not count:
        return torch.zeros(0)
    config = decoder.config
    steps = max(len(tokens) for tokens in hypotheses) + 1
    inputs = torch.full((count, steps), config.pad_id, dtype=torch.long)
    targets = torch.full((count, steps), -1, dtype=torch.long)
    for row, tokens in enumerate(hypotheses):
        inputs[row, : len(tokens) + 1] = torch.tensor([config.sos_id, *tokens], dtype=torch.long)
        targets[row, : len(tokens) + 1] = torch.tensor([*tokens, config.eos_id], dtype=torch.long)
    device = hidden.device
    inputs, targets = inputs.to(device), targets.to(device)
    state = decoder.init_state(hidden)
    state = decoder.select_state(state, torch.zeros(count, dtype=torch.long, device=device))
    total = torch.zeros(count, dtype=torch.float64, device=device)
    for step in range(steps):
        log_probs, state = decoder.step(inputs[:, step], state)
        real = targets[:, step] >= 0
        picked = log_probs.gather(1, targets[:, step].clamp(min=0)[:, None])[:, 0].double()
        total += torch.where(real, picked, torch.zeros_like(picked))
    return total.float().cpu()


def attention_rescore(decoder: LASDecoder, encoder_hidden_states: torch.Tensor, nbest: list[Hypothesis],
                      ctc_weight: float = 0.5) -> list[Hypothesis]:
    """``nbest`` re-ranked by ``ctc_weight * scores["ctc"] + (1 - ctc_weight) * log P_att + scores.get("lm", 0)``,
    best first (stable on ties); each hypothesis gets ``scores["attention"]`` and that score as ``score`` and
    ``log_prob``.

    Args:
        decoder: the LAS head (``eval()`` mode).
        encoder_hidden_states: ``[1, T, D]`` the encoder's output for the whole utterance.
        nbest: the CTC search's hypotheses (``scores["ctc"]``: ``log p_ctc(y | x)``).
        ctc_weight: in [0, 1].
    """
    if not 0.0 <= ctc_weight <= 1.0:
        raise ValueError(f"ctc_weight={ctc_weight}; allowed values: numbers in [0, 1]")
    attention = attention_log_probs(decoder, encoder_hidden_states, [h.tokens for h in nbest]).tolist()
    rescored = []
    for hypothesis, att in zip(nbest, attention, strict=True):
        scores = {**hypothesis.scores, "attention": att}
        total = ctc_weight * scores["ctc"] + (1.0 - ctc_weight) * att + scores.get("lm", 0.0)
        rescored.append(Hypothesis(list(hypothesis.tokens), total, total, scores))
    return sorted(rescored, key=lambda h: h.score, reverse=True)
