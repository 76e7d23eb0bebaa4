"""``data.lid_extra_audio`` (adaptspeech/training/stage.py, adaptspeech/data/pools.py): a pool of untranscribed audio
whose language is known trains a language-ID head beside the labelled rows; a setting that cannot work (no folder,
no pool, a pool of another language, a language the stage does not train, a stage that trains more than the head, a
pool sharing a test clip) is one line before training."""

from __future__ import annotations

import json
import shutil

import pytest
from helpers.cli import TINY_BACKBONE, one_error_line, run_main, write_yaml

from adaptspeech.cli import main
from adaptspeech.errors import StageConfigError


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    """ro and cs: 12 synthetic labelled clips each and 6 unlabelled ro ones; prepared as fbank rows and the pool of
    ro's other.tsv read with their processor -> (root, prepared, pool)."""
    root = tmp_path_factory.mktemp("lid_extra_audio")
    prepared, pool = root / "prepared", root / "pool"
    assert main(["prepare", "synthetic", "--out", str(root / "corpus"), "--languages", "ro,cs",
                 "--clips-per-language", "12", "--unlabelled-clips", "6", "--workers", "1", "--no-progress"]) == 0
    assert main(["prepare", "common-voice", "--root", str(root / "corpus"), "--languages", "ro,cs", "--out",
                 str(prepared), "--feature-type", "fbank"]) == 0
    assert main(["prepare", "common-voice-other", "--root", str(root / "corpus"), "--language", "ro", "--out",
                 str(pool), "--processor", str(prepared / "processor"), "--no-progress"]) == 0
    return root, prepared, pool


def _spec(prepared, out, extra, trainable=None):
    return {
        "name": "lid", "output_dir": str(out), "seed": 0,
        "data": {"prepared_dir": str(prepared), "train_languages": ["ro", "cs"], "lid_extra_audio": extra},
        "model": {"init": "config", "config": {"backbone_type": "fbank_conformer",
                                               "backbone_config": {**TINY_BACKBONE, "num_mel_bins": 80}},
                  "lid": {"pooling": "mean_std", "layer": -1},
                  "trainable": trainable or {"lid": True}},
        "training": {"max_steps": 2, "per_device_train_batch_size": 4, "learning_rate": 0.005, "logging_steps": 1,
                     "save_strategy": "no", "eval_strategy": "no", "use_cpu": True},
        "evaluation": {"batch_size": 8},
    }


def test_the_pool_s_segments_train_the_head_beside_the_labelled_rows(corpus, tmp_path):
    from datasets import load_from_disk

    from adaptspeech.training.stage import StageSpec, _select_data

    _, prepared, pool = corpus
    pooled = load_from_disk(str(pool / "dataset"))["pool"]
    labelled = _select_data(StageSpec.from_dict(_spec(prepared, tmp_path / "a", None))).train
    data = _select_data(StageSpec.from_dict(_spec(prepared, tmp_path / "a", {"ro": str(pool)})))
    assert data.lid_extra_rows == len(pooled) > 0 and len(data.train) == len(labelled) + len(pooled)
    assert list(data.train["language"][len(labelled):]) == ["ro"] * len(pooled)
    assert list(data.train["path"][len(labelled):]) == list(pooled["path"])
    assert main(["train", "--config", str(write_yaml(tmp_path / "s.yaml", _spec(prepared, tmp_path / "run",
                                                                                  {"ro": str(pool)}))),
                 "--no-progress"]) == 0
    summary = json.loads((tmp_path / "run" / "stage_summary.json").read_text())
    assert summary["train_rows"] == len(labelled) and summary["lid_extra_audio_rows"] == len(pooled)
    assert summary["lid_extra_audio_hours"] == pytest.approx(sum(pooled["duration"]) / 3600, rel=1e-5)


def test_a_setting_that_cannot_work_is_one_line_before_training(corpus, tmp_path, capsys):
    _, prepared, pool = corpus
    other = tmp_path / "cs_pool"
    shutil.copytree(pool, other)
    marker = json.loads((other / "pool_config.json").read_text())
    (other / "pool_config.json").write_text(json.dumps({**marker, "language": "cs"}))
    cases = [
        ({"ro": str(tmp_path / "missing")}, None, f"data.lid_extra_audio.ro {tmp_path / 'missing'}: no such folder"),
        ({"ro": str(prepared)}, None, f"data.lid_extra_audio.ro {prepared}: no pool_config.json, not a pool"),
        ({"cs": str(pool)}, None, f"data.lid_extra_audio.cs {pool}: a pool of 'ro', given for 'cs'"),
        ({"ro": str(other)}, None, f"data.lid_extra_audio.ro {other}: a pool of 'cs', given for 'ro'"),
        ({"pl": str(pool)}, None, "data.lid_extra_audio.pl: 'pl' is not one of data.train_languages (ro, cs)"),
        ({"ro": str(pool)}, {"lid": True, "head": True},
         "data.lid_extra_audio: untranscribed audio trains a language-ID head alone (model.trainable: {lid: true}); "
         "this stage trains head"),
        ({"ro": 3}, None, "data.lid_extra_audio: expected a mapping of language code -> folder"),
    ]
    for n, (extra, trainable, message) in enumerate(cases):
        spec = _spec(prepared, tmp_path / f"run{n}", extra, trainable)
        code, _, err = run_main(["train", "--config", write_yaml(tmp_path / f"s{n}.yaml", spec), "--no-progress"],
                                capsys)
        assert code == 1 and message in one_error_line(err), (message, err)
        assert not (tmp_path / f"run{n}" / "model").exists()


def test_a_pool_holding_a_test_clip_is_refused(corpus, tmp_path, capsys):
    """A pool prepared without --held-out holding a byte copy of a ro test clip: named before training."""
    from adaptspeech.data import read_tsv

    root, prepared, _ = corpus
    clips = root / "corpus" / "ro" / "clips"
    test_clip = read_tsv(root / "corpus" / "ro" / "test.tsv")["path"][0]
    folder = tmp_path / "recordings"
    folder.mkdir()
    for name in read_tsv(root / "corpus" / "ro" / "other.tsv")["path"][:2]:
        shutil.copy(clips / name, folder / name)
    shutil.copy(clips / test_clip, folder / "copied.mp3")
    assert main(["prepare", "audio-folder", "--root", str(folder), "--language", "ro", "--out", str(tmp_path / "pool"),
                 "--processor", str(prepared / "processor"), "--no-progress"]) == 0
    with pytest.raises(StageConfigError, match=r"data.lid_extra_audio.ro .*pool shares 1 clip\(s\) with the "
                       rf"dev/test splits of .*copied.mp3 \(same audio as test/{test_clip}\)"):
        from adaptspeech.training.stage import StageSpec, _select_data

        _select_data(StageSpec.from_dict(_spec(prepared, tmp_path / "run", {"ro": str(tmp_path / "pool")})))
