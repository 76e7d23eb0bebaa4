"""How sure is the model of each word it wrote? Word and utterance confidence from CTC posteriors.

**Frame confidence** (:data:`FRAME_MEASURES`) of frame ``t`` from its posterior ``p_t`` over the ``V`` labels:

- ``max_prob``: ``max_v p_t(v)``;
- ``entropy``: Laptev & Ginsburg (2022), "Fast entropy-based methods of word-level confidence estimation for
  end-to-end ASR": the Tsallis entropy ``H = (1 - sum_v p^a) / (a - 1)`` with ``a = 1/3``, exponentially normalised
  to [0, 1]: ``(exp(-H) - exp(-H_max)) / (1 - exp(-H_max))`` with ``H_max`` the entropy of the uniform posterior
  (1 for a one-hot posterior, 0 for the uniform one).

**Words of the best path** (:func:`best_path_words`): the frames' argmax labels; a run of equal non-blank labels is
one emitted token, the word delimiter ``|`` (and blank frames) separate words. A token's confidence is the mean frame
confidence over its run; a word's is the minimum over its tokens (the least sure character decides: one wrong letter
makes the word wrong), and its frames are those of its first to last token.

**Words of an LM beam search** (:meth:`~adaptspeech.lm.decoder.LMDecoder.decode_scored`): the beams pyctcdecode
returns are an N-best list; each word of the best beam gets its *N-best posterior* (:func:`nbest_word_posteriors`:
the softmax weight of the beams holding the same word over overlapping frames), times the acoustic confidence of its
frames (the minimum frame confidence of the CTC path over them).

**Utterance confidence** (:func:`utterance_confidence`): the mean of its words' confidences (1 - the expected share
of wrong words), the utterance's mean frame confidence when it has no word.

``scripts/confidence_calibration.py`` measures how well the default (``max_prob``, the minimum over tokens) ranks
correct above wrong words (the area under the ROC curve) and its calibration on a dev split; the demo's figures are
in docs/self_training.md.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

TSALLIS_ALPHA = 1.0 / 3.0
"""The Tsallis entropy's order in the ``entropy`` frame measure (Laptev & Ginsburg 2022's best setting)."""


def _max_prob(log_probs: torch.Tensor) -> torch.Tensor:
    return log_probs.max(dim=-1).values.exp()


def _tsallis_confidence(log_probs: torch.Tensor) -> torch.Tensor:
    a = TSALLIS_ALPHA
    vocab = log_probs.shape[-1]
    entropy = (1.0 - (a * log_probs).exp().sum(-1)) / (a - 1.0)
    most = (1.0 - vocab ** (1.0 - a)) / (a - 1.0)  # the uniform posterior's
    floor = math.exp(-most)
    return ((-entropy).exp() - floor) / (1.0 - floor)


FRAME_MEASURES: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "max_prob": _max_prob,
    "entropy": _tsallis_confidence,
}
"""Frame confidence measures: ``[..., V]`` log-probabilities -> ``[...]`` confidence in [0, 1]."""
DEFAULT_MEASURE = "max_prob"


def frame_confidence(log_probs: torch.Tensor, measure: str = DEFAULT_MEASURE) -> torch.Tensor:
    """``[T]`` confidence of each frame of CTC log-probabilities ``[T, V]`` (module docstring).

    Raises:
        ValueError: an unknown ``measure`` (listing the allowed ones).
    """
    if measure not in FRAME_MEASURES:
        raise ValueError(f"confidence measure {measure!r}; allowed values: {', '.join(FRAME_MEASURES)}")
    return FRAME_MEASURES[measure](log_probs.detach().float()).clamp(0.0, 1.0)


@dataclass(frozen=True)
class ScoredWord:
    """A word with its confidence and its output frames ``[start, end)``."""

    text: str
    confidence: float
    start: int
    end: int

    def to_dict(self, seconds_per_frame: float) -> dict[str, Any]:
        """``{"text", "start", "end", "confidence"}`` (seconds), as the timestamps of ``transcribe`` look."""
        return {"text": self.text, "start": round(self.start * seconds_per_frame, 6),
                "end": round(self.end * seconds_per_frame, 6), "confidence": round(self.confidence, 6)}


def _label_texts(tokenizer: Any) -> tuple[dict[int, str], int, int, set[int]]:
    """``({id: token}, blank id, word delimiter id, ids left out of the text)`` of a ``Wav2Vec2CTCTokenizer`` (the
    special tokens ``<s>``, ``</s>``, ``[UNK]``, which greedy decoding's text drops too)."""
    vocab = {index: token for token, index in tokenizer.get_vocab().items()}
    delimiter = tokenizer.convert_tokens_to_ids(tokenizer.word_delimiter_token)
    return vocab, tokenizer.pad_token_id, delimiter, set(tokenizer.all_special_ids) - {delimiter}


def best_path_words(log_probs: torch.Tensor, tokenizer: Any, measure: str = DEFAULT_MEASURE) -> list[ScoredWord]:
    """The words of the best CTC path of ``log_probs`` ``[T, V]`` (real frames only) with their confidences (module
    docstring); their text is what CTC greedy decoding writes."""
    vocab, blank, delimiter, dropped = _label_texts(tokenizer)
    confidence = frame_confidence(log_probs, measure).numpy()
    best = log_probs.argmax(-1).tolist()
    words: list[ScoredWord] = []
    chars: list[str] = []
    scores: list[float] = []
    start = end = 0

    def close() -> None:
        if chars:
            words.append(ScoredWord("".join(chars), float(min(scores)), start, end))
            chars.clear()
            scores.clear()

    t = 0
    while t < len(best):
        label = best[t]
        run_end = t + 1
        while run_end < len(best) and best[run_end] == label:
            run_end += 1
        if label == delimiter:
            close()
        elif label != blank and label not in dropped:
            if not chars:
                start = t
            chars.append(vocab[label])
            scores.append(float(confidence[t:run_end].mean()))
            end = run_end
        t = run_end
    close()
    return words


def utterance_confidence(words: Sequence[ScoredWord], log_probs: torch.Tensor | None = None,
                         measure: str = DEFAULT_MEASURE) -> float:
    """The mean confidence of ``words``; without words, the mean frame confidence of ``log_probs`` ``[T, V]`` (0 when
    neither is given)."""
    if words:
        return float(np.mean([w.confidence for w in words]))
    if log_probs is None or len(log_probs) == 0:
        return 0.0
    return float(frame_confidence(log_probs, measure).mean())


def span_confidence(confidence: np.ndarray, start: int, end: int) -> float:
    """The least frame confidence ``[T]`` over frames ``[start, end)`` (1 for an empty span)."""
    span = confidence[max(start, 0) : max(end, start + 1)]
    return float(span.min()) if len(span) else 1.0


def nbest_word_posteriors(beams: Sequence[tuple[Sequence[tuple[str, tuple[int, int]]], float]],
                          min_overlap: float = 0.5) -> list[float]:
    """The N-best posterior of each word of the first (best) beam.

    Args:
        beams: ``[(words [(text, (start_frame, end_frame)), ...], score), ...]``, best first; ``score`` a log
            score (the beam posterior is the softmax of the scores).
        min_overlap: a beam holds the word when one of its words has the same text and its frames overlap the best
            beam's word by at least this share of the shorter of the two.

    Returns:
        ``[len(beams[0][0])]`` posteriors in [0, 1].
    """
    if not beams:
        return []
    scores = np.array([score for _, score in beams], dtype=np.float64)
    weights = np.exp(scores - scores.max())
    weights /= weights.sum()
    out = []
    for text, (start, end) in beams[0][0]:
        mass = 0.0
        for (words, _), weight in zip(beams, weights, strict=True):
            for other, (a, b) in words:
                shorter = max(min(end - start, b - a), 1)
                if other == text and min(end, b) - max(start, a) >= min_overlap * shorter:
                    mass += weight
                    break
        out.append(float(min(mass, 1.0)))
    return out
