"""Bad input and faults of the data side: corrupt clips, empty splits, bad language codes, interrupted runs.

Each test builds a tiny Common Voice-layout corpus by hand (tones as clips, so no espeak-ng run is needed) and checks
that ``adaptspeech prepare`` (or the function behind it) ends without a traceback, without a silently wrong result
and without a half-written output.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
from datasets import load_from_disk
from helpers.cli import run_main
from helpers.files import folder_bytes
from transformers import Wav2Vec2Processor

from adaptspeech.cli import main
from adaptspeech.data import BadClipError, SkipReport, load_audio, prepare_corpus
from adaptspeech.data.common_voice import parse_languages
from adaptspeech.data.output_folder import partial_folder

SR = 16000


def tone(seconds: float = 1.0, freq: float = 440.0) -> np.ndarray:
    return (0.3 * np.sin(2 * np.pi * freq * np.arange(int(seconds * SR)) / SR)).astype(np.float32)


def corrupt_mp3(path: Path) -> Path:
    """A real mp3 whose frames after the first 200 bytes are overwritten with zeros."""
    sf.write(path, tone(1.0), SR, format="MP3")
    path.write_bytes(path.read_bytes()[:200] + bytes(3000))
    return path


def truncated(path: Path, seconds: float = 3.0, fmt: str | None = None) -> Path:
    """A clip of ``seconds`` whose file is cut at half its bytes."""
    sf.write(path, tone(seconds), SR, format=fmt)
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    return path


def write_corpus(root: Path, lang: str, splits: dict[str, list[tuple[str, str]]]) -> Path:
    """``root/lang/{split}.tsv`` with ``(clip, sentence)`` rows; clips named ``ok*`` are written as 1 s tones (other
    clips are left to the test)."""
    clips = root / lang / "clips"
    clips.mkdir(parents=True, exist_ok=True)
    for split, rows in splits.items():
        lines = ["client_id\tpath\tsentence"] + [f"{split}{i}\t{clip}\t{text}" for i, (clip, text) in enumerate(rows)]
        (root / lang / f"{split}.tsv").write_text("\n".join(lines) + "\n", encoding="utf-8")
        for clip, _ in rows:
            if clip.startswith("ok") and not (clips / clip).exists():
                sf.write(clips / clip, tone(1.0, 300 + 10 * len(clip)), SR)
    return root


def simple_corpus(root: Path, lang: str = "ro") -> Path:
    return write_corpus(
        root,
        lang,
        {
            "train": [("ok1.wav", "bună ziua"), ("ok2.wav", "ce mai faci"), ("ok3.wav", "mulțumesc")],
            "dev": [("ok4.wav", "bine")],
            "test": [("ok5.wav", "salut")],
        },
    )


def assert_one_line_error(code: int, err: str, *fragments: str) -> None:
    line = err.splitlines()[-1] if err else ""
    assert code == 1, err
    assert line.startswith("adaptspeech: error: ") and "Traceback" not in err, err
    for fragment in fragments:
        assert fragment in line, line


# ---- one clip ------------------------------------------------------------------------------------------------------


def test_a_corrupt_mp3_is_unreadable_with_the_decoders_reason_and_no_noise_on_stderr(tmp_path, capfd):
    clip = corrupt_mp3(tmp_path / "corrupt.mp3")
    capfd.readouterr()
    with pytest.raises(BadClipError) as info:
        load_audio(clip)
    assert info.value.reason == "unreadable"
    assert "does not exist" not in info.value.detail  # libsndfile's message for it, wrong for a file that exists
    assert "no audio stream that libsndfile can decode" in info.value.detail
    assert "Illegal Audio-MPEG-Header" in info.value.detail  # mpg123's own note, moved into the error
    os.write(2, b"after the clip\n")  # file descriptor 2 is restored
    captured = capfd.readouterr()
    assert captured.err == "after the clip\n" and captured.out == ""


def test_a_good_mp3_decodes_and_its_decoder_notes_stay_off_the_terminal(tmp_path, capfd):
    clip = tmp_path / "tone.mp3"
    sf.write(clip, tone(2.0), SR, format="MP3")
    capfd.readouterr()
    wave = load_audio(clip, SR)
    assert abs(len(wave) - 2 * SR) <= 1152 and 0.25 < float(np.abs(wave).max()) < 0.35
    assert capfd.readouterr().err == ""


@pytest.mark.parametrize(
    ("fmt", "ext", "reason", "detail"),
    [
        ("WAV", "wav", "truncated", "the data chunk declares 192000 bytes, the file holds"),
        ("MP3", "mp3", "truncated", "s decoded of the 6.00 s its header declares"),
        ("FLAC", "flac", "unreadable", "flac decoder lost sync"),
        ("OGG", "ogg", "truncated", "the Ogg stream ends without its end-of-stream page"),
    ],
)
def test_a_truncated_clip_is_never_taken_for_a_shorter_one(tmp_path, capfd, fmt, ext, reason, detail):
    """libsndfile decodes a WAV (or mp3) cut in half without an error: its transcript would then be aligned to half
    the speech. Such a clip is ``truncated``."""
    clip = truncated(tmp_path / f"cut.{ext}", seconds=6.0, fmt=fmt)
    with pytest.raises(BadClipError) as info:
        load_audio(clip)
    assert (info.value.reason, detail in info.value.detail) == (reason, True), info.value
    assert capfd.readouterr().err == ""


def test_a_whole_wav_with_an_unset_data_size_is_not_truncated(tmp_path):
    """Streaming writers leave the data chunk's size at 0xFFFFFFFF: the clip is whole."""
    clip = tmp_path / "streamed.wav"
    sf.write(clip, tone(1.0), SR, subtype="PCM_16")
    data = bytearray(clip.read_bytes())
    offset = data.index(b"data") + 4
    data[offset : offset + 4] = (0xFFFFFFFF).to_bytes(4, "little")
    clip.write_bytes(bytes(data))
    assert len(load_audio(clip, SR)) == SR


