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

The search is the plain one: each beam prefix is extended by every candidate label of the frame (the frame's
``token_min_logp`` / ``token_prune`` candidates, as without the LM); all the prefixes are ranked and the best
``beam_size`` within ``beam_prune_logp`` of the best kept. (The bound that lets the search without the LM skip
extensions does not hold here: a word's ``beta`` can raise a child above its parent.) The fusion states live in a
dictionary ``key -> (complete-word score, KenLM state, partial word)`` trimmed to the beam after every frame, so the
state after frame ``t`` (beam + dictionary) is all frame ``t + 1`` needs: fed in any pieces, the search gives the same
beams as on all the frames at once.
"""

from __future__ import annotations

from typing import Any, Protocol

from .prefix_beam import NEG_INF, FrameCandidates, log_add

# A fused beam entry: (rank, log p_ctc, p_b, p_nb, last label or -1, prefix key); rank = log p_ctc + fusion(key).
FusedBeam = tuple[float, float, float, float, int, str]
# The fusion state of a prefix: (score of its complete words, LM state after them, its partial word).
PrefixLM = tuple[float, Any, str]


class WordScorer(Protocol):
    """The word LM as the fused search uses it (:class:`adaptspeech.lm.fusion.NGramFusion` over KenLM)."""

    labels: list[str]  # the text of every label id: "" for the blank, " " for the word delimiter

    def start_state(self) -> Any:
        """The LM state at the start of an utterance."""

    def word(self, state: Any, word: str, last: bool) -> tuple[float, Any]:
        """``(alpha ln p(word | state) + beta [+ offsets], state after it)``; ``last`` adds the end of sentence."""

    def partial(self, part: str) -> float:
        """The term of a partial word (0 while it begins a word of the vocabulary)."""

    def end(self, state: Any) -> float:
        """``alpha ln p(</s> | state)``: the end of an utterance whose text ends with a word delimiter."""


class FusedSearch:
    """The state of one utterance's fused search: the beam and the fusion state of its prefixes.

    Args:
        scorer: the word LM (:class:`WordScorer`).
        beam_size: prefixes kept after each frame.
        beam_prune_logp: prefixes ranked more than ``-beam_prune_logp`` below the best are dropped (-inf: none).
    """

    def __init__(self, scorer: WordScorer, beam_size: int, beam_prune_logp: float = NEG_INF) -> None:
        self.scorer, self.beam_size, self.beam_prune_logp = scorer, beam_size, beam_prune_logp
        self.prefix_lm: dict[str, PrefixLM] = {"": (0.0, scorer.start_state(), "")}
        self.partial_scores: dict[str, float] = {}
        self.beams: list[FusedBeam] = [(0.0, 0.0, 0.0, NEG_INF, -1, "")]

    def _fusion(self, key: str) -> float:
        """``fusion(key)`` (see the module docstring); ``key``'s parent must be known (it was in the beam)."""
        known = self.prefix_lm.get(key)
        if known is None:
            words, state, part = self.prefix_lm[key[:-1]]
            text = self.scorer.labels[ord(key[-1])]
            if text == " ":
                if part:
                    score, state = self.scorer.word(state, part, False)
                    words, part = words + score, ""
            else:
                part += text
            known = self.prefix_lm[key] = (words, state, part)
        words, _, part = known
        if not part:
            return words
        score = self.partial_scores.get(part)
        if score is None:
            score = self.partial_scores[part] = self.scorer.partial(part)
        return words + score

    def advance(self, frames: FrameCandidates) -> list[FusedBeam]:
        """Run the search over ``frames`` (continuing from the beam so far) -> the beam, best first."""
        beams = self.beams
        for blank, labels, probs in zip(frames.blank, frames.labels, frames.log_probs):
            merged: dict[str, list] = {}  # key -> [p_b, p_nb, last]; the beam's own prefixes first (stable ties)
            for _, ctc, _, _, last, key in beams:
                merged[key] = [ctc + blank, NEG_INF, last]
            for _, ctc, p_b, p_nb, last, key in beams:
                for label, p in zip(labels, probs):
                    if label == last:  # the repeat collapses; a new label needs a blank in between
                        entry = merged[key]
                        entry[1] = log_add(entry[1], p_nb + p)
                        score = p_b + p
                    else:
                        score = ctc + p
                    if score == NEG_INF:
                        continue
                    child = key + chr(label)
                    entry = merged.get(child)
                    if entry is None:
                        merged[child] = [NEG_INF, score, label]
                    else:
                        entry[1] = log_add(entry[1], score)
            ranked = []
            for key, (p_b, p_nb, last) in merged.items():
                ctc = log_add(p_b, p_nb)
                if ctc != NEG_INF:
                    ranked.append((ctc + self._fusion(key), ctc, p_b, p_nb, last, key))
            ranked.sort(key=_rank, reverse=True)
            beams = ranked[: self.beam_size]
            if self.beam_prune_logp > NEG_INF:
                floor = beams[0][0] + self.beam_prune_logp
                beams = [beam for beam in beams if beam[0] >= floor]
            self._trim(beams)
        self.beams = beams
        return beams

    def _trim(self, beams: list[FusedBeam]) -> None:
        """Keep the fusion states of the beam's prefixes only (their children are scored from them)."""
        if len(self.prefix_lm) > 4 * max(len(beams), 1):
            self.prefix_lm = {beam[5]: self.prefix_lm[beam[5]] for beam in beams}
        if len(self.partial_scores) > 4096:
            self.partial_scores.clear()

    def finish(self) -> list[FusedBeam]:
        """The beam ranked at the end of the utterance (:func:`finish_beams`); the search itself is unchanged."""
        return finish_beams(self.beams, self.prefix_lm, self.scorer)


def finish_beams(beams: list[FusedBeam], prefix_lm: dict[str, PrefixLM], scorer: WordScorer) -> list[FusedBeam]:
    """Re-rank ``beams`` at the end of an utterance: the partial word is scored as the last word (end of sentence
    included), or, after a final delimiter, the end of sentence alone. Best first (stable on ties)."""
    final = []
    for _, ctc, p_b, p_nb, last, key in beams:
        words, state, part = prefix_lm[key]
        words += scorer.word(state, part, True)[0] if part else scorer.end(state)
        final.append((ctc + words, ctc, p_b, p_nb, last, key))
    final.sort(key=_rank, reverse=True)
    return final


def _rank(beam: FusedBeam) -> float:
    return beam[0]
