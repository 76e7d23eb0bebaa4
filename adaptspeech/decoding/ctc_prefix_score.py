"""Incremental CTC prefix scores for label-synchronous (joint CTC/attention) beam search.

Watanabe et al. (2017), "Hybrid CTC/attention architecture for end-to-end speech recognition",
Algorithm 2, as ESPnet's ``CTCPrefixScore``: for a hypothesis g and a candidate label c, h = g + c,

    r_t^n(h) = (r_(t-1)^n(h) + phi_(t-1)) x_t(c)          phi_t = r_t^b(g) + [last(g) != c] r_t^n(g)
    r_t^b(h) = (r_(t-1)^b(h) + r_(t-1)^n(h)) x_t(blank)
    psi(h)   = sum_t phi_(t-1) x_t(c)                      (the prefix probability p(h... | x))
    psi(g + </s>) = r_T^n(g) + r_T^b(g)                    (the full probability p(g | x))

with r_0^b(<s>) = 1 and every other r_0 = 0. ESPnet runs the recursion over t in a Python loop for every
output step. Both recursions are first-order linear in probability space, so here they are solved in
closed form with cumulative sums, vectorised over t, hypotheses and candidates at once:

    r_t^n(h) = A_t + logcumsumexp_(s<=t)(log phi_(s-1) - A_(s-1)),   A_t = sum_(u<=t) log x_u(c)

(and likewise r^b with the blank's cumulative log-probability). Everything runs in float64, and frame
log-probabilities are floored at ``LOG_FLOOR`` so the cumulative sums stay finite; the recursion is
checked against a loop implementation and against brute-force enumeration in the tests.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from .beam_search import Scorer
from .inputs import check_id, check_log_probs

LOG_FLOOR = -1.0e4


@dataclass
class CTCPrefixState:
    """Per hypothesis row: ``r_n``, ``r_b`` ``[N, T+1]`` (log, index t = after t frames), the last label
    ``[N]`` (-1 for the empty prefix) and the utterance of each row ``[N]``."""

    r_n: torch.Tensor
    r_b: torch.Tensor
    last: torch.Tensor
    utterance: torch.Tensor


class CTCPrefixScorer(Scorer):
    """Partial scorer giving ``log psi(g + c)`` for candidate labels c.

    Args:
        log_probs: ``[B, T, V]`` CTC log-probabilities.
        lengths: ``[B]`` real frames; None = all T.
        blank_id: the CTC blank (never a candidate: scored -inf).
        eos_id: the end token (scored with the full-sequence probability).
    """

    full = False

    def __init__(self, log_probs: torch.Tensor, lengths: torch.Tensor | None = None, *, eos_id: int,
                 blank_id: int = 0) -> None:
        lengths = check_log_probs(log_probs, lengths, "ctc_log_probs")
        batch, frames, vocab_size = log_probs.shape
        check_id("blank_id", blank_id, vocab_size)
        check_id("eos_id", eos_id, vocab_size)
        if blank_id == eos_id:
            raise ValueError(f"blank_id and eos_id are both {blank_id}; the CTC blank cannot end a sentence")
        x = log_probs.detach().to(torch.float64).clamp_min(LOG_FLOOR)  # [B, T, V]
        self.x_by_label = x.transpose(1, 2).contiguous()  # [B, V, T]: rows x_t(c) gather fast
        self.lengths = lengths.to(x.device)
        self.blank_id = blank_id
        self.eos_id = eos_id
        self.blank_cumulative = torch.cat([x.new_zeros(batch, 1), x[:, :, blank_id].cumsum(dim=1)], dim=1)
        self.real = torch.arange(1, frames + 1, device=x.device)[None, :] <= self.lengths[:, None]  # [B, T]

    def init_state(self) -> CTCPrefixState:
        """The empty prefix ``<s>`` of every utterance: r^b = prod of blanks, r^n = 0."""
        batch = self.blank_cumulative.shape[0]
        device = self.blank_cumulative.device
        return CTCPrefixState(
            r_n=torch.full_like(self.blank_cumulative, float("-inf")),
            r_b=self.blank_cumulative.clone(),
            last=torch.full((batch,), -1, dtype=torch.long, device=device),
            utterance=torch.arange(batch, device=device),
        )

    def score(self, state: CTCPrefixState, last_tokens: torch.Tensor, candidates: torch.Tensor | None
              ) -> tuple[torch.Tensor, None]:
        """``log psi(g + c)`` ``[N, P]`` for candidates ``[N, P]``.

        Only psi is needed to rank candidates; the r^n / r^b of g + c are computed in :meth:`select` for the
        few extensions that survive (``P`` times less work than ESPnet, which extends every candidate).
        """
        if candidates is None:
            raise ValueError("CTCPrefixScorer is a partial scorer: it needs candidates")
        frames = self.x_by_label.shape[2]
        utterance = state.utterance
        a = self.x_by_label[utterance[:, None], candidates]  # x_t(c): [N, P, T]
        r_b_g = state.r_b[:, None, :frames]
        phi = torch.where((candidates == state.last[:, None])[..., None], r_b_g,
                          torch.logaddexp(r_b_g, state.r_n[:, None, :frames]))  # phi_(t-1), t = 1..T
        real = self.real[utterance][:, None, :]
        psi = torch.logsumexp((phi + a).masked_fill(~real, float("-inf")), dim=-1)  # [N, P]
        end = self.lengths[utterance][:, None]
        full = torch.logaddexp(state.r_n.gather(1, end), state.r_b.gather(1, end))  # p(g | x): [N, 1]
        psi = torch.where(candidates == self.eos_id, full.expand_as(psi), psi)
        return psi.masked_fill(candidates == self.blank_id, float("-inf")), None

    def select(self, state: CTCPrefixState, pending: None, rows: torch.Tensor, positions: torch.Tensor,
               tokens: torch.Tensor) -> CTCPrefixState:
        """r^n, r^b ``[M, T+1]`` of the chosen extensions g + c (rows of g, tokens c), in closed form."""
        frames = self.x_by_label.shape[2]
        tokens = tokens.to(self.x_by_label.device)
        utterance = state.utterance[rows]
        r_n_g, r_b_g = state.r_n[rows, :frames], state.r_b[rows, :frames]
        phi = torch.where((tokens == state.last[rows])[:, None], r_b_g, torch.logaddexp(r_b_g, r_n_g))
        a = self.x_by_label[utterance, tokens]  # [M, T]
        cumulative = torch.cat([torch.zeros_like(a[:, :1]), a.cumsum(dim=1)], dim=1)  # A: [M, T+1]
        minus_inf = torch.full_like(cumulative[:, :1], float("-inf"))
        r_n = cumulative[:, 1:] + torch.logcumsumexp(phi - cumulative[:, :frames], dim=1)
        r_n = torch.cat([minus_inf, r_n], dim=1)
        not_a_label = (tokens == self.blank_id) | (tokens == self.eos_id)
        r_n = r_n.masked_fill(not_a_label[:, None], float("-inf"))
        blank = self.blank_cumulative[utterance]  # [M, T+1]
        r_b = blank[:, 1:] + torch.logcumsumexp(r_n[:, :frames] - blank[:, :frames], dim=1)
        return CTCPrefixState(r_n, torch.cat([minus_inf, r_b], dim=1), tokens, utterance)
