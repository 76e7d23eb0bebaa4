"""``StreamingRecognizer``: audio in blocks of any size, features normalised over past audio only, the encoder chunk by
chunk, the CTC search carried across chunks; the text equals the offline decode of the same normalised features under
the same chunk mask."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch
from helpers.streaming import forced_speaker
from transformers import Wav2Vec2Processor

from adaptspeech import AdaptSpeechForCTC
from adaptspeech.attention.chunking import chunk_attention
from adaptspeech.data.feature_types import FeatureType
from adaptspeech.decoding import ctc_greedy_decode, ctc_prefix_beam_search
from adaptspeech.inference.streaming.features import StreamFeatures
from adaptspeech.inference.streaming.recognizer import StreamingRecognizer
from adaptspeech.testing.tiny_models import save_tiny_model


@pytest.fixture(scope="module")
def streaming_folder(tmp_path_factory):
    return save_tiny_model(tmp_path_factory.mktemp("streaming"), streaming=True)


def load(folder):
    return AdaptSpeechForCTC.from_pretrained(folder).eval(), Wav2Vec2Processor.from_pretrained(folder)


def audio(seconds: float, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    wave = rng.standard_normal(int(16000 * seconds)).astype(np.float32) * 0.1
    wave[: len(wave) // 3] *= 0.2  # a quieter start: the sliding statistics change along the stream
    return wave


def feed(recognizer: StreamingRecognizer, wave: np.ndarray, block: int) -> list[str]:
    partials = [recognizer.accept_waveform(wave[start : start + block]) for start in range(0, len(wave), block)]
    return [*partials, recognizer.finalize()]


def stepwise_features(features: FeatureType, wave: np.ndarray, step: int, window: int) -> np.ndarray:
    """The rule written out: raw log-mel of the whole recording, each step of ``step`` frames normalised over the
    last ``window`` frames up to its end."""
    raw = features.raw(wave)
    out = []
    for start in range(0, len(raw), step):
        end = min(start + step, len(raw))
        history = raw[max(0, end - window) : end].astype(np.float64)
        mean, var = history.mean(axis=0), history.var(axis=0)
        out.append((raw[start:end] - mean) / np.sqrt(var + 1e-7))
    return np.concatenate(out).astype(np.float32)


@pytest.mark.parametrize(("chunk_ms", "method"), [(160, "ctc_greedy"), (320, "ctc_beam")])
def test_text_equals_the_offline_decode_of_the_same_features(streaming_folder, chunk_ms, method) -> None:
    model, processor = load(streaming_folder)
    wave = audio(2.3)  # ends mid-chunk: the last partial chunk is decoded
    recognizer = StreamingRecognizer(model, processor, chunk_ms=chunk_ms, method=method, norm_window_s=1.0)
    partials = feed(recognizer, wave, 777)
    chunk = recognizer.chunk_size
    features = stepwise_features(recognizer.features, wave, recognizer.step_units, recognizer.window)
    with torch.no_grad(), chunk_attention(chunk):
        log_probs = model(input_features=torch.from_numpy(features)[None]).logits.log_softmax(-1)
    assert recognizer.search.frames == log_probs.shape[1]
    if method == "ctc_greedy":
        expected = ctc_greedy_decode(log_probs)[0]
    else:
        expected = ctc_prefix_beam_search(log_probs, beam_size=recognizer.beam_size)[0][0].tokens
    assert recognizer.tokens() == expected
    assert partials[-1] == recognizer.partial() and len(partials[-1]) > 0
    assert all(later.startswith(earlier) for earlier, later in itertools.pairwise(partials)) or method != "ctc_greedy"


def test_block_size_does_not_matter(streaming_folder) -> None:
    model, processor = load(streaming_folder)
    wave = audio(1.7, seed=1)
    texts = []
    for block in (160, 1000, len(wave)):
        recognizer = StreamingRecognizer(model, processor, chunk_ms=240, num_left_chunks=2)
        texts.append(feed(recognizer, wave, block)[-1])
    assert texts[0] == texts[1] == texts[2]


def test_stream_features_equal_the_whole_recording() -> None:
    """Units as their windows complete equal the whole recording's log-mel (the same frames; 1e-5 for the FFT of
    another batch size)."""
    features = FeatureType.of_model(type("M", (), {"main_input_name": "input_features"})())
    stream = StreamFeatures(features, window=400)
    wave = audio(1.05)
    pieces = [stream.push(wave[start : start + 333]) for start in range(0, len(wave), 333)]
    np.testing.assert_allclose(np.concatenate(pieces), features.raw(wave), atol=1e-4, rtol=1e-5)
    assert len(stream.flush()) == 0  # snip_edges: the leftover samples make no frame
    short = StreamFeatures(features, window=400)
    assert len(short.push(wave[:100])) == 0 and short.flush().shape == (1, features.n_mels)  # a zero-padded frame


def test_misuse_is_refused(streaming_folder, tmp_path) -> None:
    model, processor = load(streaming_folder)
    with pytest.raises(ValueError, match="chunk of 650 ms: must be a positive multiple of the model's 40 ms frames"):
        StreamingRecognizer(model, processor, chunk_ms=650)
    with pytest.raises(ValueError, match=r"^--method attention_beam: not served by streaming \(transcribe --stream\), "
                                         "which serves: ctc_greedy, ctc_beam$"):
        StreamingRecognizer(model, processor, method="attention_beam")
    recognizer = StreamingRecognizer(model, processor, chunk_ms=80)
    assert recognizer.finalize() == ""  # nothing heard: nothing decoded
    with pytest.raises(ValueError, match=r"finalised; call reset\(\)"):
        recognizer.accept_waveform(audio(0.1))
    recognizer.reset()
    recognizer.accept_waveform(audio(0.1))
    unchunked, unchunked_processor = load(save_tiny_model(tmp_path / "plain"))
    with pytest.raises(ValueError, match=r"attention\.kind='default' cannot stream"):
        StreamingRecognizer(unchunked, unchunked_processor)


def test_endpointing_ends_an_utterance_after_silence(streaming_folder) -> None:
    """The CTC head is forced to one label, then to the blank for 1.2 s, then to the label again: with a 1 s endpoint
    the first utterance ends where the blanks begin and a second one starts."""
    model, processor = load(streaming_folder)
    head = model.ctc_head.lm_head
    with torch.no_grad():
        head.weight.zero_()
    recognizer = StreamingRecognizer(model, processor, chunk_ms=200, endpoint_silence_s=1.0)

    say = forced_speaker(recognizer, head, audio)

    blank = model.config.pad_token_id
    word = blank + 5
    say(word, 0.8)
    assert recognizer.partial() and not recognizer.pop_segments()
    say(blank, 1.2)
    (segment,) = recognizer.pop_segments()
    assert segment["text"] == processor.tokenizer.decode([word]) and segment["start"] == 0.0
    assert recognizer.partial() == ""  # the search started afresh
    say(word, 0.6)
    recognizer.finalize()
    assert recognizer.text() == f"{segment['text']} {recognizer.partial()}"


def test_two_interleaved_streams_routed_to_different_languages_equal_each_alone(tmp_path) -> None:
    import threading

    folder = save_tiny_model(tmp_path / "two", streaming=True)
    model, processor = load(folder)
    torch.manual_seed(3)
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if "language_adapters" in name or "ctc_head" in name:
                parameter.normal_(0.0, 0.5)
    before = (list(model.config.active_languages), model.config.fusion_active)
    waves = {"ro": audio(1.9, seed=4), "cs": audio(1.9, seed=5)}

    def recognizer(language: str) -> StreamingRecognizer:
        return StreamingRecognizer(model, processor, chunk_ms=160, language=language)

    alone = {}
    for language, wave in waves.items():
        alone[language] = feed(recognizer(language), wave, 1600)
    other = feed(recognizer("ro"), waves["cs"], 1600)
    assert other != alone["cs"]  # the language changes the text
    streams = {language: recognizer(language) for language in waves}
    together: dict[str, list[str]] = {language: [] for language in waves}
    for start in range(0, len(waves["ro"]), 1600):  # interleaved block by block in one thread
        for language, stream in streams.items():
            together[language].append(stream.accept_waveform(waves[language][start : start + 1600]))
    for language, stream in streams.items():
        together[language].append(stream.finalize())
    assert together == alone
    barrier = threading.Barrier(2, timeout=30)
    results: dict[str, list[str]] = {}

    def run(language: str) -> None:
        stream, partials = recognizer(language), []
        for start in range(0, len(waves[language]), 1600):
            barrier.wait()
            partials.append(stream.accept_waveform(waves[language][start : start + 1600]))
        results[language] = [*partials, stream.finalize()]

    threads = [threading.Thread(target=run, args=(language,)) for language in waves]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert results == alone
    assert (list(model.config.active_languages), model.config.fusion_active) == before
