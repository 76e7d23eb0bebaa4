"""The HF processor of a model: a ``Wav2Vec2CTCTokenizer`` over a character vocabulary (:mod:`.text`) plus the
feature extractor of the model's feature type (:mod:`.feature_types`)."""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from transformers import Wav2Vec2CTCTokenizer, Wav2Vec2Processor

from .feature_types import DEFAULT_FEATURE_TYPE, FEATURE_TYPES
from .features import AdaptSpeechFeatureExtractor
from .text import BOS_TOKEN, EOS_TOKEN, PAD_TOKEN, UNK_TOKEN, WORD_DELIMITER, Vocab, check_vocab


def build_processor(
    vocab: Vocab | Mapping[str, Vocab],
    out_dir: str | os.PathLike[str],
    sampling_rate: int = 16000,
    feature_type: str = DEFAULT_FEATURE_TYPE,
    *,
    n_mels: int = 80,
    target_lang: str | None = None,
    normalization: str = "utterance",
    global_cmvn: Mapping[str, Any] | None = None,
) -> Wav2Vec2Processor:
    """Save ``vocab`` as a ``Wav2Vec2CTCTokenizer`` plus a feature extractor in ``out_dir``.

    ``Wav2Vec2Processor.from_pretrained(out_dir)`` (or ``AutoProcessor``) loads the result: for ``"waveform"``
    transformers' ``Wav2Vec2FeatureExtractor`` as it is, for ``"fbank"`` adaptspeech's
    ``AdaptSpeechFeatureExtractor`` once ``adaptspeech`` is imported (the import registers the class). The feature
    extractor carries two extra attributes that transformers serialises: ``feature_type`` (``"waveform"``:
    zero-mean unit-variance samples as ``input_values``; ``"fbank"``: per-utterance normalised log-mel
    ``input_features`` ``[T, n_mels]``) and ``n_mels``.

    Args:
        vocab: a flat vocabulary, or ``{lang: vocab}`` for per-language vocabularies (then ``target_lang``,
            default the first language, is the one the tokenizer starts with; ``set_target_lang`` switches).
        out_dir: folder to write ``vocab.json``, ``tokenizer_config.json``, ``processor_config.json``.
        sampling_rate (`int`, defaults to 16000): the model's rate.
        feature_type (`str`, defaults to ``"waveform"``): ``"waveform"`` or ``"fbank"``.
        n_mels (`int`, defaults to 80): mel filters for ``"fbank"``.
        normalization, global_cmvn: the feature extractor's normalisation (``"utterance"``, or ``"global"`` with the
            training set's statistics; :class:`~adaptspeech.data.features.AdaptSpeechFeatureExtractor`).
    """
    FEATURE_TYPES.check(feature_type, "feature_type")
    nested = bool(vocab) and all(isinstance(v, Mapping) for v in vocab.values())
    if nested:
        for lang, lang_vocab in vocab.items():
            check_vocab(lang_vocab, f"vocab[{lang!r}]")
        target_lang = target_lang or next(iter(vocab))
        if target_lang not in vocab:
            raise ValueError(f"target_lang: {target_lang!r} has no vocabulary; allowed values: {', '.join(vocab)}")
    else:
        check_vocab(vocab)
        if target_lang is not None:
            raise ValueError("target_lang is only meaningful with per-language (nested) vocabularies")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    vocab_file = out / "vocab.json"
    vocab_file.write_text(json.dumps(vocab, ensure_ascii=False, indent=1), encoding="utf-8")
    tokenizer = Wav2Vec2CTCTokenizer(
        str(vocab_file),
        unk_token=UNK_TOKEN,
        pad_token=PAD_TOKEN,
        bos_token=BOS_TOKEN,
        eos_token=EOS_TOKEN,
        word_delimiter_token=WORD_DELIMITER,
        target_lang=target_lang,
    )
    feature_extractor = _feature_extractor(feature_type, sampling_rate, n_mels, normalization, global_cmvn)
    processor = Wav2Vec2Processor(feature_extractor=feature_extractor, tokenizer=tokenizer)
    processor.save_pretrained(str(out))
    return processor


def _feature_extractor(feature_type: str, sampling_rate: int, n_mels: int, normalization: str = "utterance",
                       global_cmvn: Mapping[str, Any] | None = None) -> Any:
    """transformers' own feature extractor for a feature type it computes itself (``Wav2Vec2FeatureExtractor`` for
    waveforms, ``SeamlessM4TFeatureExtractor`` for w2v-BERT's stacked filterbanks), else the
    :class:`~adaptspeech.data.features.AdaptSpeechFeatureExtractor` (log-mel ``input_features`` for fbank)."""
    features = FEATURE_TYPES.get(feature_type)(sampling_rate=sampling_rate, n_mels=n_mels, normalization=normalization)
    if features.stock_extractor:
        return features.build_stock_extractor()
    return AdaptSpeechFeatureExtractor(feature_type=feature_type, sampling_rate=sampling_rate, n_mels=n_mels,
                                       normalization=normalization, global_cmvn=global_cmvn)
