"""Audio decoding (formats, downmix, resampling, bad clips) and log-mel features against naive references."""

from __future__ import annotations

import math

import numpy as np
import pytest
import soundfile as sf
import torch
from transformers.audio_utils import mel_filter_bank

from adaptspeech.data.audio import BadClipError, frame_params, load_audio, log_mel, mel_filterbank, num_frames


def _tone(sr: int, seconds: float, freq: float = 440.0, amp: float = 0.5) -> np.ndarray:
    t = np.arange(round(sr * seconds)) / sr
    return (amp * np.sin(2 * np.pi * freq * t)).astype(np.float32)


@pytest.mark.parametrize(("fmt", "ext"), [("WAV", "wav"), ("FLAC", "flac"), ("OGG", "ogg"), ("MP3", "mp3")])
def test_every_format_decodes_to_16k_mono_with_its_duration(tmp_path, fmt, ext):
    path = tmp_path / f"tone.{ext}"
    sf.write(path, _tone(22050, 1.5), 22050, format=fmt)
    wave = load_audio(path, target_sr=16000)
    assert wave.dtype == np.float32 and wave.ndim == 1 and wave.flags.c_contiguous
    assert abs(len(wave) - 1.5 * 16000) <= 16  # within 1 ms
    # the tone survives: its energy sits at 440 Hz (a 16000-sample window has 1 Hz bins)
    spectrum = np.abs(np.fft.rfft(wave[2000:18000]))
    assert abs(int(np.argmax(spectrum)) - 440) <= 1


def test_stereo_48k_is_downmixed_then_resampled(tmp_path):
    left, right = _tone(48000, 1.0, amp=0.6), _tone(48000, 1.0, amp=0.2)
    path = tmp_path / "stereo.wav"
    sf.write(path, np.stack([left, right], axis=1), 48000, subtype="FLOAT")
    wave = load_audio(path, target_sr=16000)
    assert len(wave) == 16000
    expected = _tone(16000, 1.0, amp=0.4)  # the mean of the channels, sampled at 16 kHz
    np.testing.assert_allclose(wave[200:-200], expected[200:-200], atol=2e-3)


def test_no_resampling_at_the_file_rate(tmp_path):
    tone = _tone(16000, 0.5)
    sf.write(tmp_path / "a.wav", tone, 16000, subtype="FLOAT")
    np.testing.assert_array_equal(load_audio(tmp_path / "a.wav", 16000), tone)


def test_bytes_in_memory_decode_like_the_file(tmp_path):
    sf.write(tmp_path / "a.flac", _tone(16000, 0.5), 16000)
    data = (tmp_path / "a.flac").read_bytes()
    np.testing.assert_array_equal(load_audio("a.flac", data=data), load_audio(tmp_path / "a.flac"))


def _bad_files(tmp_path):
    files = {}
    files["missing"] = tmp_path / "gone.mp3"
    files["empty"] = tmp_path / "zero.mp3"
    files["empty"].write_bytes(b"")
    files["unreadable"] = tmp_path / "corrupt.mp3"
    files["unreadable"].write_bytes(b"this is not an mp3 " * 300)
    files["silent"] = tmp_path / "silent.wav"
    sf.write(files["silent"], np.zeros(8000, np.float32), 16000)
    files["nan"] = tmp_path / "nan.wav"
    nan = _tone(16000, 0.5)
    nan[100] = np.nan
    sf.write(files["nan"], nan, 16000, subtype="FLOAT")
    files["too_long"] = tmp_path / "long.wav"
    sf.write(files["too_long"], _tone(16000, 3.0), 16000)
    return files


@pytest.mark.parametrize("reason", ["missing", "empty", "unreadable", "silent", "nan", "too_long"])
def test_bad_clips_raise_with_their_reason(tmp_path, reason):
    path = _bad_files(tmp_path)[reason]
    with pytest.raises(BadClipError) as info:
        load_audio(path, max_seconds=2.0)
    assert info.value.reason == reason
    assert info.value.path == str(path)
    assert str(path) in str(info.value)


def test_an_empty_byte_string_is_empty():
    with pytest.raises(BadClipError, match="empty"):
        load_audio("x.mp3", data=b"")


