"""Speed perturbation (adaptspeech/data/speed_perturb.py) and the labelled / pseudo-labelled mix
(adaptspeech/data/source_mix.py): a tone played 1.1 times faster is 1.1 times higher and shorter, a prepared row is read
again from its corpus (factor 1: the features as prepared) and a pool row from its source file and offsets, the
factors are drawn per row and epoch, a factor leaving too few frames falls back to 1; every batch of the mix holds its
share of pseudo-labelled rows and an epoch reads every labelled row."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
import soundfile as sf
from datasets import Dataset

from adaptspeech.data.feature_types.fbank import FbankFeatures
from adaptspeech.data.source_mix import SourceMixSampler, mix_sources
from adaptspeech.data.speed_perturb import SpeedPerturbedRows, WaveformReader, check_factors, speed_perturb

RATE = 16000


def _dominant_hz(wave: np.ndarray) -> float:
    spectrum = np.abs(np.fft.rfft(wave * np.hanning(len(wave))))
    return float(np.argmax(spectrum) * RATE / len(wave))


def test_faster_is_shorter_and_higher():
    t = np.arange(RATE) / RATE
    tone = np.sin(2 * np.pi * 440.0 * t).astype(np.float32)
    for factor in (0.9, 1.1):
        out = speed_perturb(tone, factor)
        assert abs(len(out) - len(tone) / factor) <= 1
        assert _dominant_hz(out) == pytest.approx(440.0 * factor, abs=2.0)  # FFT bin width 1 Hz, window spread
    assert speed_perturb(tone, 1.0) is not None and np.array_equal(speed_perturb(tone, 1.0), tone)
    with pytest.raises(ValueError, match=r"data\.speed_perturb"):
        check_factors([0.9, 3.0])


@pytest.fixture(scope="module")
def rows(tmp_path_factory):
    """A one-clip corpus in the Common Voice layout (its prepared row, as ``prepare`` stores it) and a pool row cut
    from the middle of a longer file."""
    root = tmp_path_factory.mktemp("speed")
    rng = np.random.default_rng(0)
    clip = (0.3 * np.sin(2 * np.pi * 300 * np.arange(2 * RATE) / RATE) + 0.01 * rng.standard_normal(2 * RATE))
    (root / "corpus" / "ro" / "clips").mkdir(parents=True)
    sf.write(root / "corpus" / "ro" / "clips" / "a.wav", clip.astype(np.float32), RATE, subtype="FLOAT")
    prepared = root / "prepared"
    prepared.mkdir()
    (prepared / "prepare_config.json").write_text(json.dumps({"source": str(root / "corpus")}))
    features = FbankFeatures()
    long = np.concatenate([clip, clip]).astype(np.float32)
    sf.write(root / "long.wav", long, RATE, subtype="FLOAT")
    labelled = {"input_features": features.extract(clip.astype(np.float32)), "labels": [5, 6, 7], "language": "ro",
                "path": "a.wav", "input_length": 198}
    pool = {"input_features": features.extract(long[RATE : 3 * RATE]), "labels": [5, 6], "language": "ro",
            "path": "long.wav@1.00-3.00", "source_file": str(root / "long.wav"), "start": 1.0, "end": 3.0,
            "input_length": 198}
    return prepared, labelled, pool, long


def test_rows_are_read_again_from_their_corpus_or_source(rows):
    prepared, labelled, pool, long = rows
    reader = WaveformReader.of_prepared(prepared)
    features = FbankFeatures()
    np.testing.assert_array_equal(features.extract(reader(labelled)), labelled["input_features"])  # as prepared
    np.testing.assert_array_equal(reader(pool), long[RATE : 3 * RATE])
    assert reader(labelled) is reader(labelled)  # decoded once
    with pytest.raises(FileNotFoundError, match="its audio is not in the row"):
        WaveformReader(None)(labelled)


def test_factors_are_drawn_per_row_and_epoch(rows):
    prepared, labelled, _, _ = rows
    data = Dataset.from_list([labelled, {**labelled, "path": "a.wav"}] * 10)
    perturbed = SpeedPerturbedRows(data, [0.9, 1.0, 1.1], FbankFeatures(), WaveformReader.of_prepared(prepared),
                                   encoder_stride=640, seed=3)
    first = [perturbed.factor(i) for i in range(20)]
    assert first == [perturbed.factor(i) for i in range(20)] and set(first) == {0.9, 1.0, 1.1}
    perturbed.set_epoch(1)
    assert [perturbed.factor(i) for i in range(20)] != first
    for i in range(20):
        row, factor = perturbed[i], perturbed.factor(i)
        frames = len(row["input_features"])
        assert frames == pytest.approx(198 / factor, abs=2) and row["labels"] == [5, 6, 7]
    assert sum(perturbed.counts.values()) == 20 and perturbed["path"][0] == "a.wav"


def test_a_factor_leaving_too_few_frames_falls_back(rows):
    prepared, labelled, _, _ = rows
    crowded = {**labelled, "labels": list(range(5, 54))}  # 49 labels: 2 s at 1.1 gives 45 encoder frames
    perturbed = SpeedPerturbedRows(Dataset.from_list([crowded] * 8), [1.1], FbankFeatures(),
                                   WaveformReader.of_prepared(prepared), encoder_stride=640)
    row = perturbed[0]
    np.testing.assert_array_equal(np.asarray(row["input_features"]), np.asarray(crowded["input_features"]))
    assert perturbed.counts[1.0] == 1


def test_every_batch_holds_its_share_and_an_epoch_reads_every_row():
    sampler = SourceMixSampler(num_labelled=10, num_pseudo=50, share=0.75, batch_size=8, seed=0)
    order = list(sampler)
    assert len(order) == len(sampler) == 8 * 9  # 50 pseudo rows at 6 a batch: 9 batches
    for start in range(0, len(order), 8):
        assert sum(i >= 10 for i in order[start : start + 8]) == 6
    assert set(i for i in order if i < 10) == set(range(10)) and set(i for i in order if i >= 10) == set(range(10, 60))
    sampler.set_epoch(1)
    assert list(sampler) != order
    with pytest.raises(ValueError, match="in \\(0, 1\\)"):
        SourceMixSampler(10, 10, 1.0, 8)


def test_mixed_rows_keep_the_labelled_types(rows):
    _, labelled, pool, _ = rows
    mixed = mix_sources(Dataset.from_list([labelled] * 3), Dataset.from_list([pool] * 2))
    assert len(mixed) == 5 and mixed[0]["source_file"] == "" and mixed[4]["source_file"] == pool["source_file"]
    assert mixed.features["labels"] == Dataset.from_list([labelled]).features["labels"]


def test_a_prepared_row_is_read_again_from_any_working_directory(rows, tmp_path, monkeypatch):
    """``prepare_config.json`` written with the corpus relative to where ``prepare`` ran (older versions) still
    leads to the corpus beside the prepared folder, wherever training runs."""
    prepared, labelled, _, _ = rows
    old = tmp_path / "old"
    shutil.copytree(prepared.parent / "corpus", old / "corpus")
    (old / "prepared").mkdir()
    (old / "prepared" / "prepare_config.json").write_text(json.dumps({"source": "corpus"}))
    monkeypatch.chdir(tmp_path)
    wave = WaveformReader.of_prepared(old / "prepared")(labelled)
    assert len(wave) == 2 * RATE
