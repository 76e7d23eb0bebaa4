"""The audio fingerprint (adaptspeech/data/audio_fingerprint.py): a clip written again as PCM16, trimmed by 10 ms at
both ends and at 0.9 of its level is the same audio (correlation above 0.99); the other clips of the same voice and
words are not (below 0.6); a recording shorter than one window or silent has no frames."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import soundfile as sf

from adaptspeech.data import build_synthetic_corpus, load_audio, read_tsv
from adaptspeech.data.audio_fingerprint import BANDS, SAME_AUDIO, WINDOW, fingerprint, similarity

RATE = 16000


@pytest.fixture(scope="module")
def clips(tmp_path_factory) -> list[np.ndarray]:
    """The 20 clips of a one-language synthetic corpus (one voice family, one word list), decoded at 16 kHz."""
    root = tmp_path_factory.mktemp("fingerprint") / "corpus"
    build_synthetic_corpus(root, ["sk"], 20, seed=0, num_workers=1, progress=False)
    names = [n for split in ("train", "dev", "test") for n in read_tsv(root / "sk" / f"{split}.tsv")["path"]]
    return [load_audio(root / "sk" / "clips" / name, RATE) for name in names]


def test_a_re_encoded_trimmed_quieter_copy_is_the_same_audio_and_other_clips_are_not(clips, tmp_path):
    for index, wave in enumerate(clips[:4]):
        path = tmp_path / f"copy{index}.wav"
        sf.write(path, 0.9 * wave[RATE // 100 : -RATE // 100], RATE, subtype="PCM_16")
        copy = load_audio(path, RATE)
        assert similarity(fingerprint(wave), fingerprint(copy)) > 0.99
        assert similarity(fingerprint(wave), fingerprint(copy[RATE // 5 :])) > 0.99  # 0.2 s more cut
    others = [similarity(fingerprint(a), fingerprint(b)) for a, b in itertools.combinations(clips, 2)]
    assert len(others) == 190 and max(others) < 0.6 < SAME_AUDIO


def test_short_or_silent_recordings_have_no_frames():
    assert fingerprint(np.zeros(RATE, np.float32)).shape == (0, BANDS)
    assert fingerprint(np.ones(WINDOW - 1, np.float32)).shape == (0, BANDS)
    assert similarity(fingerprint(np.zeros(RATE, np.float32)), np.ones((50, BANDS), np.float32)) == 0.0