def _naive_log_mel(wave: np.ndarray, sr: int, n_mels: int) -> np.ndarray:
    """Explicit loops: frame, Hann window, DFT by its definition, power, transformers' mel filters, log."""
    win, hop, n_fft = frame_params(sr)
    filters = mel_filter_bank(
        num_frequency_bins=n_fft // 2 + 1, num_mel_filters=n_mels, min_frequency=20.0, max_frequency=sr / 2,
        sampling_rate=sr, norm=None, mel_scale="htk",
    )  # fmt: skip
    window = [0.5 - 0.5 * math.cos(2 * math.pi * n / win) for n in range(win)]
    n_out = 1 + (len(wave) - win) // hop
    out = np.zeros((n_out, n_mels))
    k = np.arange(n_fft // 2 + 1)
    for t in range(n_out):
        frame = np.zeros(n_fft)
        for n in range(win):
            frame[n] = wave[t * hop + n] * window[n]
        real = np.zeros(len(k))
        imag = np.zeros(len(k))
        for n in range(win):  # the DFT sum, one time index at a time
            real += frame[n] * np.cos(2 * np.pi * k * n / n_fft)
            imag -= frame[n] * np.sin(2 * np.pi * k * n / n_fft)
        power = real**2 + imag**2
        for m in range(n_mels):
            out[t, m] = math.log(max(float(power @ filters[:, m]), 1e-10))
    return out


def test_log_mel_matches_a_naive_implementation():
    rng = np.random.default_rng(0)
    wave = (0.1 * rng.standard_normal(400 + 160 * 5) + _tone(16000, 0.085)[: 400 + 160 * 5]).astype(np.float32)
    ours = log_mel(wave, sr=16000, n_mels=80)
    assert isinstance(ours, np.ndarray) and ours.shape == (6, 80) and ours.dtype == np.float32
    np.testing.assert_allclose(ours, _naive_log_mel(wave, 16000, 80), atol=2e-3, rtol=1e-4)


def test_mel_filterbank_equals_transformers_htk_filters():
    ours = mel_filterbank(80, 16000, 512).numpy()
    ref = mel_filter_bank(
        num_frequency_bins=257, num_mel_filters=80, min_frequency=20.0, max_frequency=8000.0,
        sampling_rate=16000, norm=None, mel_scale="htk",
    )  # fmt: skip
    np.testing.assert_allclose(ours, ref, atol=1e-6)


@pytest.mark.parametrize("num_samples", [1, 399, 400, 559, 560, 16000, 16161])
def test_num_frames_predicts_log_mel_length(num_samples):
    feats = log_mel(np.ones(num_samples, np.float32) * 0.1)
    assert feats.shape == (num_frames(num_samples), 80)
    assert num_frames(num_samples) == (1 if num_samples < 400 else 1 + (num_samples - 400) // 160)


def test_log_mel_batches_and_tensors():
    rng = np.random.default_rng(1)
    batch = rng.standard_normal((3, 4000)).astype(np.float32)
    out = log_mel(torch.from_numpy(batch), n_mels=40)
    assert isinstance(out, torch.Tensor) and out.shape == (3, num_frames(4000), 40)
    for i in range(3):
        np.testing.assert_allclose(out[i].numpy(), log_mel(batch[i], n_mels=40), atol=1e-5)
    with pytest.raises(ValueError, match=r"\[S\] or \[B, S\]"):
        log_mel(np.zeros((1, 2, 400), np.float32))


@pytest.mark.parametrize("num_samples", [399, 400, 16000, 16161, 48000])
def test_log_mel_in_pieces_of_frames_is_log_mel_at_once(num_samples):
    # a long recording's frames are computed a piece at a time (an hour at once: 1.7 GB of FFT intermediates)
    wave = np.random.default_rng(2).standard_normal((2, num_samples)).astype(np.float32)
    whole = log_mel(wave, piece_frames=10**9)
    for piece in (1, 7, 100):
        np.testing.assert_allclose(log_mel(wave, piece_frames=piece), whole, atol=1e-5)
        np.testing.assert_allclose(log_mel(wave[0], piece_frames=piece), whole[0], atol=1e-5)
