"""Local normalisation of long recordings (adaptspeech.inference.long_form.local_norm): the sliding-window rule against
a unit-by-unit reference, digital silence left out, every encoder call's input (fbank and waveform models) equal to the
per-utterance normalisation of its own audio, a one-call recording exactly ``prepare``'s, and two voices at very
different levels decoded each as alone when a chunk boundary falls between them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from helpers.model_folders import audio, model_folder, span_audio
from transformers import AutoProcessor

from adaptspeech import AdaptSpeechForCTC
from adaptspeech.data.audio import digital_silence, log_mel
from adaptspeech.data.feature_types import FbankFeatures
from adaptspeech.decoding import ctc_greedy_decode
from adaptspeech.inference.encoding import chunked_ctc_log_probs
from adaptspeech.inference.long_form.local_norm import model_input, recording_input, sliding_normalize
from adaptspeech.inference.transcriber import transcribe
from adaptspeech.metrics import compute_error_rates


def reference_sliding(x: np.ndarray, window: int, silent: np.ndarray) -> np.ndarray:
    """Unit by unit: the window ``[s, s + W)``, ``s = min(max(t - W // 2, 0), N - W)``, its kept units' two-pass
    mean and variance (all its units when none is kept)."""
    n = len(x)
    w = min(window, n)
    out = np.empty(x.shape, dtype=np.float64)
    for t in range(n):
        s = min(max(t - w // 2, 0), n - w)
        block, keep = x[s : s + w].astype(np.float64), ~silent[s : s + w]
        kept = block[keep] if keep.any() else block
        out[t] = (x[t] - kept.mean(0)) / np.sqrt(kept.var(0) + 1e-7)
    return out


@pytest.mark.parametrize("shape", [(300, 5), (300,)])
def test_sliding_normalize_equals_the_unit_by_unit_reference(shape: tuple[int, ...]) -> None:
    rng = np.random.default_rng(0)
    x = (rng.standard_normal(shape) * np.linspace(0.1, 10.0, shape[0]).reshape(-1, *[1] * (len(shape) - 1))
         + 3.0).astype(np.float32)
    silent = np.zeros(shape[0], dtype=bool)
    silent[40:60] = True  # shorter than the window: left out of the statistics around it
    silent[150:200] = True  # longer than the window: some windows hold only digital silence
    got = sliding_normalize(x, 31, silent)
    assert got.shape == x.shape and got.dtype == np.float32
    np.testing.assert_allclose(got, reference_sliding(x, 31, silent), rtol=1e-5, atol=2e-5)
    short = x[:25]  # no longer than the window: per-utterance normalisation over the kept units
    np.testing.assert_allclose(sliding_normalize(short, 31, np.zeros(25, bool)),
                               (short - short.mean(0)) / np.sqrt(short.var(0) + 1e-7), atol=1e-6)


def test_digital_silence_marks_zero_frames_and_long_zero_runs() -> None:
    wave = audio(1.0, seed=1)
    wave[2000:2399] = 0.0  # 399 zeros: shorter than one fbank window, not silence
    wave[8000:12000] = 0.0  # 0.25 s of zeros
    silent = digital_silence(wave)
    assert silent.sum() == 4000 and silent[8000:12000].all()
    frames = FbankFeatures(n_mels=16).digital_silence(np.asarray(log_mel(wave, sr=16000, n_mels=16)))
    # frames whose 400-sample window lies inside the zeros: starts 8000 .. 11600 in steps of 160
    assert np.flatnonzero(frames).tolist() == list(range(50, 73))


def _spy_encode(model: Any) -> list[torch.Tensor]:
    """Record every encoder call's input rows ``[B, ...]`` (replaces ``model.encode`` on the instance)."""
    calls: list[torch.Tensor] = []
    encode = model.encode

    def spy(x: torch.Tensor, *args: object, **kwargs: object) -> object:
        calls.extend(x.clone())
        return encode(x, *args, **kwargs)

    model.encode = spy
    return calls


@pytest.mark.parametrize("backbone", ["fbank_conformer", "wav2vec2"])
def test_each_chunk_input_is_the_per_utterance_normalisation_of_its_audio(tmp_path: Path, backbone: str) -> None:
    """Chunks of 1 s with 0.2 s strides over a 3.3 s recording whose level changes fourfold: with a window no
    shorter than a chunk, every chunk's input (strides included) is what ``prepare`` makes of that chunk's audio;
    with a 0.5 s window, every unit is the per-utterance normalisation of its window's audio at that unit."""
    folder = model_folder(tmp_path, backbone=backbone, backbone_overrides={"num_hidden_layers": 0})
    model = AdaptSpeechForCTC.from_pretrained(folder).eval()
    extractor = AutoProcessor.from_pretrained(folder).feature_extractor
    feature_type = "fbank" if backbone == "fbank_conformer" else "waveform"
    wave = audio(3.3, seed=2) * np.linspace(0.25, 1.0, int(3.3 * 16000), dtype=np.float32)
    calls = _spy_encode(model)
    chunked_ctc_log_probs(model, recording_input(wave, extractor, window_s=1.0), 1.0, 0.2)
    starts = [0]
    for x in calls[:-1]:
        starts.append(starts[-1] + len(x) - 2 * len(x) // 5)  # the next chunk begins a chunk minus two strides on
    assert len(calls) == 5
    for x, start in zip(calls, starts, strict=True):
        expected = model_input(span_audio(wave, start, start + len(x), feature_type), extractor)
        torch.testing.assert_close(x, expected, atol=2e-5, rtol=0)

    calls.clear()
    units_per_s = 100 if feature_type == "fbank" else 16000
    window = units_per_s // 2
    chunked_ctc_log_probs(model, recording_input(wave, extractor, window_s=0.5), 1.0, 0.2)
    x, start = calls[1], starts[1]
    for t in (0, 3, window // 2 + 7, len(x) - 1):  # window shifted at both edges, and centred
        s = min(max(t - window // 2, 0), len(x) - window)
        expected = model_input(span_audio(wave, start + s, start + s + window, feature_type), extractor)
        torch.testing.assert_close(x[t], expected[t - s], atol=2e-5, rtol=0)


@pytest.mark.parametrize("backbone", ["fbank_conformer", "wav2vec2"])
def test_a_one_chunk_recording_is_exactly_prepares_input(tmp_path: Path, backbone: str) -> None:
    folder = model_folder(tmp_path, backbone=backbone)
    model = AdaptSpeechForCTC.from_pretrained(folder).eval()
    processor = AutoProcessor.from_pretrained(folder)
    wave = audio(6.0, seed=3)  # longer than the normalisation window, shorter than the chunk
    wave[16000:24000] = 0.0  # digital silence stays in the statistics, as prepare keeps it
    calls = _spy_encode(model)
    transcribe(model, processor, [wave], chunk_length_s=30.0, norm_window_s=1.0)
    assert len(calls) == 1
    # the same functions on the same samples: the raw features, normalised over all of them
    torch.testing.assert_close(calls[0], model_input(wave, processor.feature_extractor), atol=0, rtol=0)


@pytest.mark.parametrize("backbone", ["fbank_conformer", "wav2vec2"])
def test_two_voices_at_very_different_levels_decode_each_as_alone(tmp_path: Path, backbone: str) -> None:
    """A voice followed by another 46 dB quieter, the chunk boundary (no stride) exactly between them. Locally
    normalised, each decodes as alone: frame for frame for a waveform model (each chunk is one voice's samples),
    within 10 % CER for fbank (the 25 ms windows of the junction's frames straddle both voices). Normalised over the
    whole recording (the previous rule), fbank text is mostly wrong (> 50 % CER); the waveform model's first layer
    (group norm over time) absorbs most of the level, but its output moves."""
    folder = model_folder(tmp_path, backbone=backbone, backbone_overrides={"num_hidden_layers": 0})
    model = AdaptSpeechForCTC.from_pretrained(folder).eval()
    extractor = AutoProcessor.from_pretrained(folder).feature_extractor
    loud, quiet = audio(2.0, seed=4), 0.005 * audio(1.44, seed=5)
    recording = np.concatenate([loud, quiet])
    own = torch.cat([chunked_ctc_log_probs(model, model_input(w, extractor)) for w in (loud, quiet)])
    local = chunked_ctc_log_probs(model, recording_input(recording, extractor), 2.0, 0.0)
    whole = chunked_ctc_log_probs(model, model_input(recording, extractor), 2.0, 0.0)
    texts = {name: _greedy_text(model, AutoProcessor.from_pretrained(folder), lp)
             for name, lp in (("own", own), ("local", local), ("whole", whole))}
    assert len(texts["own"]) > 20
    cer = {name: compute_error_rates([texts[name]], [texts["own"]])["overall"]["cer"] for name in ("local", "whole")}
    assert cer["local"] <= 0.1, cer
    if backbone == "wav2vec2":
        torch.testing.assert_close(local, own, atol=1e-5, rtol=0)
        assert (whole - own).abs().max() > 0.1
    else:
        assert cer["whole"] > 0.5, cer


def _greedy_text(model: AdaptSpeechForCTC, processor: Any, log_probs: torch.Tensor) -> str:
    """CTC greedy text of ``[T, V]`` log-probabilities."""
    ids = ctc_greedy_decode(log_probs[None], blank_id=model.config.pad_token_id)[0]
    return processor.tokenizer.decode(ids, group_tokens=False, skip_special_tokens=True)
