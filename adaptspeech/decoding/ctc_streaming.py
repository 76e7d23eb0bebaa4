"""CTC decoding carried across chunks: greedy and prefix beam search that take the frame log-probabilities of a stream
piece by piece, give a partial result after every piece, and end with exactly the offline decode of the same
posteriors.

Both searches are frame-synchronous, so their whole state after frame ``t`` is small and suffices for frame ``t + 1``:
the best path's last label (greedy: a repeat across a chunk boundary still merges) and the beam of prefixes with their
blank / non-blank log-probabilities (prefix beam search, :func:`~adaptspeech.runtime.prefix_beam.search_one`
continued from the previous beam). Feeding the frames in any pieces therefore gives the labels (and scores) of
:func:`~adaptspeech.decoding.ctc_greedy_decode` and :func:`~adaptspeech.decoding.ctc_prefix_beam_search` on the
concatenated frames (tested: the same computation, compared exactly).

With a word n-gram LM (``fusion``, :class:`~adaptspeech.lm.shallow_fusion.NGramFusion`) the prefix beam search is the
fused one of :mod:`adaptspeech.runtime.lm_prefix_beam` (shallow fusion, the offline LM decoder's alpha and beta),
carried across chunks the same way; :meth:`StreamingCTCPrefixBeam.finish` ranks its beam at the end of the utterance
(the last, partial word scored as a word, with the end of sentence).
"""

from __future__ import annotations

import torch

from ..runtime.lm_prefix_beam import FusedSearch, WordScorer
from ..runtime.prefix_beam import NEG_INF, Beam, check_search_options, search_one
from .ctc_prefix_beam import frame_candidates
from .hypothesis import Hypothesis
from .inputs import check_id


def _frames(log_probs: torch.Tensor) -> torch.Tensor:
    """``[T, V]`` or ``[1, T, V]`` -> ``[T, V]`` (one stream)."""
    if log_probs.dim() == 3 and log_probs.shape[0] == 1:
        log_probs = log_probs[0]
    if log_probs.dim() != 2:
        raise ValueError(
            f"a stream's log_probs must be [frames, vocab] or [1, frames, vocab]; got shape {tuple(log_probs.shape)}"
        )
    return log_probs


class StreamingCTCGreedy:
    """Best-path decoding of one stream, chunk by chunk.

    Args:
        blank_id: the CTC blank.

    Example:
        ```python
        >>> import torch
        >>> from adaptspeech.decoding.ctc_streaming import StreamingCTCGreedy
        >>> search = StreamingCTCGreedy(blank_id=0)
        >>> search.accept(torch.tensor([[0.0, 5.0, 0.0], [0.0, 5.0, 0.0]]))  # label 1 twice
        [1]
        >>> search.accept(torch.tensor([[0.0, 5.0, 0.0], [5.0, 0.0, 0.0], [0.0, 5.0, 0.0]]))  # repeat, blank, 1 again
        [1, 1]

        ```
    """

    def __init__(self, blank_id: int = 0) -> None:
        self.blank_id = blank_id
        self.tokens: list[int] = []
        self.last = -1  # the previous frame's best label (-1: no frame yet)
        self.frames = 0

    def accept(self, log_probs: torch.Tensor) -> list[int]:
        """The next frames ``[T, V]`` (log-probabilities or logits) -> the labels so far."""
        log_probs = _frames(log_probs)
        check_id("blank_id", self.blank_id, log_probs.shape[-1])
        for label in log_probs.argmax(dim=-1).tolist():
            if label != self.blank_id and label != self.last:
                self.tokens.append(label)
            self.last = label
        self.frames += log_probs.shape[0]
        return list(self.tokens)

    def partial(self) -> list[int]:
        """The labels so far."""
        return list(self.tokens)


