"""Batched label-synchronous beam search over weighted scorers (the engine of attention and joint search).

A *scorer* gives, for every running hypothesis g and candidate token c, the cumulative log-score of the
extension g + c (``</s>`` included). The search ranks extensions by ``sum_k weight_k * score_k``. This is
ESPnet's ``BatchBeamSearch`` split into:

- *full* scorers (the attention decoder) score the whole vocabulary at once;
- *partial* scorers (CTC prefix scores) score only candidates: the ``pre_beam_size`` best tokens of the
  weighted full scores, or the whole vocabulary when there is no full scorer.

Bookkeeping (as fairseq's ``sequence_generator``): all utterances of the batch advance together, K rows per
utterance; at each step the K best extensions that end in ``</s>`` among the top K are *finished* (their
``score`` is the total divided by ``(tokens + 1) ** length_penalty``), and the K best extensions that do not
end in ``</s>`` continue. An utterance stops when it has K finished hypotheses, when the optional end
detection fires, when no running hypothesis has a finite score, or at its maximum length, where only
``</s>`` is allowed (the max-length guard). Finished utterances leave the batch (their rows are dropped).
With K = 1 this is exactly greedy decoding.

End detection (ESPnet's ``end_detect``): stop once each of the last ``END_DETECT_STEPS`` steps finished a
hypothesis and the best of each is more than ``END_DETECT_MARGIN`` below the best finished overall.
(ESPnet looks at lengths ``i, i-1, i-2`` of ``<s> ... </s>`` sequences, i.e. hypotheses finished two steps
earlier; here the last three steps are used directly.)
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from typing import Any

import torch

from .hypothesis import Hypothesis

END_DETECT_STEPS = 3
END_DETECT_MARGIN = 10.0


class Scorer(ABC):
    """One source of scores for :func:`batch_beam_search`.

    Attributes:
        full (`bool`): True if :meth:`score` scores the whole vocabulary (``candidates`` is None).
    """

    full: bool = True

    @abstractmethod
    def init_state(self) -> Any:
        """The state before the first step: one row per utterance, in batch order."""

    @abstractmethod
    def score(
        self, state: Any, last_tokens: torch.Tensor, candidates: torch.Tensor | None
    ) -> tuple[torch.Tensor, Any]:
        """Cumulative scores of every extension.

        Args:
            state: N rows.
            last_tokens: ``[N]`` the last token of each hypothesis (``sos_id`` at the first step).
            candidates: ``[N, P]`` token ids to score (partial scorers), or None (full scorers).

        Returns:
            ``[N, V]`` (full) or ``[N, P]`` (partial) cumulative log-scores, and whatever :meth:`select`
            needs to build the extended states.
        """

    @abstractmethod
    def select(self, state: Any, pending: Any, rows: torch.Tensor, positions: torch.Tensor,
               tokens: torch.Tensor) -> Any:
        """The state of the chosen extensions.

        Args:
            state: the state :meth:`score` was called with.
            pending: its second return value.
            rows: ``[M]`` row of each chosen extension.
            positions: ``[M]`` column in the array :meth:`score` returned (token ids for full scorers).
            tokens: ``[M]`` the appended token ids.
        """


def end_detected(best_by_step: dict[int, float], best_overall: float, step: int) -> bool:
    """ESPnet's end detection over the best finished raw score of each step (see the module docstring)."""
    recent = [best_by_step.get(step - m) for m in range(END_DETECT_STEPS)]
    return all(s is not None and s - best_overall < -END_DETECT_MARGIN for s in recent)


