"""Model inputs from a decoded waveform, as a feature extractor describes them: :func:`extract_features` (the
computation ``prepare`` runs, and inference) and :class:`AdaptSpeechFeatureExtractor`, the HF feature extractor that
runs it for transformers' pipeline and processors. What each feature type computes is its class in
:mod:`adaptspeech.data.feature_types`.

``AdaptSpeechFeatureExtractor`` is a ``SequenceFeatureExtractor`` whose per-utterance computation is its feature
type's: ``feature_type="fbank"`` gives per-utterance normalised 80-dim log-mel ``input_features`` ``[T, n_mels]``
(10 ms hop), ``"waveform"`` gives zero-mean unit-variance ``input_values`` ``[S]``. Batches are padded with
``padding_value`` and get a frame-level ``attention_mask``. Importing this module registers the class with
``AutoFeatureExtractor`` under the model type ``"adaptspeech"`` (a string key, which transformers' mapping takes), so
that a processor folder naming it (``prepare``'s) loads wherever this module is imported; the model's config class
is registered as its key too when the model loads (:mod:`adaptspeech.feature_extraction`).

A folder saved before this class existed names ``Wav2Vec2FeatureExtractor`` with ``feature_type="fbank"``;
:func:`upgrade_feature_extractor` turns such an extractor into this class (same settings, same features).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from transformers import AutoFeatureExtractor, BatchFeature, Wav2Vec2FeatureExtractor

from ..runtime.features import GlobalCmvn
from .feature_types import FEATURE_TYPES, FeatureType, feature_type_of


def extract_features(waveform: np.ndarray, feature_extractor: Any) -> tuple[str, np.ndarray]:
    """Model input for one utterance.

    Args:
        waveform (`np.ndarray`): ``[S]`` float32 mono samples at ``feature_extractor.sampling_rate``.
        feature_extractor: a ``Wav2Vec2FeatureExtractor`` (``do_normalize``, ``sampling_rate``, and
            optionally ``feature_type`` / ``n_mels``).

    Returns:
        ``(input name, features)``: ``("input_values", [S])`` for ``"waveform"`` (zero mean, unit variance when
        ``do_normalize``), or ``("input_features", [T, n_mels])`` for ``"fbank"`` (:func:`~adaptspeech.data.audio.
        log_mel`, each mel bin normalised to zero mean and unit variance over the utterance when ``do_normalize``),
        float32.
    """
    features = FeatureType.of(feature_extractor)
    return features.input_name, features.extract(waveform)


class AdaptSpeechFeatureExtractor(Wav2Vec2FeatureExtractor):
    """Log-mel filterbanks or normalised waveforms, as ``adaptspeech prepare`` computes them.

    A ``Wav2Vec2FeatureExtractor`` subclass (its ``__call__`` replaced), so that processors that accept only that
    class, such as ``Wav2Vec2ProcessorWithLM``, hold it.

    Args:
        feature_type (`str`, defaults to ``"fbank"``): ``"fbank"`` (``input_features`` ``[T, n_mels]``) or
            ``"waveform"`` (``input_values`` ``[S]``).
        sampling_rate (`int`, defaults to 16000): the rate the model was trained at; audio at another rate is refused.
        n_mels (`int`, defaults to 80): mel filters of the fbank front end.
        do_normalize (`bool`, defaults to `True`): mean / variance normalisation (per mel bin for fbank).
        normalization (`str`, defaults to ``"utterance"``): with which statistics: each utterance's own
            (``"utterance"``, what every folder saved before this setting reads) or the training set's
            (``"global"``: ``global_cmvn``, computed by ``adaptspeech prepare --normalization global``; the same
            offline, in a stream, in the ONNX graph and in the runtime).
        global_cmvn (`dict`, *optional*): ``{"mean": [F], "var": [F], "units": N}``
            (:class:`~adaptspeech.runtime.features.GlobalCmvn`), saved with the extractor in
            ``processor_config.json``; required by ``normalization: global``.
        padding_value (`float`, defaults to 0.0): the value of padded frames / samples.
        return_attention_mask (`bool`, defaults to `True`): return the padding mask ``[B, T]`` (1 on real frames).
    """

    model_input_names = ["input_features", "attention_mask"]  # noqa: RUF012 (transformers' class attribute)

    def __init__(
        self,
        feature_type: str = "fbank",
        sampling_rate: int = 16000,
        n_mels: int = 80,
        do_normalize: bool = True,
        padding_value: float = 0.0,
        return_attention_mask: bool = True,
        normalization: str = "utterance",
        global_cmvn: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        kwargs.pop("feature_size", None)  # follows from feature_type and n_mels
        kwargs.pop("model_input_names", None)
        self.feature_type = feature_type
        feature_type_of(self)  # refuses an unknown type, naming the allowed ones
        self.n_mels = int(n_mels)
        self.do_normalize = bool(do_normalize)
        self.normalization = str(normalization)
        stats = GlobalCmvn.from_dict(global_cmvn) if global_cmvn is not None else None
        self.global_cmvn = stats.to_dict() if stats is not None else None  # JSON in processor_config.json
        features = FEATURE_TYPES.get(feature_type)(n_mels=self.n_mels, normalization=self.normalization,
                                                   global_cmvn=stats)
        if features.normalization == "global":
            features.stats()  # refuses missing statistics, or statistics of another size
        super().__init__(
            feature_size=features.feature_size,
            sampling_rate=int(sampling_rate),
            padding_value=float(padding_value),
            return_attention_mask=return_attention_mask,
            do_normalize=self.do_normalize,
            **kwargs,
        )
        self.model_input_names = [features.input_name, "attention_mask"]

    @classmethod
    def from_pretrained(cls, pretrained_model_name_or_path: Any, *args: Any, **kwargs: Any) -> Any:
        """transformers' loading, with a refused setting (``normalization: global`` without its statistics)
        reported in one line naming the folder."""
        try:
            return super().from_pretrained(pretrained_model_name_or_path, *args, **kwargs)
        except ValueError as err:
            if "feature extractor:" not in str(err):
                raise
            raise ValueError(f"{pretrained_model_name_or_path}: {err}") from None

    def __call__(
        self,
        raw_speech: np.ndarray | Sequence[np.ndarray] | Sequence[float],
        sampling_rate: int | None = None,
        padding: bool | str = True,
        max_length: int | None = None,
        pad_to_multiple_of: int | None = None,
        return_attention_mask: bool | None = None,
        return_tensors: str | None = None,
        **kwargs: Any,
    ) -> BatchFeature:
        """Features of one waveform ``[S]`` or a batch (a list of ``[S_i]`` or an array ``[B, S]``), padded.

        Returns:
            ``BatchFeature`` with ``input_features`` ``[B, T, n_mels]`` (fbank) or ``input_values`` ``[B, S]``
            (waveform), and ``attention_mask`` ``[B, T]`` / ``[B, S]`` when asked for.

        Raises:
            ValueError: ``sampling_rate`` differs from the extractor's (resample first: the features would be wrong).
        """
        if sampling_rate is not None and int(sampling_rate) != self.sampling_rate:
            raise ValueError(
                f"audio at {sampling_rate} Hz, but this feature extractor expects {self.sampling_rate} Hz: resample "
                "it first (adaptspeech.data.load_audio does)"
            )
        waveforms = _as_batch(raw_speech)
        kind = FeatureType.of(self)
        features = BatchFeature({kind.input_name: [kind.extract(w) for w in waveforms]})
        return self.pad(
            features,
            padding=padding,
            max_length=max_length,
            pad_to_multiple_of=pad_to_multiple_of,
            return_attention_mask=(
                self.return_attention_mask if return_attention_mask is None else return_attention_mask
            ),
            return_tensors=return_tensors,
        )


MODEL_TYPE = "adaptspeech"
"""The model type of adaptspeech's config (``AdaptSpeechConfig.model_type``; a test holds them equal)."""

