"""CTC prefix beam search with shallow fusion of a word n-gram LM, frame by frame, so a stream can continue it chunk by
chunk (plain Python floats, no torch).

Every prefix ``y`` keeps its CTC log-probabilities ending in a blank and in its last label (``p_b``, ``p_nb``: all
alignments summed, as in :mod:`adaptspeech.decoding.ctc_prefix_beam`) and is ranked by

    ``log p_ctc(y | x) + fusion(y)``,  ``fusion(y) = sum over the complete words w_i of y of
    (alpha ln p_LM(w_i | w_<i) + beta) + unk(partial word of y)``

with pyctcdecode's conventions, so ``alpha`` / ``beta`` mean what they mean to the offline decoder
(:mod:`adaptspeech.lm.decoder`): KenLM's log10 scores changed to natural logs, pyctcdecode's unknown-word offset on
words outside the LM's vocabulary, and its partial-word term ``unk`` (the offset, unscaled by alpha, when the letters
since the last word delimiter begin no word of the vocabulary, growing with the length past 6 letters; 0 while they
do). A word is scored when the delimiter after it is added (KenLM's state after it kept for the prefix), the last,
partial word at the end of the utterance (:func:`finish_beams`), with the end-of-sentence probability. The fusion
term is a function of the prefix alone, so prefixes that merge keep one term and the CTC sums are unchanged.

The search keeps what the plain one keeps: each beam prefix extended by every candidate label of the frame (the frame's
``token_min_logp`` / ``token_prune`` candidates, as without the LM), all the prefixes ranked and the best ``beam_size``
within ``beam_prune_logp`` of the best kept (the reference in the tests). As without the LM, the beam's own prefixes
are updated first and new prefixes are tried best first, skipped once a bound of their rank cannot beat the
``beam_size``-th best so far; the bound is the parent's rank plus the label's log-probability plus what the fusion term
can gain: nothing for a letter (the partial-word term only falls), at most ``beta`` less the partial-word term for the
word delimiter (alpha >= 0: a word's LM log-probability is at most 0). The fusion states live in a dictionary
``key -> (fusion term, complete-word score, KenLM state, partial word)`` trimmed to the beam after every frame, so the
state after frame ``t`` (beam + dictionary) is all frame ``t + 1`` needs: fed in any pieces, the search gives the same
beams as on all the frames at once.
"""

from __future__ import annotations

import heapq
import math
from typing import Any, Protocol

from .prefix_beam import NEG_INF, FrameCandidates, log_add

# A fused beam entry: (rank, log p_ctc, p_b, p_nb, last label or -1, prefix key); rank = log p_ctc + fusion(key).
FusedBeam = tuple[float, float, float, float, int, str]
# The fusion state of a prefix: (fusion term, score of its complete words, LM state after them, its partial word).
PrefixLM = tuple[float, float, Any, str]


class WordScorer(Protocol):
    """The word LM as the fused search uses it (:class:`adaptspeech.lm.shallow_fusion.NGramFusion` over KenLM)."""

    labels: list[str]  # the text of every label id: "" for the blank, " " for the word delimiter

    def start_state(self) -> Any:
        """The LM state at the start of an utterance."""

    def word(self, state: Any, word: str, last: bool) -> tuple[float, Any]:
        """``(alpha ln p(word | state) + beta [+ offsets], state after it)``; ``last`` adds the end of sentence."""

    def partial(self, part: str) -> float:
        """The term of a partial word (0 while it begins a word of the vocabulary)."""

    def end(self, state: Any) -> float:
        """``alpha ln p(</s> | state)``: the end of an utterance whose text ends with a word delimiter."""

    def max_word_gain(self) -> float | None:
        """An upper bound of :meth:`word` (beta when alpha >= 0 and the offsets are <= 0; None: no bound)."""