@pytest.mark.parametrize(
    ("make", "reason", "detail"),
    [
        (lambda p: p.mkdir(), "missing", "a folder, not an audio file"),
        (lambda p: None, "missing", "no such file"),
        (lambda p: p.write_bytes(b""), "empty", "zero-byte file"),
        (lambda p: p.write_bytes(b"RIFF"), "unreadable", "soundfile cannot decode it"),
    ],
)
def test_folders_missing_and_empty_files(tmp_path, make, reason, detail):
    path = tmp_path / "clip.wav"
    make(path)
    with pytest.raises(BadClipError) as info:
        load_audio(path)
    assert info.value.reason == reason and detail in info.value.detail


def test_stderr_is_restored_when_a_clip_is_refused_while_it_is_open(tmp_path, capfd):
    clip = tmp_path / "long.mp3"
    sf.write(clip, tone(3.0), SR, format="MP3")
    with pytest.raises(BadClipError, match="too_long"):
        load_audio(clip, max_seconds=1.0)
    os.write(2, b"still here\n")
    assert capfd.readouterr().err == "still here\n"


# ---- prepare: corrupt clips, vocabulary, empty splits ----------------------------------------------------------------


def test_corrupt_clips_are_skipped_and_counted_by_reason(tmp_path, capfd):
    root = simple_corpus(tmp_path / "cv")
    clips = root / "ro" / "clips"
    truncated(clips / "cut.wav", seconds=3.0)
    corrupt_mp3(clips / "garbage.mp3")
    (clips / "zero.mp3").write_bytes(b"")
    (clips / "text.wav").write_text("not audio\n" * 20)
    (clips / "folder.wav").mkdir()
    rows = [("cut.wav", "a"), ("garbage.mp3", "b"), ("zero.mp3", "c"), ("text.wav", "d"), ("folder.wav", "e")]
    with (root / "ro" / "train.tsv").open("a", encoding="utf-8") as handle:
        handle.writelines(f"x{i}\t{clip}\t{text}\n" for i, (clip, text) in enumerate(rows))
    result = prepare_corpus(root, "ro", tmp_path / "out")
    assert result.report.counts == {"truncated": 1, "unreadable": 2, "empty": 1, "missing": 1}
    assert result.report.kept == {"train": 3, "dev": 1, "test": 1}
    assert {s.path: s.reason for s in result.report.skipped} == {
        "cut.wav": "truncated", "garbage.mp3": "unreadable", "zero.mp3": "empty", "text.wav": "unreadable",
        "folder.wav": "missing",
    }  # fmt: skip
    saved = SkipReport.from_json(tmp_path / "out" / "skip_report.json")
    assert saved.counts == result.report.counts
    assert "Illegal Audio-MPEG-Header" not in capfd.readouterr().err


