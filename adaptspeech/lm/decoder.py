"""CTC beam search with an n-gram LM: pyctcdecode's ``BeamSearchDecoderCTC`` over KenLM, built from a model's
tokenizer (saving it beside the model: :func:`~adaptspeech.lm.processor.save_processor_with_lm`).

Scores: ``log p_ctc + alpha log10-based LM score (pyctcdecode's scaling) + beta x words``; at ``alpha = beta = 0``
the LM changes nothing and the search is pyctcdecode's beam search over the CTC output alone. The alphabet is the
tokenizer's vocabulary in id order: the pad token is the CTC blank, ``|`` is a space, ``[UNK]`` is pyctcdecode's
unknown token, and the other special tokens keep their spelling (a trained CTC head never emits them).
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from .build import UNIGRAMS_NAME
from .files import locate_lm

if TYPE_CHECKING:  # torch is imported where a tensor is handled: the torch-free runtime decodes with this module
    import torch

_SPECIAL = re.compile(r"^(<[^>]*>|\[[^\]]*\]|⁇)$")
DEFAULT_ALPHA = 0.5
DEFAULT_BETA = 1.0
DEFAULT_BEAM_WIDTH = 32


UNK_SCORE_OFFSET = -10.0


def unk_offset(alpha: float) -> float:
    """pyctcdecode's log-score offset for out-of-vocabulary words: its -10 with an LM weight, 0 at ``alpha == 0``.
    pyctcdecode adds the offset to partial words without scaling it by alpha, so with -10 at alpha = beta = 0 the LM
    would still reorder beams; with 0 the search is exactly the one without an LM."""
    return UNK_SCORE_OFFSET if alpha != 0 else 0.0


def ctc_labels(tokenizer: Any) -> list[str]:
    """pyctcdecode's labels for a ``Wav2Vec2CTCTokenizer``, index = token id."""
    vocab = tokenizer.get_vocab()
    labels = [""] * len(vocab)
    for token, index in vocab.items():
        labels[index] = token
    blank = tokenizer.pad_token_id
    delimiter = getattr(tokenizer, "word_delimiter_token", "|")
    labels = [" " if token == delimiter else token for token in labels]
    labels[blank] = ""
    if tokenizer.unk_token_id is not None:
        labels[tokenizer.unk_token_id] = "⁇"
    return labels


def build_decoder(tokenizer: Any, lm_dir: str | os.PathLike | None, alpha: float | None = None,
                  beta: float | None = None) -> Any:
    """A ``pyctcdecode.BeamSearchDecoderCTC`` over ``tokenizer``'s labels with the LM at ``lm_dir`` (None: no LM;
    see :func:`locate_lm` for the folders it may be). ``alpha`` / ``beta`` left out: the tuned weights saved with
    the LM (``adaptspeech lm tune --save``), else :data:`DEFAULT_ALPHA` / :data:`DEFAULT_BETA`.

    Raises:
        ImportError: pyctcdecode is not installed (one line saying what to install).
    """
    try:
        from pyctcdecode import build_ctcdecoder
    except ImportError as err:
        raise ImportError(f"an n-gram LM (--lm) needs pyctcdecode and kenlm ({err}); install them as run.sh does") \
            from None

    kenlm_path = unigrams = saved = None
    if lm_dir is not None:
        kenlm_file, saved = locate_lm(lm_dir)
        unigram_file = kenlm_file.parent / UNIGRAMS_NAME
        if unigram_file.is_file():
            unigrams = unigram_file.read_text(encoding="utf-8").split()
        kenlm_path = str(kenlm_file)
    alpha = alpha if alpha is not None else saved["alpha"] if saved else DEFAULT_ALPHA
    beta = beta if beta is not None else saved["beta"] if saved else DEFAULT_BETA
    return build_ctcdecoder(ctc_labels(tokenizer), kenlm_model_path=kenlm_path, unigrams=unigrams, alpha=float(alpha),
                            beta=float(beta), unk_score_offset=unk_offset(alpha))


