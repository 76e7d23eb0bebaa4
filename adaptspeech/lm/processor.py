"""``AdaptSpeechProcessorWithLM``: transformers' ``Wav2Vec2ProcessorWithLM`` for any adaptspeech feature extractor.

transformers' class accepts only feature extractors named ``Wav2Vec2FeatureExtractor`` (or SeamlessM4T's), which
excludes the fbank :class:`~adaptspeech.feature_extraction.AdaptSpeechFeatureExtractor`. This subclass makes the
same checks on the decoder and the vocabulary and nothing else. Saved, it writes the same files (its name, ending in
``WithLM``, in ``processor_config.json``; ``alphabet.json`` and ``language_model/`` of pyctcdecode), which is what
transformers' pipeline looks for to decode with the LM. Load it with ``AdaptSpeechProcessorWithLM.from_pretrained``,
which refuses a local folder whose LM files are cut short or unreadable, naming the file
(:func:`~adaptspeech.lm.decoder.check_saved_lm`).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from transformers import Wav2Vec2ProcessorWithLM
from transformers.processing_utils import ProcessorMixin


class AdaptSpeechProcessorWithLM(Wav2Vec2ProcessorWithLM):
    """Feature extractor + ``Wav2Vec2CTCTokenizer`` + pyctcdecode decoder (see the module docstring)."""

    def __init__(self, feature_extractor: Any, tokenizer: Any, decoder: Any) -> None:
        from pyctcdecode import BeamSearchDecoderCTC

        ProcessorMixin.__init__(self, feature_extractor, tokenizer)
        if not isinstance(decoder, BeamSearchDecoderCTC):
            raise TypeError(f"decoder must be a pyctcdecode BeamSearchDecoderCTC, got {type(decoder).__name__}")
        missing = self.get_missing_alphabet_tokens(decoder, tokenizer)
        if missing:
            raise ValueError(f"the tokenizer's tokens {sorted(missing)} are missing from the decoder's alphabet")
        self.decoder = decoder

    @classmethod
    def from_pretrained(cls, pretrained_model_name_or_path: str | os.PathLike, **kwargs: Any) -> Any:
        """transformers' loading, after checking the LM files of a local folder (a cut-short ``lm.arpa``,
        ``attrs.json`` or ``alphabet.json`` is a ``ValueError`` naming it, a missing one ``FileNotFoundError``)."""
        from .decoder import check_saved_lm

        if Path(pretrained_model_name_or_path).is_dir():
            check_saved_lm(pretrained_model_name_or_path)
        return super().from_pretrained(pretrained_model_name_or_path, **kwargs)