AutoFeatureExtractor.register(MODEL_TYPE, AdaptSpeechFeatureExtractor, exist_ok=True)


def _as_batch(raw_speech: Any) -> list[np.ndarray]:
    """A list of 1-D float32 waveforms from one waveform or a batch."""
    if isinstance(raw_speech, np.ndarray) or hasattr(raw_speech, "numpy"):
        array = np.asarray(raw_speech.numpy() if hasattr(raw_speech, "numpy") else raw_speech, dtype=np.float32)
        if array.ndim == 1:
            return [array]
        if array.ndim == 2:
            return list(array)
        raise ValueError(f"expected a waveform [S] or a batch [B, S], got shape {array.shape}")
    items = list(raw_speech)
    if items and np.isscalar(items[0]):
        return [np.asarray(items, dtype=np.float32)]
    batch = [np.asarray(item, dtype=np.float32) for item in items]
    bad = [i for i, w in enumerate(batch) if w.ndim != 1]
    if bad:
        raise ValueError(f"every waveform of a batch must be 1-D [S]; item {bad[0]} has shape {batch[bad[0]].shape}")
    return batch


def upgrade_feature_extractor(feature_extractor: Any) -> Any:
    """An :class:`AdaptSpeechFeatureExtractor` with the settings of a ``Wav2Vec2FeatureExtractor`` that carries a
    ``feature_type`` transformers' extractor does not compute (``"fbank"``: the processors saved before this class
    existed); any other extractor unchanged."""
    feature_type = feature_type_of(feature_extractor)
    if isinstance(feature_extractor, AdaptSpeechFeatureExtractor) or FEATURE_TYPES.get(feature_type).stock_extractor:
        return feature_extractor
    return AdaptSpeechFeatureExtractor(
        feature_type=feature_type,
        sampling_rate=feature_extractor.sampling_rate,
        n_mels=getattr(feature_extractor, "n_mels", 80),
        do_normalize=getattr(feature_extractor, "do_normalize", True),
        normalization=getattr(feature_extractor, "normalization", "utterance"),
        global_cmvn=getattr(feature_extractor, "global_cmvn", None),
        padding_value=getattr(feature_extractor, "padding_value", 0.0),
        return_attention_mask=getattr(feature_extractor, "return_attention_mask", True),
    )
