"""Untranscribed pools (adaptspeech/data/pools.py, pool_segments.py, pool_overlap.py): a folder of audio files with a
long recording cut at its pauses and bad files skipped per reason; Common Voice's other.tsv with the synthetic
corpus's unlabelled clips (new sentences of training words, training voices, their sentences held aside); a pool
sharing a clip or a sentence with dev / test refused, naming it."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
from helpers.cli import one_error_line, run_main
from helpers.files import folder_bytes

from adaptspeech.data import build_synthetic_corpus, load_audio, normalize_text, read_tsv
from adaptspeech.data.feature_types.fbank import FbankFeatures
from adaptspeech.data.pool_overlap import held_out
from adaptspeech.data.pool_segments import SegmentSettings, utterance_segments
from adaptspeech.data.pools import (
    feature_extractor_for,
    load_pool,
    pool_fingerprint,
    prepare_audio_folder,
    prepare_common_voice_other,
)
from adaptspeech.data.synthetic import UNLABELLED_SENTENCES, SyntheticConfig, load_word_list, plan_language

RATE = 16000
PAUSE_S = 0.6


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> tuple[Path, dict]:
    """sk: 20 labelled clips (16 train, 2 dev, 2 test) and 8 unlabelled ones, 16 kHz."""
    out = tmp_path_factory.mktemp("pool_corpus") / "corpus"
    summary = build_synthetic_corpus(out, ["sk"], 20, seed=0, num_workers=1, progress=False, unlabelled_clips=8)
    return out, summary


def _clips(root: Path, split: str) -> list[Path]:
    return [root / "sk" / "clips" / name for name in read_tsv(root / "sk" / f"{split}.tsv")["path"]]


@pytest.fixture(scope="module")
def audio_folder(corpus, tmp_path_factory) -> tuple[Path, np.ndarray, list[tuple[int, int]]]:
    """A folder holding one 20-s recording (train clips joined by 0.6-s pauses of low noise), in a subfolder, and
    one of each bad kind; returns the folder, the recording and where its clips lie."""
    root, _ = corpus
    folder = tmp_path_factory.mktemp("audio_folder")
    rng = np.random.default_rng(0)
    pieces, spans, at = [], [], 0
    for path in _clips(root, "train"):
        wave = load_audio(path, RATE)
        pause = (rng.standard_normal(int(PAUSE_S * RATE)) * 1e-4).astype(np.float32)
        pieces += [wave, pause]
        spans.append((at, at + len(wave)))
        at += len(wave) + len(pause)
        if at > 20 * RATE:
            break
    recording = np.concatenate(pieces)
    (folder / "talks" / "day1").mkdir(parents=True)
    sf.write(folder / "talks" / "day1" / "long.flac", recording, RATE)
    (folder / "broken.wav").write_bytes(b"RIFF not really a wave file" * 10)
    (folder / "empty.mp3").write_bytes(b"")
    sf.write(folder / "zeros.wav", np.zeros(RATE, np.float32), RATE)
    sf.write(folder / "blip.ogg", (rng.standard_normal(RATE // 5) * 0.1).astype(np.float32), RATE)
    (folder / "notes.txt").write_text("not audio")
    return folder, recording, spans


def test_a_long_recording_is_cut_at_its_pauses(audio_folder):
    _, recording, spans = audio_folder
    settings = SegmentSettings(max_segment_s=6.0, min_segment_s=0.5, merge_gap_s=0.0)
    segments = utterance_segments(recording, settings)
    assert len(segments) == len(spans)  # each clip is one segment: every cut lies in a pause
    for (first, last), (start, end) in zip(segments, spans, strict=True):
        assert abs(first - start) <= 0.15 * RATE and abs(last - end) <= 0.15 * RATE  # frame grid + soft edges
    merged = utterance_segments(recording, SegmentSettings(max_segment_s=6.0, min_segment_s=0.5, merge_gap_s=1.0))
    assert len(merged) < len(segments) and all(b - a <= 6.0 * RATE for a, b in merged)
    assert utterance_segments(recording[: 5 * RATE], settings) == [(0, 5 * RATE)]  # short: the whole recording
    assert utterance_segments(recording[: RATE // 4], settings) == []


def test_audio_folder_pool_keeps_sources_and_counts_bad_files(audio_folder, tmp_path):
    folder, _, _ = audio_folder
    extractor = feature_extractor_for("fbank")
    pool = prepare_audio_folder(folder, "sk", tmp_path / "pool", extractor, progress=False,
                                segments=SegmentSettings(max_segment_s=6.0))
    assert pool.summary["files"] == 5 and pool.summary["files_used"] == 1 and pool.summary["files_split"] == 1
    assert pool.report.counts == {"unreadable": 1, "empty": 1, "silent": 1, "too_short": 1}
    rows, loaded = load_pool(tmp_path / "pool")
    assert FbankFeatures.of(loaded) == FbankFeatures.of(extractor)
    assert len(rows) == pool.summary["segments"] >= 3
    assert set(rows["source_file"]) == {str((folder / "talks" / "day1" / "long.flac").absolute())}
    assert all(p.startswith("talks/day1/long.flac@") for p in rows["path"])
    features = FbankFeatures()
    recording = load_audio(folder / "talks" / "day1" / "long.flac", RATE)  # as stored (16-bit FLAC)
    for row in rows.select(range(2)):
        first, last = round(row["start"] * RATE), round(row["end"] * RATE)
        assert row["end"] - row["start"] <= 6.0 and row["duration"] == pytest.approx(row["end"] - row["start"])
        expected = features.extract(recording[first:last])
        np.testing.assert_array_equal(np.asarray(row["input_features"], np.float32), expected)  # the same computation
    report = json.loads((tmp_path / "pool" / "pool_report.json").read_text())
    assert report["skipped"] == pool.report.counts and report["report"]["skipped_total"] == 4


def test_reading_a_pool_leaves_its_fingerprint(audio_folder, tmp_path):
    """``datasets`` writes ``cache-*.arrow`` beside a pool read with ``filter``; a cached result keyed on the pool
    must still find it the same pool, and another pool must not."""
    folder, _, _ = audio_folder
    extractor = feature_extractor_for("fbank")
    prepare_audio_folder(folder, "sk", tmp_path / "pool", extractor, progress=False,
                         segments=SegmentSettings(max_segment_s=6.0))
    before = pool_fingerprint(tmp_path / "pool")
    rows, _ = load_pool(tmp_path / "pool")
    rows.filter(lambda row: row["duration"] > 1.0)
    assert list((tmp_path / "pool" / "dataset").rglob("cache-*.arrow"))
    assert pool_fingerprint(tmp_path / "pool") == before
    prepare_audio_folder(folder, "sk", tmp_path / "other", extractor, progress=False,
                         segments=SegmentSettings(max_segment_s=4.0))
    assert pool_fingerprint(tmp_path / "other") != before


def test_an_earlier_pool_is_kept_unless_overwrite(audio_folder, tmp_path, capsys):
    folder, _, _ = audio_folder
    out = tmp_path / "pool"
    argv = ["prepare", "audio-folder", "--root", folder, "--language", "sk", "--out", out, "--feature-type", "fbank",
            "--no-progress"]
    assert run_main([*argv, "--max-segment", "6"], capsys)[0] == 0
    before = folder_bytes(out)
    code, _, err = run_main(argv, capsys)
    assert code == 1 and one_error_line(err) == (
        f"adaptspeech: error: --out {out} already holds an earlier adaptspeech prepare (pool) output "
        "(pool_config.json): pass --overwrite to replace it, or choose another --out")
    assert folder_bytes(out) == before
    assert run_main([*argv, "--overwrite"], capsys)[0] == 0
    assert json.loads((out / "pool_report.json").read_text())["segments_settings"]["max_segment_s"] == 12.0


def test_a_pool_of_bad_files_only_is_one_line(audio_folder, tmp_path, capsys):
    folder, _, _ = audio_folder
    bad = tmp_path / "bad"
    bad.mkdir()
    for name in ("broken.wav", "empty.mp3", "zeros.wav"):
        shutil.copy(folder / name, bad / name)
    code, _, err = run_main(["prepare", "audio-folder", "--root", bad, "--language", "sk", "--out", tmp_path / "p",
                             "--no-progress"], capsys)
    line = one_error_line(err)
    assert code == 1 and "all 3 files skipped (empty=1, silent=1, unreadable=1)" in line
    assert not (tmp_path / "p").exists()


def test_unlabelled_synthetic_clips_are_new_sentences_of_training_words_and_voices(corpus):
    root, summary = corpus
    assert summary["unlabelled_clips"] == {"sk": 8}
    other = read_tsv(root / "sk" / "other.tsv")
    held = read_tsv(root / "sk" / UNLABELLED_SENTENCES)
    assert len(other["path"]) == 8 and set(other["sentence"]) == {""}  # the pool's TSV says nothing
    assert held["path"] == other["path"] and all(held["sentence"])
    assert not set(other["path"]) & set(read_tsv(root / "sk" / "validated.tsv")["path"])
    assert set(other["client_id"]) <= set(summary["train_voices"])
    labelled = {normalize_text(s, "sk") for split in ("train", "dev", "test")
                for s in read_tsv(root / "sk" / f"{split}.tsv")["sentence"]}
    pool_sentences = [normalize_text(s, "sk") for s in held["sentence"]]
    assert not set(pool_sentences) & labelled
    config = SyntheticConfig(clips_per_language=20)
    test_words = {w for s in read_tsv(root / "sk" / "test.tsv")["sentence"] for w in normalize_text(s, "sk").split()}
    words = set(load_word_list("sk", config)[0])
    assert {w for s in pool_sentences for w in s.split()} <= words - test_words
    # their number leaves the labelled plan as it was
    assert [c for c in plan_language("sk", config, 8) if c.split != "other"] == plan_language("sk", config)


def test_common_voice_other_pool_drops_the_sentences(corpus, tmp_path):
    root, _ = corpus
    pool = prepare_common_voice_other(root, "sk", tmp_path / "pool", feature_extractor_for("fbank"), progress=False,
                                      held=held_out(root, "sk"))
    rows, _ = load_pool(tmp_path / "pool")
    assert len(rows) == 8 and set(rows["text"]) == {""} and set(rows["sentence"]) == {""}
    assert pool.summary["files_split"] == 0
    assert sorted(rows["path"]) == sorted(read_tsv(root / "sk" / "other.tsv")["path"])


def test_a_pool_sharing_a_test_clip_or_a_dev_sentence_is_refused(corpus, audio_folder, tmp_path, capsys):
    root, _ = corpus
    folder = tmp_path / "folder"
    shutil.copytree(audio_folder[0], folder)
    test_clip = _clips(root, "test")[0]
    shutil.copy(test_clip, folder / "copy_of_something.mp3")
    code, _, err = run_main(["prepare", "audio-folder", "--root", folder, "--language", "sk", "--out", tmp_path / "p",
                             "--held-out", root, "--no-progress"], capsys)
    line = one_error_line(err)
    assert code == 1 and f"copy_of_something.mp3 (same audio as test/{test_clip.name})" in line
    code, out, _ = run_main(["prepare", "audio-folder", "--root", folder, "--language", "sk", "--out", tmp_path / "p",
                             "--held-out", root, "--drop-overlapping", "--no-progress"], capsys)
    assert code == 0 and "held_out_overlap=1" in out
    # a dev sentence in other.tsv (Common Voice keeps the sentences of clips not validated yet)
    release = tmp_path / "release"
    shutil.copytree(root, release)
    tsv = release / "sk" / "other.tsv"
    lines = tsv.read_text(encoding="utf-8").splitlines()
    dev_sentence = read_tsv(release / "sk" / "dev.tsv")["sentence"][0]
    fields = lines[1].split("\t")
    fields[3] = dev_sentence.upper()
    tsv.write_text("\n".join([lines[0], "\t".join(fields), *lines[2:]]) + "\n", encoding="utf-8")
    code, _, err = run_main(["prepare", "common-voice-other", "--root", release, "--language", "sk", "--out",
                             tmp_path / "q", "--feature-type", "fbank", "--no-progress"], capsys)
    line = one_error_line(err)
    assert code == 1 and f"{fields[1]} (a dev/test sentence: {normalize_text(dev_sentence, 'sk')!r})" in line


@pytest.fixture(scope="module")
def prepared_elsewhere(corpus, tmp_path_factory) -> Path:
    """``adaptspeech prepare common-voice --root corpus --out prepared`` run inside the corpus's parent folder (both
    paths relative, as a user types them)."""
    import os

    from adaptspeech.data.prepared_corpus import prepare_corpus

    root, _ = corpus
    work = tmp_path_factory.mktemp("project")
    shutil.copytree(root, work / "corpus")
    here = Path.cwd()
    os.chdir(work)
    try:
        prepare_corpus("corpus", ["sk"], "prepared", feature_type="fbank")
    finally:
        os.chdir(here)
    return work / "prepared"


def test_held_out_of_a_prepared_folder_finds_its_clips_from_any_working_directory(
        corpus, audio_folder, prepared_elsewhere, tmp_path, monkeypatch, capsys):
    root, _ = corpus
    config = json.loads((prepared_elsewhere / "prepare_config.json").read_text())
    assert Path(config["source"]).is_absolute() and Path(config["source"]) == prepared_elsewhere.parent / "corpus"
    folder = tmp_path / "folder"
    shutil.copytree(audio_folder[0], folder)
    test_clip = _clips(root, "test")[0]
    shutil.copy(test_clip, folder / "copy_of_something.mp3")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    assert len(held_out(prepared_elsewhere, "sk").hashes) == 4  # 2 dev + 2 test clips
    code, _, err = run_main(["prepare", "audio-folder", "--root", folder, "--language", "sk", "--out", tmp_path / "p",
                             "--held-out", prepared_elsewhere, "--no-progress"], capsys)
    assert code == 1 and f"copy_of_something.mp3 (same audio as test/{test_clip.name})" in one_error_line(err)


def test_a_relative_corpus_of_an_older_prepare_is_found_beside_the_prepared_folder_or_refused(
        prepared_elsewhere, tmp_path, monkeypatch):
    from adaptspeech.data.prepared_data import prepared_corpus_source

    old = tmp_path / "project"
    shutil.copytree(prepared_elsewhere.parent, old, symlinks=True)
    config = json.loads((old / "prepared" / "prepare_config.json").read_text())
    config.pop("source_is_folder", None)
    (old / "prepared" / "prepare_config.json").write_text(json.dumps({**config, "source": "corpus"}))
    monkeypatch.chdir(tmp_path)
    assert prepared_corpus_source(old / "prepared") == (old / "corpus").absolute()
    assert len(held_out(old / "prepared", "sk").hashes) == 4  # 2 dev + 2 test clips
    shutil.rmtree(old / "corpus")
    with pytest.raises(FileNotFoundError, match=r"prepare_config\.json.*'corpus'.*relative"):
        held_out(old / "prepared", "sk")


def test_a_re_encoded_trimmed_quieter_copy_of_a_test_clip_is_refused(corpus, audio_folder, tmp_path, capsys):
    """Not the same bytes: the SHA-256 of the file does not find it; its decoded audio does."""
    root, _ = corpus
    folder = tmp_path / "folder"
    shutil.copytree(audio_folder[0], folder)
    test_clip = _clips(root, "test")[1]
    wave = load_audio(test_clip, RATE)
    sf.write(folder / "from_the_radio.wav", 0.9 * wave[RATE // 100 : -RATE // 100], RATE, subtype="PCM_16")
    command = ["prepare", "audio-folder", "--root", folder, "--language", "sk", "--out", tmp_path / "p",
               "--held-out", root, "--no-progress"]
    code, _, err = run_main(command, capsys)
    line = one_error_line(err)
    assert code == 1 and f"from_the_radio.wav (the audio of test/{test_clip.name} re-encoded: correlation" in line
    assert not (tmp_path / "p").exists()
    code, out, _ = run_main([*command, "--drop-overlapping"], capsys)
    rows, _ = load_pool(tmp_path / "p")
    assert code == 0 and "held_out_overlap=1" in out and not any("from_the_radio" in p for p in rows["path"])
