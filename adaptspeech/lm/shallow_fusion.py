"""The word n-gram LM of the offline decoder, as the fused CTC prefix beam search scores with it
(:mod:`adaptspeech.runtime.lm_prefix_beam`): the same KenLM file, unigram list, tuned ``alpha`` / ``beta`` and
unknown-word offsets as ``transcribe --lm`` (:func:`~adaptspeech.lm.decoder.build_decoder`), through pyctcdecode's
``LanguageModel`` so both decoders score a word alike.
"""

from __future__ import annotations

import os
from typing import Any

from .decoder import build_decoder, ctc_labels

#: ln(10): KenLM's log10 scores to natural logs (pyctcdecode's ``LOG_BASE_CHANGE_FACTOR``)
LN_10 = 2.302585092994046


class NGramFusion:
    """A word LM for shallow fusion (:class:`~adaptspeech.runtime.lm_prefix_beam.WordScorer`).

    Args:
        language_model: a pyctcdecode ``LanguageModel`` (with its alpha, beta and offsets).
        labels: the text of every label id (:func:`~adaptspeech.lm.decoder.ctc_labels`): ``""`` blank, ``" "``
            word delimiter.
    """

    def __init__(self, language_model: Any, labels: list[str]) -> None:
        self.language_model, self.labels = language_model, labels

    @classmethod
    def from_lm_dir(cls, tokenizer: Any, lm_dir: str | os.PathLike, alpha: float | None = None,
                    beta: float | None = None) -> NGramFusion:
        """The LM at ``lm_dir`` (any folder ``transcribe --lm`` takes: an ``lm build`` folder, a model folder with the
        LM of ``lm tune --save``, or its ``language_model/``); ``alpha`` / ``beta`` left out: the tuned ones saved with
        it, else the offline decoder's defaults."""
        decoder = build_decoder(tokenizer, lm_dir, alpha=alpha, beta=beta)
        return cls(decoder._language_model, ctc_labels(tokenizer))

    @property
    def alpha(self) -> float:
        """The LM weight."""
        return float(self.language_model.alpha)

    @property
    def beta(self) -> float:
        """The word insertion bonus."""
        return float(self.language_model.beta)

    def start_state(self) -> Any:
        """KenLM's state at the start of a sentence (``<s>``, as pyctcdecode scores)."""
        return self.language_model.get_start_state()

    def word(self, state: Any, word: str, last: bool) -> tuple[float, Any]:
        """``(alpha ln p(word | state) + beta, with the unknown-word offset and, when last, the end of sentence;
        the state after word)``: pyctcdecode's ``LanguageModel.score``."""
        return self.language_model.score(state, word, is_last_word=last)

    def partial(self, part: str) -> float:
        """pyctcdecode's partial-word term (0 while ``part`` begins a word of the unigram list)."""
        return float(self.language_model.score_partial_token(part))

    def max_word_gain(self) -> float | None:
        """An upper bound of :meth:`word`: beta when alpha >= 0 and the unknown-word offset <= 0 (a word's log
        probability is at most 0), else None (no bound)."""
        model = self.language_model
        return self.beta if self.alpha >= 0 and model.unk_score_offset <= 0 else None

    def end(self, state: Any) -> float:
        """``alpha ln p(</s> | state)`` (0 when the LM does not score sentence boundaries)."""
        import kenlm

        model = self.language_model
        if not model.score_boundary:
            return 0.0
        return model.alpha * model._kenlm_model.BaseScore(state, "</s>", kenlm.State()) * LN_10