@pytest.mark.parametrize("per_language", [False, True])
def test_the_vocabulary_comes_from_kept_rows_only(tmp_path, per_language):
    """A skipped training row's characters (``ž``, ``q``) are not in the vocabulary; a dev row's ``ž`` is OOV."""
    root = write_corpus(
        tmp_path / "cv",
        "ro",
        {
            "train": [("ok1.wav", "abc"), ("gone.wav", "žq"), ("ok2.wav", "bca")],
            "dev": [("ok3.wav", "ab ž")],
            "test": [("ok4.wav", "cab")],
        },
    )
    result = prepare_corpus(root, "ro", tmp_path / "out", per_language_vocab=per_language)
    saved = json.loads((tmp_path / "out" / "processor" / "vocab.json").read_text(encoding="utf-8"))
    vocab = saved["ro"] if per_language else saved
    assert sorted(vocab, key=vocab.get) == ["[PAD]", "[UNK]", "<s>", "</s>", "|", "a", "b", "c"]
    assert result.report.counts == {"missing": 1}
    assert dict(result.report.oov_chars) == {"ž": 1}
    dev = load_from_disk(str(tmp_path / "out" / "dataset"))["dev"]
    assert dev[0]["labels"] == [5, 6, 4, 1]  # a b | [UNK]
    train = result.dataset["train"]
    assert [row["labels"] for row in train] == [[5, 6, 7], [6, 7, 5]]
    processor = Wav2Vec2Processor.from_pretrained(tmp_path / "out" / "processor")
    assert len(processor.tokenizer) == 8


def test_an_empty_split_is_one_line_naming_it_and_the_skip_counts(tmp_path, capsys):
    root = simple_corpus(tmp_path / "cv")
    write_corpus(root, "ro", {"dev": [("gone1.wav", "x"), ("gone2.wav", "y"), ("ok9.wav", "!!!")]})
    code, _, err = run_main(["prepare", "common-voice", "--root", root, "--languages", "ro", "--out",
                             tmp_path / "out"], capsys)  # fmt: skip
    assert_one_line_error(
        code, err, "split 'dev' has no usable rows for language 'ro': all 3 skipped (empty_sentence=1, missing=2)"
    )
    assert not (tmp_path / "out").exists() and not partial_folder((tmp_path / "out").absolute()).exists()


def test_a_split_with_an_empty_tsv_is_one_line(tmp_path, capsys):
    root = simple_corpus(tmp_path / "cv")
    (root / "ro" / "test.tsv").write_text("client_id\tpath\tsentence\n")
    code, _, err = run_main(["prepare", "common-voice", "--root", root, "--languages", "ro", "--out",
                             tmp_path / "out"], capsys)  # fmt: skip
    assert_one_line_error(code, err, "split 'test' has no rows for language(s) ro", "empty test.tsv")
    assert "Column name" not in err and not (tmp_path / "out").exists()


def test_a_language_whose_training_rows_are_all_skipped_is_refused(tmp_path, capsys):
    root = simple_corpus(tmp_path / "cv", "ro")
    write_corpus(root, "cs", {"train": [("gone.wav", "ahoj")], "dev": [("ok1.wav", "ano")],
                              "test": [("ok2.wav", "ne")]})  # fmt: skip
    code, _, err = run_main(["prepare", "common-voice", "--root", root, "--languages", "ro,cs", "--out",
                             tmp_path / "out"], capsys)  # fmt: skip
    assert_one_line_error(code, err, "split 'train' has no usable rows for language 'cs': all 1 skipped (missing=1)")


@pytest.mark.parametrize("codes", ["r o", "../x", "ro,../../etc", "ro/cs", "ro;ls", "ro,-x", "1234"])
def test_a_language_that_is_not_a_code_is_one_line_naming_it(codes, tmp_path, capsys):
    root = simple_corpus(tmp_path / "cv")
    code, _, err = run_main(["prepare", "common-voice", "--root", root, "--languages", codes, "--out",
                             tmp_path / "out"], capsys)  # fmt: skip
    bad = [c.strip() for c in codes.split(",") if c.strip() != "ro"]
    assert_one_line_error(code, err, f"languages: {', '.join(repr(c) for c in bad)} is not a language code")


def test_common_voice_codes_are_language_codes():
    codes = ["ro", "cnh", "zh-CN", "sv-SE", "rm-sursilv", "nan-tw", "ga-IE", "ckb"]
    assert parse_languages(",".join(codes)) == codes


# ---- prepare: the output folder ------------------------------------------------------------------------------------


def prepare_argv(root: Path, out: Path, *extra: str) -> list[str]:
    return ["prepare", "common-voice", "--root", str(root), "--languages", "ro", "--out", str(out), *extra]