class FusedSearch:
    """The state of one utterance's fused search: the beam and the fusion state of its prefixes.

    Args:
        scorer: the word LM (:class:`WordScorer`).
        beam_size: prefixes kept after each frame.
        beam_prune_logp: prefixes ranked more than ``-beam_prune_logp`` below the best are dropped (-inf: none).
    """

    def __init__(self, scorer: WordScorer, beam_size: int, beam_prune_logp: float = NEG_INF) -> None:
        self.scorer, self.beam_size, self.beam_prune_logp = scorer, beam_size, beam_prune_logp
        self.prefix_lm: dict[str, PrefixLM] = {"": (0.0, 0.0, scorer.start_state(), "")}
        self.partial_scores: dict[str, float] = {}
        self.beams: list[FusedBeam] = [(0.0, 0.0, 0.0, NEG_INF, -1, "")]
        self.delimiters = {label for label, text in enumerate(scorer.labels) if text == " "}

    def _fusion(self, key: str) -> float:
        """``fusion(key)`` (see the module docstring); ``key``'s parent must be known (it was in the beam)."""
        known = self.prefix_lm.get(key)
        if known is not None:
            return known[0]
        _, words, state, part = self.prefix_lm[key[:-1]]
        text = self.scorer.labels[ord(key[-1])]
        if text == " ":
            if part:
                score, state = self.scorer.word(state, part, False)
                words, part = words + score, ""
        else:
            part += text
        fusion = words
        if part:
            score = self.partial_scores.get(part)
            if score is None:
                score = self.partial_scores[part] = self.scorer.partial(part)
            fusion += score
        self.prefix_lm[key] = (fusion, words, state, part)
        return fusion

    def advance(self, frames: FrameCandidates) -> list[FusedBeam]:
        """Run the search over ``frames`` (continuing from the beam so far) -> the beam, best first."""
        beams = self.beams
        gain = self.scorer.max_word_gain()
        delimiters = self.delimiters
        heappush, heapreplace = heapq.heappush, heapq.heapreplace
        for blank, labels, probs in zip(frames.blank, frames.labels, frames.log_probs):
            updated = self._update_beam(beams, blank, dict(zip(labels, probs)))
            index = {beam[5] for beam in beams}
            heap = [beam[0] for beam in updated]  # the best beam_size ranks so far (min-heap)
            heapq.heapify(heap)
            while len(heap) > self.beam_size:
                heapq.heappop(heap)
            best = max(heap, default=NEG_INF)
            floor = best + self.beam_prune_logp
            kth = heap[0] if len(heap) >= self.beam_size else NEG_INF
            threshold = kth if kth > floor else floor
            for rank, ctc, p_b, _, last, key in beams if labels else ():
                slack = self._slack(key, gain)
                fusion = rank - ctc
                for label, p in zip(labels, probs):  # most likely first: the bound only falls
                    if rank + p + slack <= threshold:
                        break
                    score = p_b + p if label == last else ctc + p  # a repeat needs a blank in between
                    if score + fusion + (slack if label in delimiters else 0.0) <= threshold:
                        continue  # the bound with the exact CTC score: a letter's fusion term never rises
                    child = key + chr(label)
                    if child in index:  # a beam prefix: already updated
                        continue
                    child_rank = score + self._fusion(child)
                    if child_rank <= threshold:
                        continue
                    updated.append((child_rank, score, NEG_INF, score, label, child))
                    if len(heap) < self.beam_size:
                        heappush(heap, child_rank)
                        kth = heap[0] if len(heap) == self.beam_size else NEG_INF
                    else:
                        heapreplace(heap, child_rank)
                        kth = heap[0]
                    if child_rank > best:
                        best = child_rank
                        floor = best + self.beam_prune_logp
                    threshold = kth if kth > floor else floor
            updated.sort(key=_rank, reverse=True)
            beams = updated[: self.beam_size]
            if floor > NEG_INF:
                beams = [beam for beam in beams if beam[0] >= floor]
            self._trim(beams)
        self.beams = beams
        return beams

    def _update_beam(self, beams: list[FusedBeam], blank: float, label_log_prob: dict[int, float]) -> list[FusedBeam]:
        """The beam's own prefixes after one more frame: blank, the repeated last label, and the extension of their
        parent when it is in the beam (every way a beam prefix gains probability), ranked."""
        parents = {beam[5]: beam for beam in beams}
        updated = []
        for _, ctc, _, p_nb, last, key in beams:
            new_b, new_nb = ctc + blank, NEG_INF
            p = label_log_prob.get(last)
            if p is not None:
                new_nb = p_nb + p
                parent = parents.get(key[:-1]) if key else None
                if parent is not None:
                    new_nb = log_add(new_nb, (parent[2] if parent[4] == last else parent[1]) + p)
            total = log_add(new_b, new_nb)
            if total != NEG_INF:
                updated.append((total + self._fusion(key), total, new_b, new_nb, last, key))
        return updated

    def _slack(self, key: str, gain: float | None) -> float:
        """How much higher than ``key``'s own fusion term a child's can be: a word completed by a delimiter gains at
        most ``gain`` (its beta) and drops the partial-word term; another letter never raises it (the partial-word
        term only falls as a word that begins no vocabulary word grows). ``gain`` None: no bound (inf)."""
        if gain is None:
            return math.inf
        fusion, words, _, part = self.prefix_lm[key]
        return max(0.0, gain - (fusion - words)) if part else 0.0

    def _trim(self, beams: list[FusedBeam]) -> None:
        """Keep the fusion states of the beam's prefixes only (their children are scored from them)."""
        if len(self.prefix_lm) > 4 * max(len(beams), 1):
            self.prefix_lm = {beam[5]: self.prefix_lm[beam[5]] for beam in beams}
        if len(self.partial_scores) > 65536:
            self.partial_scores.clear()

    def finish(self) -> list[FusedBeam]:
        """The beam ranked at the end of the utterance (:func:`finish_beams`); the search itself is unchanged."""
        return finish_beams(self.beams, self.prefix_lm, self.scorer)


def finish_beams(beams: list[FusedBeam], prefix_lm: dict[str, PrefixLM], scorer: WordScorer) -> list[FusedBeam]:
    """Re-rank ``beams`` at the end of an utterance: the partial word is scored as the last word (end of sentence
    included), or, after a final delimiter, the end of sentence alone. Best first (stable on ties)."""
    final = []
    for _, ctc, p_b, p_nb, last, key in beams:
        _, words, state, part = prefix_lm[key]
        words += scorer.word(state, part, True)[0] if part else scorer.end(state)
        final.append((ctc + words, ctc, p_b, p_nb, last, key))
    final.sort(key=_rank, reverse=True)
    return final


def _rank(beam: FusedBeam) -> float:
    return beam[0]