class StreamingCTCPrefixBeam:
    """CTC prefix beam search of one stream, chunk by chunk (settings as
    :func:`~adaptspeech.decoding.ctc_prefix_beam_search`), optionally fused with a word n-gram LM.

    Args:
        vocab_size: labels per frame (checked against every piece).
        beam_size, blank_id, token_prune, token_min_logp, beam_prune_logp: as in the offline search (with an LM,
            ``beam_prune_logp`` compares the fused ranks, as pyctcdecode does).
        fusion: a word LM (:class:`~adaptspeech.lm.shallow_fusion.NGramFusion`) for shallow fusion, or None.
    """

    def __init__(
        self,
        vocab_size: int,
        beam_size: int = 8,
        blank_id: int = 0,
        token_prune: int | None = None,
        token_min_logp: float = NEG_INF,
        beam_prune_logp: float = NEG_INF,
        fusion: WordScorer | None = None,
    ) -> None:
        check_id("blank_id", blank_id, vocab_size)
        self.prune = check_search_options(vocab_size, beam_size, 1, token_prune, token_min_logp, beam_prune_logp)
        if fusion is not None and len(fusion.labels) != vocab_size:
            raise ValueError(f"the LM's alphabet has {len(fusion.labels)} labels; this search has {vocab_size}")
        self.vocab_size, self.beam_size, self.blank_id = vocab_size, beam_size, blank_id
        self.token_min_logp, self.beam_prune_logp = token_min_logp, beam_prune_logp
        self.fusion = fusion
        self.beams: list[Beam] | None = None
        self.fused = None if fusion is None else FusedSearch(fusion, beam_size, beam_prune_logp)
        self.frames = 0

    def accept(self, log_probs: torch.Tensor) -> Hypothesis:
        """The next frames ``[T, V]`` of log-probabilities (log-softmax output) -> the best hypothesis so far."""
        log_probs = _frames(log_probs)
        if log_probs.shape[-1] != self.vocab_size:
            raise ValueError(f"log_probs has {log_probs.shape[-1]} labels per frame; this search has {self.vocab_size}")
        if log_probs.shape[0]:
            rows = log_probs.detach().cpu().double()[None]
            candidates = frame_candidates(rows, [rows.shape[1]], self.blank_id, self.prune, self.token_min_logp)[0]
            if self.fused is not None:
                self.fused.advance(candidates)
            else:
                self.beams = search_one(candidates, self.beam_size, self.beam_prune_logp, self.beams)
            self.frames += log_probs.shape[0]
        return self.partial()

    def nbest(self, n: int = 1) -> list[Hypothesis]:
        """Up to ``n`` hypotheses so far, best first (the offline search's ``nbest``). With an LM, ``score`` and
        ``log_prob`` are the fused rank (the partial word not yet scored as a word), ``scores["ctc"]`` the CTC
        log-probability and ``scores["lm"]`` the fusion term."""
        if self.fused is not None:
            return _fused_hypotheses(self.fused.beams[:n])
        beams = self.beams if self.beams is not None else [(0.0, 0.0, NEG_INF, -1, "", None)]
        return [Hypothesis([ord(c) for c in key], s, s, {"ctc": s}) for s, *_, key, _ in beams[:n]]

    def finish(self, n: int = 1) -> list[Hypothesis]:
        """Up to ``n`` hypotheses at the end of the utterance, best first: with an LM the beam re-ranked with the last
        word and the end of sentence scored (the search can still continue: this changes nothing); without, as
        :meth:`nbest`."""
        if self.fused is not None:
            return _fused_hypotheses(self.fused.finish()[:n])
        return self.nbest(n)

    def partial(self) -> Hypothesis:
        """The best hypothesis so far."""
        return self.nbest(1)[0]


def _fused_hypotheses(beams: list) -> list[Hypothesis]:
    return [Hypothesis([ord(c) for c in key], rank, rank, {"ctc": ctc, "lm": rank - ctc})
            for rank, ctc, *_, key in beams]


class Endpointer:
    """Where a stream's utterance ends, from the best path's trailing blanks (WeNet's rule-based endpointing): after at
    least one label, ``silence_frames`` blank frames in a row end the utterance; before any label, ``leading_frames``
    of them are dropped as silence without ending anything.

    Args:
        blank_id: the CTC blank.
        silence_frames: trailing blank frames that end an utterance with text (e.g. 1 s = 25 frames of 40 ms).
        leading_frames: blank frames before any label after which the silence so far is dropped (e.g. 5 s).
    """

    def __init__(self, blank_id: int, silence_frames: int, leading_frames: int) -> None:
        if silence_frames < 1 or leading_frames < 1:
            raise ValueError(f"endpoint silences must be at least one frame, got {silence_frames} and {leading_frames}")
        self.blank_id, self.silence_frames, self.leading_frames = blank_id, silence_frames, leading_frames
        self.trailing = 0  # blank frames since the last label (or the start)

    def update(self, log_probs: torch.Tensor, has_text: bool) -> str | None:
        """The next frames ``[T, V]`` -> ``"end"`` (an utterance with text ended), ``"silence"`` (leading silence to
        drop) or None."""
        labels = _frames(log_probs).argmax(dim=-1)
        speech = (labels != self.blank_id).nonzero()
        if len(speech):
            self.trailing = len(labels) - 1 - int(speech[-1])
            has_text = True
        else:
            self.trailing += len(labels)
        return self.decide(has_text)

    def restart(self) -> None:
        """After an event: the next utterance's silence counts from here."""
        self.trailing = 0

    def decide(self, has_text: bool) -> str | None:
        """The rule on ``self.trailing`` silent frames: ``"end"``, ``"silence"`` or None (see :meth:`update`)."""
        if has_text and self.trailing >= self.silence_frames:
            return "end"
        if not has_text and self.trailing >= self.leading_frames:
            return "silence"
        return None
