"""The Common Voice loader and the preparation step: columns, 16 kHz audio, durations, labels, bad rows."""

from __future__ import annotations

import shutil

import numpy as np
import pytest
import soundfile as sf
from datasets import Audio, Dataset

from adaptspeech.data import (
    CV_COLUMNS,
    SkipReport,
    build_processor,
    build_vocab,
    load_audio,
    load_common_voice,
    normalize_text,
    num_frames,
    prepare_dataset,
    read_tsv,
)
from adaptspeech.data.common_voice import OUTPUT_COLUMNS, read_clip_durations, standardize_columns
from adaptspeech.data.feature_types import normalize_utterance
from adaptspeech.data.prepared_corpus import prepare_corpus
from adaptspeech.data.subsets import speakers


def test_loader_reads_the_synthetic_corpus(synthetic_corpus, loaded_corpus):
    root, summary = synthetic_corpus
    assert list(loaded_corpus) == ["train", "dev", "test"]
    for split, part in loaded_corpus.items():
        assert part.column_names == list(OUTPUT_COLUMNS)
        assert isinstance(part.features["audio"], Audio) and part.features["audio"].decode is False
        for lang in ("ro", "cs"):
            assert part["language"].count(lang) == summary["splits"][lang][split]
    row = loaded_corpus["train"][0]
    assert row["audio"]["path"] == str(root / "ro" / "clips" / row["path"])
    assert row["client_id"] in summary["train_voices"]
    assert row["locale"] == "ro"


def test_prepared_audio_is_16k_with_the_written_durations(synthetic_corpus, prepared_corpus):
    root, _ = synthetic_corpus
    prepared, report = prepared_corpus
    assert report.skipped == [] and report.kept == {"train": 32, "dev": 4, "test": 4}
    for split in ("train", "test"):
        part = prepared[split]
        for lang in ("ro", "cs"):
            durations = read_clip_durations(root / lang)  # what the builder wrote, at 22050 Hz, in ms
            for row in part.filter(lambda x, lang=lang: x == lang, input_columns="language"):
                samples = len(row["input_values"])
                assert row["input_length"] == samples
                assert abs(samples / 16000 - durations[row["path"]]) <= 0.0011
                assert row["duration"] == pytest.approx(samples / 16000)


def test_prepared_inputs_are_the_normalised_clip_and_labels_the_text(synthetic_corpus, prepared_corpus, processor):
    root, _ = synthetic_corpus
    row = prepared_corpus[0]["dev"][0]
    wave = load_audio(root / row["language"] / "clips" / row["path"], 16000)
    np.testing.assert_allclose(row["input_values"], normalize_utterance(wave), atol=1e-5)
    assert row["text"] == normalize_text(row["sentence"], row["language"])
    assert processor.tokenizer.decode(row["labels"], group_tokens=False) == row["text"]
    fe_values = processor.feature_extractor(wave, sampling_rate=16000).input_values[0]
    np.testing.assert_allclose(row["input_values"], fe_values, atol=1e-4)  # what transformers would compute


def test_fbank_preparation_gives_normalised_log_mels(loaded_corpus, tmp_path):
    vocab = build_vocab([normalize_text(s, "ro") for s in loaded_corpus["train"]["sentence"]])
    processor = build_processor(vocab, tmp_path, feature_type="fbank")
    prepared, report = prepare_dataset(loaded_corpus["dev"], processor)
    assert report.skipped == []
    row = prepared.with_format("numpy")[0]
    feats = row["input_features"]
    assert feats.shape == (num_frames(round(row["duration"] * 16000)), 80) and row["input_length"] == feats.shape[0]
    np.testing.assert_allclose(feats.mean(axis=0), 0.0, atol=1e-4)
    np.testing.assert_allclose(feats.std(axis=0), 1.0, atol=1e-2)


def test_per_language_vocabularies_tokenise_each_row_with_its_language(loaded_corpus, tmp_path):
    train = loaded_corpus["train"]
    texts = {lang: [normalize_text(s, lang) for s, x in zip(train["sentence"], train["language"]) if x == lang]
             for lang in ("ro", "cs")}  # fmt: skip
    vocab = build_vocab(texts, per_language=True)
    processor = build_processor(vocab, tmp_path)
    prepared, _ = prepare_dataset(loaded_corpus["dev"], processor)
    for row in prepared:
        lang_vocab = vocab[row["language"]]
        assert row["labels"] == [lang_vocab.get("|" if c == " " else c, 1) for c in row["text"]]
    with pytest.raises(ValueError, match="have no vocabulary in the processor; allowed values: ro"):
        prepare_dataset(loaded_corpus["dev"], build_processor({"ro": vocab["ro"]}, tmp_path / "ro_only"))