def test_an_interrupted_prepare_leaves_the_earlier_output_whole(tmp_path, capsys, monkeypatch):
    """Ctrl-C while the second run saves its dataset: ``--out`` still holds the first run, complete and consistent;
    a third run replaces it."""
    from datasets import Dataset

    root, out = simple_corpus(tmp_path / "cv"), tmp_path / "out"
    assert main(prepare_argv(root, out)) == 0
    first = json.loads((out / "prepare_config.json").read_text())
    original_save = Dataset.save_to_disk

    def interrupted_save(self, *args, **kwargs):
        original_save(self, *args, **kwargs)
        raise KeyboardInterrupt

    monkeypatch.setattr(Dataset, "save_to_disk", interrupted_save)
    code, _, err = run_main(prepare_argv(root, out, "--splits", "train,dev", "--feature-type", "fbank", "--overwrite"),
                            capsys)
    assert code == 130 and err.endswith("adaptspeech: interrupted\n")
    assert json.loads((out / "prepare_config.json").read_text()) == first
    assert sorted(load_from_disk(str(out / "dataset"))) == ["dev", "test", "train"]
    assert Wav2Vec2Processor.from_pretrained(out / "processor").feature_extractor.feature_type == "waveform"
    assert not partial_folder(out.absolute()).exists()

    monkeypatch.setattr(Dataset, "save_to_disk", original_save)
    assert main(prepare_argv(root, out, "--splits", "train,dev", "--feature-type", "fbank", "--overwrite")) == 0
    assert sorted(load_from_disk(str(out / "dataset"))) == ["dev", "train"]
    assert json.loads((out / "prepare_config.json").read_text())["feature_type"] == "fbank"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cv", "out"]  # no partial or old folder left


def test_a_killed_prepare_leaves_no_output_and_the_next_run_rebuilds(tmp_path):
    """SIGKILL in the middle of saving the dataset (no cleanup can run): ``--out`` does not appear; the next run
    removes the partial folder and writes a complete output."""
    root, out = simple_corpus(tmp_path / "cv"), tmp_path / "out"
    script = textwrap.dedent(
        f"""
        import os, signal, sys
        from datasets import Dataset
        from adaptspeech.cli import main

        saved = []
        original = Dataset.save_to_disk

        def save_then_die(self, *args, **kwargs):
            original(self, *args, **kwargs)
            saved.append(1)
            if len(saved) == 2:
                os.kill(os.getpid(), signal.SIGKILL)

        Dataset.save_to_disk = save_then_die
        sys.exit(main({prepare_argv(root, out)!r}))
        """
    )
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_DATASETS_OFFLINE": "1", "HF_HUB_OFFLINE": "1"}
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == -9, done.stderr[-2000:]
    partial = partial_folder(out.absolute())
    assert not out.exists() and (partial / "dataset" / "train").is_dir()  # half written, never at --out

    assert main(prepare_argv(root, out)) == 0
    assert not partial.exists()
    assert {k: len(v) for k, v in load_from_disk(str(out / "dataset")).items()} == {"train": 3, "dev": 1, "test": 1}


def test_an_out_folder_of_other_files_is_refused_and_kept(tmp_path, capsys):
    root, out = simple_corpus(tmp_path / "cv"), tmp_path / "mine"
    out.mkdir()
    (out / "notes.txt").write_text("my notes")
    code, _, err = run_main(prepare_argv(root, out), capsys)
    assert_one_line_error(code, err, f"--out {out.absolute()}: the folder holds files but no prepare_config.json")
    assert [p.name for p in out.iterdir()] == ["notes.txt"]
    code, _, err = run_main(prepare_argv(root, out / "notes.txt"), capsys)
    assert_one_line_error(code, err, "notes.txt: a file, not a folder")


