"""Model inputs from a decoded waveform, as the processor's feature extractor describes them.

``build_processor`` stores ``feature_type`` on the ``Wav2Vec2FeatureExtractor``; feature extractors of
pretrained checkpoints lack it and mean ``"waveform"``.
"""

from __future__ import annotations

import numpy as np

from .audio import log_mel
from .text import FEATURE_TYPES

INPUT_KEYS: dict[str, str] = {"waveform": "input_values", "fbank": "input_features"}
"""The dataset column / batch key of each feature type."""


def feature_type_of(feature_extractor: object) -> str:
    """``"waveform"`` or ``"fbank"``: the ``feature_type`` attribute, ``"waveform"`` when absent."""
    feature_type = getattr(feature_extractor, "feature_type", "waveform")
    if feature_type not in FEATURE_TYPES:
        raise ValueError(
            f"feature extractor: unknown feature_type {feature_type!r}; allowed values: {', '.join(FEATURE_TYPES)}"
        )
    return feature_type


def normalize_utterance(x: np.ndarray, axis: int = 0, eps: float = 1e-7) -> np.ndarray:
    """``(x - mean) / sqrt(var + eps)`` along ``axis``, as ``Wav2Vec2FeatureExtractor.do_normalize`` does."""
    mean = x.mean(axis=axis, keepdims=True)
    var = x.var(axis=axis, keepdims=True)
    return ((x - mean) / np.sqrt(var + eps)).astype(np.float32)


def extract_features(waveform: np.ndarray, feature_extractor: object) -> tuple[str, np.ndarray]:
    """Model input for one utterance.

    Args:
        waveform (`np.ndarray`): ``[S]`` float32 mono samples at ``feature_extractor.sampling_rate``.
        feature_extractor: a ``Wav2Vec2FeatureExtractor`` (``do_normalize``, ``sampling_rate``, and
            optionally ``feature_type`` / ``n_mels``).

    Returns:
        ``("input_values", [S])`` for ``"waveform"`` (zero mean, unit variance when ``do_normalize``), or
        ``("input_features", [T, n_mels])`` for ``"fbank"`` (:func:`log_mel`, each mel bin normalised to
        zero mean and unit variance over the utterance when ``do_normalize``), float32.
    """
    feature_type = feature_type_of(feature_extractor)
    normalize = bool(getattr(feature_extractor, "do_normalize", True))
    if feature_type == "waveform":
        x = np.asarray(waveform, dtype=np.float32)
        return INPUT_KEYS["waveform"], normalize_utterance(x) if normalize else x
    sr = int(feature_extractor.sampling_rate)
    feats = log_mel(np.asarray(waveform, dtype=np.float32), sr=sr, n_mels=int(getattr(feature_extractor, "n_mels", 80)))
    return INPUT_KEYS["fbank"], normalize_utterance(feats, axis=0) if normalize else feats
