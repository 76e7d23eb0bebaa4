"""The synthetic corpus: Common Voice layout, held-out voices and words, determinism, resuming, word lists."""

from __future__ import annotations

import json
import shutil
import unicodedata

import numpy as np
import pytest
import soundfile as sf

from adaptspeech.data import CV_COLUMNS, DEFAULT_LANGUAGES, build_synthetic_corpus, normalize_text, read_tsv
from adaptspeech.data.espeak import EspeakSynthesizer
from adaptspeech.data.synthetic import (
    SyntheticConfig,
    load_word_list,
    plan_language,
    split_word_list,
    supported_languages,
)


def test_at_least_eight_default_languages_are_supported():
    assert len(DEFAULT_LANGUAGES) >= 8
    assert set(DEFAULT_LANGUAGES) <= set(supported_languages())
    assert "hr" not in supported_languages()  # wordfreq has no Croatian list


def test_common_voice_layout(synthetic_corpus):
    root, summary = synthetic_corpus
    assert summary["clips_total"] == summary["clips_written"] == 40 and summary["clips_kept"] == 0
    assert summary["clips_per_second"] > 0
    for lang in ("ro", "cs"):
        lang_dir = root / lang
        for split in ("train", "dev", "test", "validated", "other", "invalidated"):
            header = (lang_dir / f"{split}.tsv").read_text(encoding="utf-8").splitlines()[0].split("\t")
            assert header == list(CV_COLUMNS)
        splits = {s: read_tsv(lang_dir / f"{s}.tsv") for s in ("train", "dev", "test", "validated")}
        assert {s: len(splits[s]["path"]) for s in ("train", "dev", "test")} == {"train": 16, "dev": 2, "test": 2}
        assert sorted(splits["validated"]["path"]) == sorted(p.name for p in (lang_dir / "clips").iterdir())
        assert set(splits["train"]["locale"]) == {lang}
        info = sf.info(str(lang_dir / "clips" / splits["train"]["path"][0]))
        assert (info.format, info.samplerate, info.channels) == ("MP3", 22050, 1)


def test_test_voices_and_words_are_held_out(synthetic_corpus):
    root, summary = synthetic_corpus
    assert not set(summary["test_voices"]) & set(summary["train_voices"])
    for lang in ("ro", "cs"):
        seen_voices, seen_words = set(), set()
        for split in ("train", "dev"):
            rows = read_tsv(root / lang / f"{split}.tsv")
            seen_voices |= set(rows["client_id"])
            seen_words |= {w for s in rows["sentence"] for w in normalize_text(s, lang).split()}
        test = read_tsv(root / lang / "test.tsv")
        assert set(test["client_id"]) <= set(summary["test_voices"])
        assert not set(test["client_id"]) & seen_voices
        test_words = {w for s in test["sentence"] for w in normalize_text(s, lang).split()}
        assert test_words and not test_words & seen_words


def test_held_out_slice_spans_the_list_below_the_top():
    mask = split_word_list(1000, 0.1, np.random.default_rng(0), min_rank=100)
    assert not mask[:100].any() and mask.sum() == 90
    assert all(mask[start : start + 10].sum() == 1 for start in range(100, 1000, 10))


def test_plans_are_deterministic_and_seeded():
    config = SyntheticConfig(clips_per_language=30, top_words=2000)
    assert plan_language("sl", config) == plan_language("sl", config)
    other = plan_language("sl", SyntheticConfig(clips_per_language=30, top_words=2000, seed=1))
    assert [c.sentence for c in other] != [c.sentence for c in plan_language("sl", config)]


def test_word_lists_are_clean():
    config = SyntheticConfig(top_words=3000)
    for lang in ("ro", "de"):
        words, freqs = load_word_list(lang, config)
        assert len(words) == len(freqs) > 2500 and np.all(np.diff(freqs) <= 0)
        assert all(normalize_text(w, lang) == w for w in words)
        assert all(unicodedata.category(c)[0] in "LM" for w in words for c in w)
        chars = {c for w in words for c in w}
        assert not chars & set("абвгдежзиклмнопрстуфхцчшщыэюяç")  # stray Cyrillic and foreign letters dropped
    assert {"ș", "ț", "ă", "â", "î"} <= {c for w in load_word_list("ro", config)[0] for c in w}