def test_a_complete_earlier_output_is_kept_unless_overwrite(tmp_path, capsys):
    """Before: a second ``prepare`` into a complete ``--out`` replaced it without a word (an fbank corpus of two
    languages became a waveform corpus of one)."""
    root, out = simple_corpus(tmp_path / "cv"), tmp_path / "out"
    assert main(prepare_argv(root, out, "--feature-type", "fbank")) == 0
    before = folder_bytes(out)
    code, _, err = run_main(prepare_argv(root, out, "--splits", "train,dev"), capsys)
    assert_one_line_error(code, err, f"--out {out.absolute()} already holds an earlier adaptspeech prepare output "
                          "(prepare_config.json): pass --overwrite to replace it, or choose another --out")
    assert folder_bytes(out) == before
    assert main(prepare_argv(root, out, "--splits", "train,dev", "--overwrite")) == 0
    assert json.loads((out / "prepare_config.json").read_text())["feature_type"] == "waveform"
    assert sorted(load_from_disk(str(out / "dataset"))) == ["dev", "train"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cv", "out"]


def test_a_partial_folder_of_a_running_prepare_is_not_taken_over(tmp_path, capsys):
    root, out = simple_corpus(tmp_path / "cv"), tmp_path / "out"
    partial = partial_folder(out.absolute())
    partial.mkdir()
    with subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"]) as other:
        try:
            (partial / ".owner_pid").write_text(str(other.pid))
            code, _, err = run_main(prepare_argv(root, out), capsys)
            assert_one_line_error(code, err, f"another process (pid {other.pid}) is writing it")
            assert partial.is_dir() and not out.exists()
        finally:
            other.kill()
    assert main(prepare_argv(root, out)) == 0  # its owner is gone: the partial folder is rebuilt
    assert (out / "prepare_config.json").is_file() and not partial.exists()


def test_a_synthetic_corpus_that_another_run_is_writing_is_not_touched(tmp_path, capsys):
    """Before: the second ``prepare synthetic`` removed the first one's ``*.part`` clips and one of the two ended in
    "[Errno 2] No such file or directory: ....mp3.part -> ....mp3"."""
    out = tmp_path / "corpus"
    argv = ["prepare", "synthetic", "--out", str(out), "--languages", "ro", "--clips-per-language", "3",
            "--workers", "1", "--no-progress"]
    out.mkdir()
    with subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"]) as other:
        try:
            (out / ".owner_pid").write_text(str(other.pid))  # a live run writing the corpus
            code, _, err = run_main(argv, capsys)
            assert_one_line_error(code, err, f"--out {out}: another process (pid {other.pid}) is writing it")
            assert [p.name for p in out.iterdir()] == [".owner_pid"]  # nothing written
        finally:
            other.kill()
    assert main(argv) == 0  # its writer is gone: the folder is taken over, and released at the end
    assert (out / "ro" / "train.tsv").is_file() and not (out / ".owner_pid").exists()


# ---- prepare: settings and TSVs ------------------------------------------------------------------------------------


def test_a_split_given_twice_is_refused_not_read_twice(tmp_path, capsys):
    root = simple_corpus(tmp_path / "cv")
    code, _, err = run_main(prepare_argv(root, tmp_path / "out", "--splits", "train,dev,train"), capsys)
    assert_one_line_error(code, err, "splits: train given more than once (its rows would be read twice)")
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("value", ["0", "-1", "nan", "inf", "abc"])
def test_max_seconds_must_be_positive(value, tmp_path, capsys):
    root = simple_corpus(tmp_path / "cv")
    with pytest.raises(SystemExit) as info:
        main(prepare_argv(root, tmp_path / "out", f"--max-seconds={value}"))
    err = capsys.readouterr().err
    assert info.value.code == 2 and "argument --max-seconds: expected a positive number" in err
    assert err.count("\n") == 1


def test_prepare_dataset_refuses_a_non_positive_max_seconds(tmp_path):
    from adaptspeech.data import load_common_voice
    from adaptspeech.data.common_voice import prepare_dataset

    raw = load_common_voice(simple_corpus(tmp_path / "cv"), "ro", ["dev"])
    processor = Wav2Vec2Processor.from_pretrained(_processor_dir(tmp_path))
    with pytest.raises(ValueError, match="max_seconds must be a positive number of seconds"):
        prepare_dataset(raw, processor, max_seconds=0)


def _processor_dir(tmp_path: Path) -> Path:
    from adaptspeech.data import build_processor, build_vocab

    build_processor(build_vocab(["bine"]), tmp_path / "processor")
    return tmp_path / "processor"


def test_a_tsv_that_is_not_utf8_names_the_file_and_line(tmp_path, capsys):
    root = simple_corpus(tmp_path / "cv")
    tsv = root / "ro" / "dev.tsv"
    tsv.write_bytes("client_id\tpath\tsentence\nc1\tok4.wav\tbine\nc2\tok4.wav\tbună\n".encode("latin-1", "replace")
                    .replace(b"bun?", "bună".encode("cp1250")))  # fmt: skip
    code, _, err = run_main(prepare_argv(root, tmp_path / "out"), capsys)
    assert_one_line_error(code, err, f"{tsv}:3: not UTF-8 text (Common Voice TSVs are UTF-8)")
