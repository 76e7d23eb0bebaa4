"""Global CMVN is the same normalisation everywhere a model reads audio: the feature extractor (offline, what
``prepare`` stores), a stream's features chunk by chunk and the StreamingRecognizer, a long recording's encoder calls,
the ONNX graph and the torch-free runtime's numpy front end, all to 1e-5 on the features for the same audio."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
import torch
from transformers import Wav2Vec2Processor

from adaptspeech import AdaptSpeechForCTC
from adaptspeech.attention.chunking import chunk_attention
from adaptspeech.data.feature_types import FeatureType
from adaptspeech.data.features import AdaptSpeechFeatureExtractor
from adaptspeech.decoding import ctc_greedy_decode
from adaptspeech.export.exporter import export_model
from adaptspeech.inference.long_form.local_norm import recording_input
from adaptspeech.inference.streaming.features import StreamFeatures
from adaptspeech.inference.streaming.recognizer import StreamingRecognizer
from adaptspeech.runtime.features import CmvnAccumulator, log_mel_numpy
from adaptspeech.runtime.folder import read_export
from adaptspeech.testing.tiny_models import save_tiny_model

FEATURE_TOLERANCE = 1e-5
LOGIT_TOLERANCE = 1e-4  # the graph's float32 operations in another order (tests/export/test_export_graph.py)


def audio(seconds: float, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    wave = rng.standard_normal(int(16000 * seconds)).astype(np.float32) * 0.1
    wave[: len(wave) // 3] *= 0.2  # a quieter start: a sliding window's statistics would change along the stream
    return wave


@pytest.fixture(scope="module")
def global_folder(tmp_path_factory):
    """A tiny streaming fbank model whose processor normalises with statistics of three other recordings."""
    folder = save_tiny_model(tmp_path_factory.mktemp("global_cmvn"), streaming=True)
    processor = Wav2Vec2Processor.from_pretrained(folder)
    features = FeatureType.of(processor.feature_extractor)
    stats = CmvnAccumulator()
    for seed in (10, 11, 12):
        stats.add(features.raw(audio(1.5, seed) * (seed - 9)))
    old = processor.feature_extractor
    processor.feature_extractor = AdaptSpeechFeatureExtractor(
        feature_type=old.feature_type, sampling_rate=old.sampling_rate, n_mels=old.n_mels, normalization="global",
        global_cmvn=stats.result().to_dict())
    processor.save_pretrained(folder)
    return folder


def load(folder):
    return AdaptSpeechForCTC.from_pretrained(folder).eval(), Wav2Vec2Processor.from_pretrained(folder)


def test_streamed_and_long_form_features_equal_the_offline_features(global_folder) -> None:
    _, processor = load(global_folder)
    wave = audio(2.3, seed=0)
    offline = processor.feature_extractor(wave).input_features[0]
    features = FeatureType.of(processor.feature_extractor)
    assert features.global_normalization
    stream = StreamFeatures(features, window=50)  # the window is not used: no sliding statistics
    streamed = [stream.normalize(stream.push(wave[start : start + 1234])) for start in range(0, len(wave), 1234)]
    np.testing.assert_allclose(np.concatenate(streamed), offline, atol=FEATURE_TOLERANCE, rtol=0)
    recording = recording_input(wave, processor.feature_extractor, window_s=0.5)
    for start, end in ((0, len(offline)), (30, 130), (100, len(offline))):  # any encoder call of a long recording
        np.testing.assert_allclose(recording.span(start, end).numpy(), offline[start:end], atol=FEATURE_TOLERANCE,
                                   rtol=0)
        np.testing.assert_allclose(recording.utterance(start, end).numpy(), offline[start:end],
                                   atol=FEATURE_TOLERANCE, rtol=0)


@pytest.mark.parametrize("chunk_ms", [160, 640])
def test_the_streaming_recognizer_decodes_the_offline_features(global_folder, chunk_ms) -> None:
    """Chunk by chunk from audio (encode_chunk with its cache) equals the chunk-masked forward of the offline
    features: the features of a stream are the offline ones."""
    model, processor = load(global_folder)
    wave = audio(2.3, seed=1)
    recognizer = StreamingRecognizer(model, processor, chunk_ms=chunk_ms)
    for start in range(0, len(wave), 777):
        recognizer.accept_waveform(wave[start : start + 777])
    recognizer.finalize()
    offline = processor.feature_extractor(wave, return_tensors="pt").input_features
    with torch.no_grad(), chunk_attention(recognizer.chunk_size):
        log_probs = model(input_features=offline).logits.log_softmax(-1)
    assert recognizer.search.frames == log_probs.shape[1]
    assert recognizer.tokens() == ctc_greedy_decode(log_probs)[0] and len(recognizer.tokens()) > 0


def test_the_onnx_graph_and_the_runtime_normalise_as_the_extractor(global_folder, tmp_path) -> None:
    model, processor = load(global_folder)
    export_model(global_folder, tmp_path / "onnx", language="ro")
    exported = read_export(tmp_path / "onnx")
    assert exported.feature["normalization"] == "global"
    wave = audio(1.7, seed=2)
    offline = processor.feature_extractor(wave).input_features[0]
    raw = log_mel_numpy(wave, 16000, int(exported.feature["n_mels"]))  # the runtime's numpy front end
    np.testing.assert_allclose(exported.global_cmvn.apply(raw), offline, atol=FEATURE_TOLERANCE, rtol=0)
    session = ort.InferenceSession(str(exported.graph("fp32")), providers=["CPUExecutionProvider"])
    onnx_logits = session.run(["logits"], {"x": raw[None], "x_lengths": np.array([len(raw)], np.int64)})[0]
    model.set_target_language("ro")  # what the graph holds
    with torch.no_grad():
        torch_logits = model(input_features=torch.from_numpy(offline)[None]).logits.numpy()
    np.testing.assert_allclose(onnx_logits, torch_logits, atol=LOGIT_TOLERANCE, rtol=0)
