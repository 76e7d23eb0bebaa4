"""The torch-free runtime's numpy front end of w2v-BERT 2.0 (``stacked_fbank``): SeamlessM4T's Kaldi filterbank,
normalised per mel bin and stacked by 2, equal to transformers' ``SeamlessM4TFeatureExtractor`` on synthetic speech
(espeak-ng clips decoded from mp3) and on edge lengths."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from transformers import SeamlessM4TFeatureExtractor

from adaptspeech.data.synthetic import build_synthetic_corpus
from adaptspeech.runtime.audio import load_audio
from adaptspeech.runtime.features import (
    FRONT_ENDS,
    kaldi_log_mel_numpy,
    kaldi_mel_weights,
    povey_window,
    stacked_fbank_numpy,
)

TOLERANCE = 1e-5


@pytest.fixture(scope="module")
def speech(tmp_path_factory: pytest.TempPathFactory) -> list[np.ndarray]:
    """Three synthetic Romanian clips (espeak-ng, mp3) at 16 kHz, and one with an odd number of frames."""
    root = tmp_path_factory.mktemp("speech")
    build_synthetic_corpus(root / "corpus", ["ro"], 3, seed=0, num_workers=1, progress=False)
    clips = [load_audio(path, 16000) for path in sorted(Path(root / "corpus" / "ro" / "clips").glob("*.mp3"))]
    frames = 1 + (len(clips[0]) - 400) // 160
    return [*clips, clips[0][: 400 + 160 * (frames - 1 - frames % 2)]]  # an odd frame count


def test_the_filters_and_window_are_transformers(speech):
    extractor = SeamlessM4TFeatureExtractor()
    np.testing.assert_allclose(kaldi_mel_weights(), extractor.mel_filters, rtol=0, atol=1e-12)
    np.testing.assert_allclose(povey_window(), extractor.window, rtol=0, atol=1e-12)


def test_log_mel_frames_equal_transformers_on_speech(speech):
    extractor = SeamlessM4TFeatureExtractor()
    for clip in speech:
        expected = extractor._extract_fbank_features(clip).astype(np.float32)
        got = kaldi_log_mel_numpy(clip)
        assert got.shape == expected.shape == (1 + (len(clip) - 400) // 160, 80)
        assert np.abs(got - expected).max() <= TOLERANCE


def test_stacked_features_equal_the_extractors_real_units_in_a_padded_batch(speech):
    batch = SeamlessM4TFeatureExtractor()(speech, sampling_rate=16000, return_tensors="np")
    assert {(1 + (len(c) - 400) // 160) % 2 for c in speech} == {0, 1}  # even and odd frame counts
    for row, clip in enumerate(speech):
        units = int(batch["attention_mask"][row].sum())
        got = stacked_fbank_numpy(clip)
        assert got.shape == (units, 160) and got.dtype == np.float32
        assert np.abs(got - batch["input_features"][row, :units]).max() <= TOLERANCE
        np.testing.assert_array_equal(FRONT_ENDS["stacked_fbank"].normalized(clip, 16000, 80), got)
    raw = FRONT_ENDS["stacked_fbank"].raw(speech[0], 16000, 80)
    np.testing.assert_array_equal(raw[:, :80], kaldi_log_mel_numpy(speech[0])[0:-1:2][: len(raw)])


def test_short_clips_and_other_rates():
    assert stacked_fbank_numpy(np.zeros(399, np.float32)).shape == (0, 160)  # shorter than one window
    assert stacked_fbank_numpy(np.full(400, 0.1, np.float32)).shape == (0, 160)  # one frame: no unit
    silence = kaldi_log_mel_numpy(np.zeros(1600, np.float32))
    np.testing.assert_array_equal(silence, np.float32(np.log(1.192092955078125e-07)))  # the mel floor
    with pytest.raises(ValueError, match="needs 16 kHz audio, got 8000"):
        kaldi_log_mel_numpy(np.zeros(1600, np.float32), sr=8000)
    with pytest.raises(ValueError, match=r"expects a waveform of shape \[S\], got \(2, 800\)"):
        kaldi_log_mel_numpy(np.zeros((2, 800), np.float32))