def test_rows_too_short_for_their_transcript_are_skipped(loaded_corpus, processor):
    prepared, report = prepare_dataset(loaded_corpus["dev"], processor, encoder_stride=16000)  # 1 frame / s
    assert len(prepared) == 0
    assert report.counts == {"too_short": 4}
    assert "encoder frames for" in report.skipped[0].detail


def _write_tsv(path, header, rows):
    path.write_text("\n".join("\t".join(r) for r in [header, *rows]) + "\n", encoding="utf-8")


@pytest.fixture
def bad_corpus(synthetic_corpus, tmp_path):
    """A release folder ``cv-corpus-0.0/ro`` with good clips and exactly five bad rows (one of them good)."""
    source = synthetic_corpus[0] / "ro" / "clips"
    lang_dir = tmp_path / "cv-corpus-0.0" / "ro"
    clips = lang_dir / "clips"
    clips.mkdir(parents=True)
    good = sorted(p.name for p in source.iterdir())[:3]
    for name in good:
        shutil.copy(source / name, clips / name)
    shutil.copy(source / sorted(p.name for p in source.iterdir())[3], clips / "empty_sentence.mp3")
    (clips / "corrupt.mp3").write_bytes(b"ID3 but not really an mp3 file " * 100)
    (clips / "zero.mp3").write_bytes(b"")
    t = np.arange(48000) / 48000  # 1 s of a stereo 48 kHz clip, different tones left and right
    stereo = np.stack([0.4 * np.sin(2 * np.pi * 300 * t), 0.2 * np.sin(2 * np.pi * 500 * t)], axis=1)
    sf.write(clips / "stereo48k.mp3", stereo.astype(np.float32), 48000, format="MP3")
    header = list(CV_COLUMNS)

    def row(path, sentence, client="spk1"):
        values = dict.fromkeys(CV_COLUMNS, "")
        values.update(client_id=client, path=path, sentence=sentence, locale="ro")
        return [values[c] for c in CV_COLUMNS]

    rows = [row(name, f"Propoziția bună {i}a.") for i, name in enumerate(good)]
    rows += [
        row("corrupt.mp3", "Un fișier stricat."),
        row("zero.mp3", "Un fișier gol."),
        row("stereo48k.mp3", "Un fișier stereo.", "spk2"),
        row("gone.mp3", "Un fișier care lipsește."),
        row("empty_sentence.mp3", ""),
    ]
    _write_tsv(lang_dir / "train.tsv", header, rows)
    return tmp_path, good


def test_bad_rows_are_skipped_by_name_and_reason_and_good_rows_kept(bad_corpus, processor, tmp_path):
    root, good = bad_corpus
    data = load_common_voice(root, ["ro"], splits=["train"])  # root holds cv-corpus-0.0/ro
    assert len(data["train"]) == 8
    prepared, report = prepare_dataset(data, processor, report_path=tmp_path / "report.json")
    assert report.reasons_by_path() == {
        "corrupt.mp3": "unreadable",
        "zero.mp3": "empty",
        "gone.mp3": "missing",
        "empty_sentence.mp3": "empty_sentence",
    }
    assert report.counts == {"unreadable": 1, "empty": 1, "missing": 1, "empty_sentence": 1}
    assert all(s.language == "ro" and s.split == "train" for s in report.skipped)
    kept = prepared["train"]
    assert kept["path"] == [*good, "stereo48k.mp3"]
    clips = root / "cv-corpus-0.0" / "ro" / "clips"
    for row in kept:
        wave = load_audio(clips / row["path"], 16000)
        np.testing.assert_allclose(row["input_values"], normalize_utterance(wave), atol=1e-5)
        assert row["text"] == normalize_text(row["sentence"], "ro")
    stereo = kept.filter(lambda p: p == "stereo48k.mp3", input_columns="path")[0]
    assert abs(len(stereo["input_values"]) - 16000) <= 16  # downmixed and resampled, not skipped
    assert SkipReport.from_json(tmp_path / "report.json").reasons_by_path() == report.reasons_by_path()