def test_same_corpus_for_any_number_of_workers(tmp_path):
    one = build_synthetic_corpus(tmp_path / "one", ["sl"], 6, seed=5, num_workers=1, progress=False, top_words=2000)
    two = build_synthetic_corpus(tmp_path / "two", ["sl"], 6, seed=5, num_workers=2, progress=False, top_words=2000)
    assert one["clips_written"] == two["clips_written"] == 6
    for split in ("train", "dev", "test", "clip_durations"):
        assert (tmp_path / "one" / "sl" / f"{split}.tsv").read_bytes() == (
            tmp_path / "two" / "sl" / f"{split}.tsv"
        ).read_bytes()
    for clip in (tmp_path / "one" / "sl" / "clips").iterdir():
        assert clip.read_bytes() == (tmp_path / "two" / "sl" / "clips" / clip.name).read_bytes()


def test_resuming_keeps_existing_clips(synthetic_corpus, tmp_path):
    copy = tmp_path / "corpus"
    shutil.copytree(synthetic_corpus[0], copy)
    clips = sorted((copy / "ro" / "clips").iterdir())
    removed = clips[3]
    original = removed.read_bytes()
    removed.unlink()
    (clips[4].with_name(clips[4].name + ".part")).write_bytes(b"half-written")  # an interrupted write
    stamps = {p.name: p.stat().st_mtime_ns for p in clips if p != removed}
    summary = build_synthetic_corpus(copy, ["ro", "cs"], 20, seed=0, num_workers=1, progress=False, sample_rate=None)
    assert (summary["clips_written"], summary["clips_kept"]) == (1, 39)
    assert removed.read_bytes() == original  # re-rendered identically
    assert {p.name: p.stat().st_mtime_ns for p in clips if p != removed} == stamps
    assert (copy / "ro" / "train.tsv").read_bytes() == (synthetic_corpus[0] / "ro" / "train.tsv").read_bytes()
    assert not list((copy / "ro" / "clips").glob("*.part"))


def test_resuming_with_other_settings_is_refused_but_languages_can_be_added(synthetic_corpus, tmp_path):
    copy = tmp_path / "corpus"
    shutil.copytree(synthetic_corpus[0], copy, ignore=shutil.ignore_patterns("clips"))
    with pytest.raises(ValueError, match=r"built with other settings \(seed\)"):
        build_synthetic_corpus(copy, ["ro"], 20, seed=1, num_workers=1, progress=False, sample_rate=None)
    build_synthetic_corpus(copy, ["sl"], 20, seed=0, num_workers=1, progress=False, sample_rate=None)
    assert json.loads((copy / "synthetic_config.json").read_text())["languages"] == ["ro", "cs", "sl"]


def test_bad_settings_list_the_allowed_values(tmp_path):
    with pytest.raises(ValueError, match=r"no wordfreq list or espeak-ng voice for hr; allowed values: .*\bro\b"):
        build_synthetic_corpus(tmp_path, ["hr"], 10, progress=False)
    with pytest.raises(ValueError, match="unknown espeak-ng variant"):
        SyntheticConfig(voices=("m1", "nobody"))
    with pytest.raises(TypeError, match="unknown setting"):
        build_synthetic_corpus(tmp_path, ["ro"], 10, progress=False, speed=3)


def test_rate_changes_the_speech_and_unknown_voices_are_refused():
    engine = EspeakSynthesizer()
    slow = engine.synthesize("Bună ziua, ce mai faci?", "ro+m3", rate=130)
    fast = engine.synthesize("Bună ziua, ce mai faci?", "ro+m3", rate=200)
    assert slow.dtype == np.int16 and engine.sample_rate == 22050
    assert len(slow) > 1.2 * len(fast)
    with pytest.raises(ValueError, match="no voice"):
        engine.synthesize("x", "zz+m3")


def test_noise_is_added_at_the_requested_snr(tmp_path):
    settings = dict(progress=False, num_workers=1, top_words=2000, sample_rate=16000)
    build_synthetic_corpus(tmp_path / "clean", ["ro"], 3, **settings)
    build_synthetic_corpus(tmp_path / "noisy", ["ro"], 3, noise_snr_db=(10.0, 10.0), **settings)
    clean_rows, noisy_rows = (read_tsv(tmp_path / k / "ro" / "validated.tsv") for k in ("clean", "noisy"))
    assert clean_rows == noisy_rows  # noise leaves the rest of the plan alone
    for name in clean_rows["path"]:
        clean, _ = sf.read(tmp_path / "clean" / "ro" / "clips" / name, dtype="float64")
        noisy, _ = sf.read(tmp_path / "noisy" / "ro" / "clips" / name, dtype="float64")
        # the noisy clip was scaled to the same peak before the noise: the difference is the noise
        snr = 10 * np.log10(np.mean(clean**2) / np.mean((noisy - clean) ** 2))
        assert snr == pytest.approx(10.0, abs=1.5)