def batch_beam_search(
    scorers: dict[str, Scorer],
    weights: dict[str, float],
    *,
    batch_size: int,
    vocab_size: int,
    sos_id: int,
    eos_id: int,
    max_lengths: torch.Tensor,
    beam_size: int = 8,
    length_penalty: float = 1.0,
    pre_beam_size: int | None = None,
    end_detection: bool = False,
    nbest: int = 1,
    device: torch.device | str = "cpu",
) -> list[list[Hypothesis]]:
    """Beam search for a batch of utterances.

    Args:
        scorers: name -> scorer (at least one).
        weights: name -> weight (same names).
        batch_size: number of utterances B (the scorers' initial rows).
        vocab_size: V.
        sos_id, eos_id: start / end tokens.
        max_lengths: ``[B]`` most output tokens per utterance (``</s>`` not counted).
        beam_size: K.
        length_penalty: exponent alpha of the normalisation ``total / (tokens + 1) ** alpha``; 0 ranks by the
            raw total.
        pre_beam_size: candidates per hypothesis handed to partial scorers when a full scorer exists;
            None = ``int(1.5 * beam_size)`` (ESPnet's default).
        end_detection: also stop an utterance by ESPnet's end detection.
        nbest: hypotheses returned per utterance.
        device: where the search's own tensors live.

    Returns:
        Per utterance, up to ``nbest`` hypotheses sorted by ``score``, best first.
    """
    if not scorers or set(scorers) != set(weights):
        raise ValueError(f"scorers {sorted(scorers)} and weights {sorted(weights)} must name the same "
                         "scorers")
    if beam_size < 1 or nbest < 1:
        raise ValueError(f"beam_size={beam_size}, nbest={nbest}; allowed values: integers >= 1")
    for name, weight in weights.items():
        if not weight > 0:
            raise ValueError(f"weight of scorer {name!r} is {weight}; allowed values: numbers > 0 (leave a "
                             "scorer out instead of weighting it 0)")
    full_names = [name for name, scorer in scorers.items() if scorer.full]
    partial_names = [name for name, scorer in scorers.items() if not scorer.full]
    pre_beam = min(vocab_size, pre_beam_size or int(1.5 * beam_size)) if full_names else vocab_size
    max_lengths = torch.as_tensor(max_lengths, device=device).long()

    states = {name: scorer.init_state() for name, scorer in scorers.items()}
    active = list(range(batch_size))  # utterance of each group of `width` rows
    width = 1
    tokens = torch.zeros(batch_size, 0, dtype=torch.long, device=device)
    last = torch.full((batch_size,), sos_id, dtype=torch.long, device=device)
    totals = torch.zeros(batch_size, dtype=torch.float64, device=device)
    per_scorer = {name: torch.zeros(batch_size, dtype=torch.float64, device=device) for name in scorers}
    finished: list[list[Hypothesis]] = [[] for _ in range(batch_size)]
    best_by_step: list[dict[int, float]] = [{} for _ in range(batch_size)]

    def hypothesis(token_list: list[int], total: float, scores: dict[str, float]) -> Hypothesis:
        return Hypothesis(token_list, total / (len(token_list) + 1) ** length_penalty, total, scores)

    step = 0
    while active:
        rows_now = tokens.shape[0]
        extension: dict[str, torch.Tensor] = {}
        pending: dict[str, Any] = {}
        weighted = torch.zeros(rows_now, 1, dtype=torch.float64, device=device)
        candidates = None
        for name in full_names:
            extension[name], pending[name] = scorers[name].score(states[name], last, None)
            weighted = weighted + weights[name] * extension[name].to(device, torch.float64)
        if partial_names:
            if full_names:
                candidates = weighted.topk(pre_beam, dim=-1).indices
                weighted = weighted.gather(1, candidates)
            else:
                candidates = torch.arange(vocab_size, device=device).expand(rows_now, vocab_size)
            for name in partial_names:
                extension[name], pending[name] = scorers[name].score(states[name], last, candidates)
                weighted = weighted + weights[name] * extension[name].to(device, torch.float64)
        # a dead hypothesis (score -inf) stays dead: scorers like CTC give absolute, not relative, scores
        weighted = weighted.masked_fill(torch.isneginf(totals)[:, None], float("-inf"))
        columns = weighted.shape[1]
        token_of = candidates if candidates is not None else torch.arange(columns, device=device).expand(
            rows_now, columns)
        groups = len(active)
        flat = weighted.view(groups, width * columns)
        flat_tokens = token_of.reshape(groups, width * columns)
        is_eos = flat_tokens == eos_id
        at_max = max_lengths[active] <= step  # only </s> may follow
        flat = flat.masked_fill(at_max[:, None] & ~is_eos, float("-inf"))
        keep = min(beam_size, width * columns)

        top_values, top_index = flat.topk(keep, dim=-1)
        ends = (is_eos.gather(1, top_index) & torch.isfinite(top_values)).nonzero().tolist()
        for group, rank in ends:
            flat_index = int(top_index[group, rank])
            row, position = group * width + flat_index // columns, flat_index % columns
            utterance = active[group]
            total = float(top_values[group, rank])
            scores = {name: float(extension[name][row, eos_id if scorers[name].full else position])
                      for name in scorers}
            finished[utterance].append(hypothesis(tokens[row].tolist(), total, scores))
            best = best_by_step[utterance]
            best[step] = max(best.get(step, float("-inf")), total)

        go_values, go_index = flat.masked_fill(is_eos, float("-inf")).topk(keep, dim=-1)
        next_groups = []
        for group, utterance in enumerate(active):
            done = (len(finished[utterance]) >= beam_size or bool(at_max[group])
                    or not math.isfinite(float(go_values[group, 0])))
            if not done and end_detection and finished[utterance]:
                overall = max(h.log_prob for h in finished[utterance])
                done = end_detected(best_by_step[utterance], overall, step)
            if done and not finished[utterance]:  # nothing reached </s>: keep the running hypotheses
                for row in range(group * width, (group + 1) * width):
                    scores = {name: float(per_scorer[name][row]) for name in scorers}
                    finished[utterance].append(hypothesis(tokens[row].tolist(), float(totals[row]), scores))
            if not done:
                next_groups.append(group)
        if not next_groups:
            break
        picks = torch.tensor(next_groups, device=device)
        chosen = go_index[picks].reshape(-1)
        group_of = picks.repeat_interleave(keep)
        rows = group_of * width + chosen // columns
        positions = chosen % columns
        new_tokens = flat_tokens[group_of, chosen]
        for name, scorer in scorers.items():
            column = new_tokens if scorer.full else positions
            per_scorer[name] = extension[name][rows, column].to(device, torch.float64)
            states[name] = scorer.select(states[name], pending[name], rows, column, new_tokens)
        totals = go_values[picks].reshape(-1)
        tokens = torch.cat([tokens[rows], new_tokens[:, None]], dim=1)
        last = new_tokens
        active = [active[group] for group in next_groups]
        width = keep
        step += 1

    return [sorted(hyps, key=lambda h: h.score, reverse=True)[:nbest] for hyps in finished]