def test_older_column_sets_are_tolerated(tmp_path):
    lang_dir = tmp_path / "en"
    (lang_dir / "clips").mkdir(parents=True)
    _write_tsv(
        lang_dir / "train.tsv",
        ["client_id", "path", "sentence", "up_votes", "down_votes", "age", "gender", "accent"],
        [["c1", "common_voice_en_1", "Hello there.", "2", "0", "twenties", "male", "us"]],
    )
    sf.write(lang_dir / "clips" / "common_voice_en_1.mp3", np.zeros(1000, np.float32), 16000, format="MP3")
    data = load_common_voice(tmp_path, "en", splits=["train"])["train"]
    row = data[0]
    assert row["accents"] == "us" and row["sentence_id"] == "" and row["variant"] == ""
    assert row["path"] == "common_voice_en_1.mp3"  # the first releases left out the extension
    assert row["duration"] is None


def test_hub_splits_get_the_same_columns():
    hub_like = Dataset.from_dict(
        {
            "client_id": ["c1"], "path": ["/cache/extracted/ro_train_0/common_voice_ro_1.mp3"],
            "audio": ["/cache/extracted/ro_train_0/common_voice_ro_1.mp3"], "sentence": ["Bună."],
            "up_votes": [2], "down_votes": [0], "age": [""], "gender": [""], "accent": [""], "locale": ["ro"],
            "segment": [""], "variant": [""],
        }
    )  # fmt: skip
    data = standardize_columns(hub_like, "ro")
    assert data.column_names == list(OUTPUT_COLUMNS)
    row = data[0]
    assert row["path"] == "common_voice_ro_1.mp3" and row["language"] == "ro" and row["up_votes"] == "2"
    assert row["audio"] == {"path": "/cache/extracted/ro_train_0/common_voice_ro_1.mp3", "bytes": None}


def test_loader_errors_name_the_problem(synthetic_corpus, tmp_path):
    root = synthetic_corpus[0]
    with pytest.raises(FileNotFoundError, match=r"'xx'.*languages found: cs, ro"):
        load_common_voice(root, ["xx"])
    with pytest.raises(ValueError, match="allowed values: train, dev, test, validated, other, invalidated"):
        load_common_voice(root, ["ro"], splits=["training"])
    shutil.copytree(root / "ro", tmp_path / "ro", ignore=shutil.ignore_patterns("clips", "other.tsv"))
    with pytest.raises(FileNotFoundError, match=r"other\.tsv: no such file \(split 'other' of language 'ro'\)"):
        load_common_voice(tmp_path, ["ro"], splits=["other"])
    with pytest.raises(FileNotFoundError, match="no such folder, and not a Hub dataset id"):
        load_common_voice(tmp_path / "nowhere" / "deep", ["ro"])
    bad = tmp_path / "bad.tsv"
    _write_tsv(bad, ["client_id", "sentence"], [["a", "b"]])
    with pytest.raises(ValueError, match=r"bad\.tsv: no path column"):
        read_tsv(bad)
    _write_tsv(bad, ["path", "sentence"], [["a", "b", "c"]])
    with pytest.raises(ValueError, match=r"bad\.tsv:2: 3 tab-separated fields"):
        read_tsv(bad)


def test_prepare_corpus_cuts_a_training_budget_without_test_speakers(synthetic_corpus, tmp_path):
    result = prepare_corpus(synthetic_corpus[0], ["ro", "cs"], tmp_path, train_subset="0.2min", save_dataset=False)
    train = result.dataset["train"]
    pool = prepare_corpus(synthetic_corpus[0], ["ro", "cs"], tmp_path / "all", save_dataset=False).dataset["train"]
    for lang in ("ro", "cs"):
        durations = [d for d, x in zip(train["duration"], train["language"]) if x == lang]
        longest = max(d for d, x in zip(pool["duration"], pool["language"]) if x == lang)
        assert 12.0 - longest < sum(durations) <= 12.0  # at most the budget, short of it by less than one clip
    assert not speakers(train) & speakers(result.dataset["test"])
    # the synthetic dev split shares the training voices by design, so dev is not excluded by default
    assert speakers(result.dataset["dev"]) <= speakers(load_common_voice(synthetic_corpus[0], ["ro", "cs"])["train"])
    assert result.dataset_dir is None and (tmp_path / "skip_report.json").is_file()
    assert len(result.dataset["dev"]) == len(result.dataset["test"]) == 4