class LMDecoder:
    """Decode CTC log-probabilities ``[T, V]`` with pyctcdecode (and an LM).

    Args:
        decoder: a ``BeamSearchDecoderCTC`` (see :func:`build_decoder`, or a ``Wav2Vec2ProcessorWithLM``'s).
        beam_width: beams kept per frame.
        hotwords: words to favour (may be outside the LM's vocabulary), with ``hotword_weight``.
        token_min_logp, beam_prune_logp: pyctcdecode's pruning (its defaults -5 and -10).
    """

    def __init__(self, decoder: Any, beam_width: int = DEFAULT_BEAM_WIDTH, hotwords: Sequence[str] | None = None,
                 hotword_weight: float = 10.0, token_min_logp: float = -5.0, beam_prune_logp: float = -10.0) -> None:
        self.decoder = decoder
        self.beam_width = beam_width
        self.hotwords = list(hotwords) if hotwords else None
        self.hotword_weight = hotword_weight
        self.token_min_logp = token_min_logp
        self.beam_prune_logp = beam_prune_logp
        labels = getattr(getattr(decoder, "_alphabet", None), "labels", [])
        self.special_labels = [label for label in labels if _SPECIAL.match(label)]

    @property
    def alpha(self) -> float | None:
        """The LM weight (None without an LM)."""
        model = getattr(self.decoder, "_language_model", None)
        return None if model is None else float(model.alpha)

    @property
    def beta(self) -> float | None:
        """The word insertion bonus (None without an LM)."""
        model = getattr(self.decoder, "_language_model", None)
        return None if model is None else float(model.beta)

    def set_weights(self, alpha: float, beta: float) -> None:
        """Change the LM weight and the word bonus in place (and the out-of-vocabulary offset, see
        :func:`unk_offset`). Integers are taken as floats (pyctcdecode refuses them)."""
        alpha, beta = float(alpha), float(beta)
        self.decoder.reset_params(alpha=alpha, beta=beta, unk_score_offset=unk_offset(alpha))

    def decode(self, log_probs: torch.Tensor | np.ndarray, seconds_per_frame: float = 0.04,
               beam_size: int | None = None) -> tuple[str, list[dict[str, Any]]]:
        """``(text, words)`` with ``words = [{"text", "start", "end"}, ...]`` (seconds) of the best beam.

        Args:
            log_probs: ``[T, V]`` CTC log-probabilities of the real frames.
            seconds_per_frame: the output frame period (``inputs_to_logits_ratio / 16000``).
            beam_size: overrides ``beam_width`` for this call.
        """
        logits = np.asarray(log_probs.detach().float().cpu() if hasattr(log_probs, "detach") else log_probs,
                            dtype=np.float32)
        beams = self.decoder.decode_beams(
            logits, beam_width=beam_size or self.beam_width, beam_prune_logp=self.beam_prune_logp,
            token_min_logp=self.token_min_logp, hotwords=self.hotwords, hotword_weight=self.hotword_weight,
        )
        text, frames = self._clean(beams[0][0]), beams[0][2]
        words = [{"text": self._clean(word), "start": round(start * seconds_per_frame, 6),
                  "end": round(end * seconds_per_frame, 6)} for word, (start, end) in frames]
        return text, [word for word in words if word["text"]]

    def nbest(self, log_probs: torch.Tensor | np.ndarray, beam_size: int | None = None) -> tuple[str, list[Any]]:
        """``(text, N-best)`` of ``[T, V]`` CTC log-probabilities: the best beam's text and the returned beams as a
        :data:`~adaptspeech.decoding.confidence.NBest` list (special tokens and empty words dropped)."""
        array = np.asarray(log_probs.detach().float().cpu() if hasattr(log_probs, "detach") else log_probs,
                           dtype=np.float32)
        beams = self.decoder.decode_beams(
            array, beam_width=beam_size or self.beam_width, beam_prune_logp=self.beam_prune_logp,
            token_min_logp=self.token_min_logp, hotwords=self.hotwords, hotword_weight=self.hotword_weight,
        )
        nbest = [([(self._clean(word), frames) for word, frames in beam[2]], float(beam[4])) for beam in beams]
        return self._clean(beams[0][0]), [([(w, f) for w, f in words if w], score) for words, score in nbest]

    def decode_scored(self, log_probs: torch.Tensor | np.ndarray, beam_size: int | None = None,
                      measure: str | None = None, method: Any = None,
                      best_path_text: str | None = None) -> tuple[str, list[Any]]:
        """``(text, words)`` of the best beam, each word a :class:`~adaptspeech.decoding.confidence.ScoredWord`
        whose confidence is its N-best posterior over the returned beams times the least CTC frame confidence over
        its frames (:mod:`adaptspeech.decoding.confidence`), or, with a learned ``method``, its estimator's
        probability (:mod:`adaptspeech.decoding.confidence_estimator`).

        Args:
            log_probs: ``[T, V]`` CTC log-probabilities of the real frames.
            beam_size: overrides ``beam_width`` for this call.
            measure: the frame confidence measure (default :data:`~adaptspeech.decoding.confidence.DEFAULT_MEASURE`).
            method: a :class:`~adaptspeech.decoding.confidence.ConfidenceMethod` (its measure, alpha and N-best
                temperature, or its estimator) instead of ``measure``.
            best_path_text: the best CTC path's text (a learned method's ``agreement`` feature; required by one).
        """
        import torch

        from ..decoding.confidence import (
            ConfidenceMethod,
            ScoredWord,
            frame_confidence,
            nbest_word_confidences,
        )

        method = method or (ConfidenceMethod(measure) if measure else ConfidenceMethod())
        text, nbest = self.nbest(log_probs, beam_size)
        tensor = torch.as_tensor(np.asarray(log_probs.detach().float().cpu() if isinstance(log_probs, torch.Tensor)
                                            else log_probs, dtype=np.float32))
        if method.estimator is not None:
            from ..decoding.confidence import lm_beam_features
            from ..decoding.confidence_estimator import LM_BEAM
            from ..metrics.confidence import word_correctness

            estimator = method.estimator_model(LM_BEAM)
            if best_path_text is None:
                raise ValueError("the learned confidence of LM beam words needs the best path's text "
                                 "(best_path_text)")
            words = [w for w, _ in nbest[0][0]] if nbest else []
            agreement = word_correctness(" ".join(words), best_path_text)
            features = lm_beam_features(tensor, nbest, agreement, self.word_lm_scores(words))
            confidences = [float(c) for c in estimator.predict(features)]
        else:
            scores = frame_confidence(tensor, method.measure, method.alpha).numpy()
            confidences = nbest_word_confidences(nbest, scores, method.nbest_temperature)
        words = [ScoredWord(word, confidence, start, end)
                 for (word, (start, end)), confidence in zip(nbest[0][0] if nbest else [], confidences, strict=True)]
        return text, words

    def word_lm_scores(self, words: Sequence[str]) -> list[tuple[float, bool]] | None:
        """Per word of a hypothesis, ``(log10 probability given the words before it and the sentence start, out of
        the LM's vocabulary)`` under the decoder's n-gram LM; None without one."""
        kenlm_model = getattr(getattr(self.decoder, "_language_model", None), "_kenlm_model", None)
        if kenlm_model is None:
            return None
        if not words:
            return []
        scores = list(kenlm_model.full_scores(" ".join(words), bos=True, eos=False))
        return [(float(score), bool(oov)) for score, _, oov in scores[: len(words)]]

    def _clean(self, text: str) -> str:
        """Drop the special tokens (``<s>``, ``</s>``, unknown), as the other decoders' text does."""
        for label in self.special_labels:
            text = text.replace(label, "")
        return " ".join(text.split())
