"""Global CMVN in the data path: the statistics of a prepared split, ``prepare --normalization global``, the feature
extractor carrying them through a processor folder, and folders saved before the setting reading exactly as before."""

from __future__ import annotations

import json

import numpy as np
import pytest
from datasets import Array2D, Dataset, Features
from transformers import AutoProcessor, Wav2Vec2Processor

import adaptspeech  # noqa: F401 (registers the feature extractor)
from adaptspeech.data import load_audio
from adaptspeech.data.feature_types import FbankFeatures, FeatureType, normalize_utterance
from adaptspeech.data.features import AdaptSpeechFeatureExtractor
from adaptspeech.data.global_cmvn import compute_global_cmvn
from adaptspeech.data.prepared_corpus import prepare_corpus
from adaptspeech.data.processor import build_processor
from adaptspeech.data.text import build_vocab
from adaptspeech.runtime.features import GlobalCmvn

VOCAB = build_vocab(["ab c"])


def _rows(seed: int = 0, bins: int = 5) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    lengths = (7, 0, 13, 1, 30)  # an empty (skipped) row counts for nothing
    return [(rng.standard_normal((n, bins)) * (1 + np.arange(bins)) + 3 * np.arange(bins)).astype(np.float32)
            for n in lengths]


def test_the_statistics_are_the_mean_and_variance_of_every_frame_of_the_split() -> None:
    rows = _rows()
    dataset = Dataset.from_dict({"input_features": rows},
                                features=Features({"input_features": Array2D(shape=(None, 5), dtype="float32")}))
    stats = compute_global_cmvn(dataset, "input_features", batch_size=2, progress=False)
    frames = np.concatenate(rows).astype(np.float64)
    np.testing.assert_allclose(stats.mean, frames.mean(axis=0), rtol=1e-12)
    np.testing.assert_allclose(stats.var, frames.var(axis=0), rtol=1e-10)
    assert stats.units == 51
    with pytest.raises(KeyError, match="global CMVN reads 'input_values'; the split has input_features"):
        compute_global_cmvn(dataset, "input_values", progress=False)
    with pytest.raises(ValueError, match="over no frame"):
        compute_global_cmvn(dataset.select([1]), "input_features", progress=False)


def test_the_extractor_applies_the_statistics_and_saves_them_in_the_processor_folder(tmp_path) -> None:
    stats = GlobalCmvn(np.linspace(-3, 3, 16), np.linspace(0.5, 2, 16), 100)
    build_processor(VOCAB, tmp_path, feature_type="fbank", n_mels=16, normalization="global",
                    global_cmvn=stats.to_dict())
    wave = np.random.default_rng(1).standard_normal(8000).astype(np.float32) * 0.1
    for loader in (AutoProcessor, Wav2Vec2Processor):
        extractor = loader.from_pretrained(tmp_path).feature_extractor
        assert isinstance(extractor, AdaptSpeechFeatureExtractor) and extractor.normalization == "global"
        raw = FbankFeatures(n_mels=16).raw(wave).astype(np.float64)
        expected = ((raw - stats.mean) / np.sqrt(stats.var + 1e-7)).astype(np.float32)
        np.testing.assert_array_equal(extractor(wave).input_features[0], expected)


def test_a_folder_with_global_normalization_but_no_statistics_is_refused_in_one_line(tmp_path) -> None:
    build_processor(VOCAB, tmp_path, feature_type="fbank", n_mels=16)
    config_file = tmp_path / "processor_config.json"
    config = json.loads(config_file.read_text())
    config["feature_extractor"]["normalization"] = "global"
    config_file.write_text(json.dumps(config))
    with pytest.raises(ValueError) as err:
        Wav2Vec2Processor.from_pretrained(tmp_path)
    message = str(err.value)
    assert "\n" not in message and str(tmp_path) in message
    assert "normalization='global' but no global_cmvn statistics" in message
    with pytest.raises(ValueError, match="global_cmvn holds 5 bins; feature_type='fbank' gives 16"):
        AdaptSpeechFeatureExtractor(n_mels=16, normalization="global", global_cmvn={"mean": [0] * 5, "var": [1] * 5,
                                                                                   "units": 3})
    with pytest.raises(ValueError, match="normalization='window'; allowed values: utterance, global"):
        AdaptSpeechFeatureExtractor(normalization="window")
    with pytest.raises(ValueError, match=r"needs adaptspeech's own feature extractor .* feature_type='waveform'"):
        build_processor(VOCAB, tmp_path / "w", feature_type="waveform", normalization="global")
    with pytest.raises(ValueError, match="feature_type='waveform' is computed by transformers"):  # before any read
        prepare_corpus(tmp_path / "no_corpus", "ro", tmp_path / "out", feature_type="waveform", normalization="global")
    assert not (tmp_path / "out").exists()


def test_a_folder_saved_before_the_setting_reads_bit_identical_features(tmp_path) -> None:
    """A processor_config.json without ``normalization`` / ``global_cmvn`` (every folder saved before them) loads as
    per-utterance normalisation and computes exactly :func:`normalize_utterance` of the raw log-mel."""
    build_processor(VOCAB, tmp_path, feature_type="fbank", n_mels=16)
    config_file = tmp_path / "processor_config.json"
    config = json.loads(config_file.read_text())
    for key in ("normalization", "global_cmvn"):
        config["feature_extractor"].pop(key)
    config_file.write_text(json.dumps(config))
    extractor = Wav2Vec2Processor.from_pretrained(tmp_path).feature_extractor
    assert extractor.normalization == "utterance" and extractor.global_cmvn is None
    wave = np.random.default_rng(2).standard_normal(9000).astype(np.float32) * 0.1
    expected = normalize_utterance(FbankFeatures(n_mels=16).raw(wave), axis=0)
    np.testing.assert_array_equal(extractor(wave).input_features[0], expected)
    assert not FeatureType.of(extractor).global_normalization


def test_prepare_with_global_normalization_normalises_every_split_with_the_training_splits_statistics(
        synthetic_corpus, tmp_path) -> None:
    result = prepare_corpus(synthetic_corpus[0], ["ro", "cs"], tmp_path / "out", feature_type="fbank",
                            normalization="global", save_dataset=False)
    processor = AutoProcessor.from_pretrained(result.processor_dir)
    features = FeatureType.of(processor.feature_extractor)
    assert features.global_normalization
    train = result.dataset["train"].with_format("numpy")
    frames = np.concatenate([row for row in train["input_features"] if len(row)]).astype(np.float64)
    assert features.stats().units == len(frames)
    # normalised with the statistics of exactly these frames: zero mean, unit variance per bin
    np.testing.assert_allclose(frames.mean(axis=0), 0.0, atol=1e-5)
    np.testing.assert_allclose(frames.var(axis=0), 1.0, atol=1e-4)
    row = result.dataset["test"][0]
    wave = load_audio(synthetic_corpus[0] / row["language"] / "clips" / row["path"], 16000, 20.0)
    np.testing.assert_allclose(processor.feature_extractor(wave).input_features[0], np.asarray(row["input_features"]),
                               atol=1e-5)
    settings = json.loads((tmp_path / "out" / "prepare_config.json").read_text())
    assert settings["normalization"] == "global"
