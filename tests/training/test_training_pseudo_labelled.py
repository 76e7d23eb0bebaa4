"""A training stage on labelled + pseudo-labelled rows with speed perturbation (adaptspeech/training/stage.py,
trainer.py): the whole chain at toy size, the synthetic corpus's unlabelled clips -> a pool -> pseudo-labels of a
labelling model -> a stage training on both with its share per batch, its confidence threshold and speed factors; a
pseudo-labelled folder of another vocabulary and a threshold keeping nothing are one line before training."""

from __future__ import annotations

import json

import pytest
from helpers.cli import TINY_BACKBONE, one_error_line, prepare_ro_with_pool, run_main, write_yaml
from helpers.model_folders import labelling_model

from adaptspeech.cli import main

SHARE = 0.5


@pytest.fixture(scope="module")
def chain(tmp_path_factory):
    """ro: 20 labelled clips + 12 unlabelled ones; prepared (fbank), the pool of other.tsv, pseudo-labels of a random
    labelling model over the prepared vocabulary."""
    root = tmp_path_factory.mktemp("self_training")
    prepared, pool = prepare_ro_with_pool(root)
    labeller = labelling_model(root / "labeller", prepared / "processor")
    assert main(["pseudo-label", "--model", str(labeller), "--data", str(pool), "--out", str(root / "pseudo"),
                 "--target", str(prepared), "--no-progress"]) == 0
    return root, prepared


def _spec(prepared, out, pseudo, **data):
    return {
        "name": "student", "output_dir": str(out), "seed": 0,
        "data": {"prepared_dir": str(prepared), "train_languages": ["ro"], "pseudo_labelled_dir": str(pseudo),
                 "pseudo_labelled_share": SHARE, **data},
        "model": {"init": "config", "config": {"backbone_type": "fbank_conformer",
                                               "backbone_config": {**TINY_BACKBONE, "num_mel_bins": 80}},
                  "trainable": {"backbone": True, "head": True}},
        "training": {"max_steps": 3, "per_device_train_batch_size": 4, "learning_rate": 0.005, "logging_steps": 1,
                     "save_strategy": "no", "eval_strategy": "no", "use_cpu": True},
        "evaluation": {"batch_size": 16},
    }


def test_a_stage_trains_on_both_sources_with_speed_perturbation(chain, tmp_path):
    root, prepared = chain
    labels = json.loads((root / "pseudo" / "pseudo_label.json").read_text())
    median = labels["confidence_quantiles"]["median"]
    spec = _spec(prepared, tmp_path / "run", root / "pseudo", pseudo_labelled_min_confidence=median,
                 speed_perturb=[0.9, 1.0, 1.1])
    assert main(["train", "--config", str(write_yaml(tmp_path / "s.yaml", spec)), "--no-progress"]) == 0
    summary = json.loads((tmp_path / "run" / "stage_summary.json").read_text())
    kept = sum(c >= median for c in _confidences(root / "pseudo"))
    assert summary["train_rows"] == 16 and summary["pseudo_labelled_rows"] == kept
    reads = sum(summary["speed_perturb"].values())  # 3 batches of 4, and accelerate's loader reads one batch ahead
    assert summary["pseudo_labelled_hours"] > 0 and reads in (12, 16) and len(summary["speed_perturb"]) == 3


def _confidences(folder):
    from datasets import load_from_disk

    return load_from_disk(str(folder / "dataset"))["train"]["confidence"]


def test_every_batch_holds_the_share_of_pseudo_labelled_rows(chain):
    """The training order the stage's trainer uses: batches of 4 with 2 pseudo-labelled rows each."""
    from adaptspeech.training.stage import StageSpec, _select_data

    root, prepared = chain
    data = _select_data(StageSpec.from_dict(_spec(prepared, root / "unused", root / "pseudo")))
    assert data.source_mix == (16, SHARE) and len(data.train) == 16 + data.pseudo_rows
    from adaptspeech.data.source_mix import SourceMixSampler

    order = list(SourceMixSampler(16, data.pseudo_rows, SHARE, 4))
    paths = data.train["source_file"]
    for start in range(0, len(order), 4):
        assert sum(bool(paths[i]) for i in order[start : start + 4]) == 2  # pool rows name their source file


def test_a_threshold_keeping_nothing_or_another_vocabulary_is_one_line(chain, tmp_path, capsys):
    root, prepared = chain
    spec = _spec(prepared, tmp_path / "run", root / "pseudo", pseudo_labelled_min_confidence=1.0)
    code, _, err = run_main(["train", "--config", write_yaml(tmp_path / "s.yaml", spec), "--no-progress"], capsys)
    assert code == 1 and "every pseudo-label was filtered out by the minimum confidence 1" in one_error_line(err)
    other = tmp_path / "other_vocab"
    import shutil

    shutil.copytree(root / "pseudo", other)
    vocab = json.loads((other / "processor" / "vocab.json").read_text())
    vocab["ŵ"] = len(vocab)
    (other / "processor" / "vocab.json").write_text(json.dumps(vocab))
    spec = _spec(prepared, tmp_path / "run2", other)
    code, _, err = run_main(["train", "--config", write_yaml(tmp_path / "t.yaml", spec), "--no-progress"], capsys)
    line = one_error_line(err)
    assert code == 1 and "its labels use another vocabulary than the stage's prepared data" in line and "'ŵ'" in line
    assert not (tmp_path / "run2" / "model").exists()


def test_a_pool_holding_a_test_clip_is_refused_by_pseudo_label_and_by_a_stage(chain, tmp_path, capsys):
    """A pool prepared without --held-out that holds a byte copy of a test clip and a re-encoded (PCM16, trimmed,
    quieter) copy of another: ``pseudo-label --target`` and ``data.pseudo_labelled_dir`` name both before work."""
    import shutil

    import soundfile as sf

    from adaptspeech.data import load_audio, read_tsv

    root, prepared = chain
    tests = read_tsv(root / "corpus" / "ro" / "test.tsv")["path"]
    clips = root / "corpus" / "ro" / "clips"
    folder = tmp_path / "recordings"
    folder.mkdir()
    for name in read_tsv(root / "corpus" / "ro" / "other.tsv")["path"][:4]:
        shutil.copy(clips / name, folder / name)
    shutil.copy(clips / tests[0], folder / "copied.mp3")
    wave = load_audio(clips / tests[1], 16000)
    sf.write(folder / "re_encoded.wav", 0.9 * wave[160:-160], 16000, subtype="PCM_16")
    assert main(["prepare", "audio-folder", "--root", str(folder), "--language", "ro", "--out", str(tmp_path / "pool"),
                 "--processor", str(prepared / "processor"), "--no-progress"]) == 0
    command = ["pseudo-label", "--model", root / "labeller", "--data", tmp_path / "pool", "--out", tmp_path / "labels",
               "--no-progress"]
    code, _, err = run_main([*command, "--target", prepared], capsys)
    line = one_error_line(err)
    assert code == 1 and f"copied.mp3 (same audio as test/{tests[0]})" in line
    assert f"re_encoded.wav (the audio of test/{tests[1]} re-encoded" in line and not (tmp_path / "labels").exists()
    assert run_main(command, capsys)[0] == 0  # without the target's splits there is nothing to compare with
    spec = _spec(prepared, tmp_path / "run", tmp_path / "labels")
    code, _, err = run_main(["train", "--config", write_yaml(tmp_path / "s.yaml", spec), "--no-progress"], capsys)
    line = one_error_line(err)
    assert code == 1 and f"data.pseudo_labelled_dir {tmp_path / 'labels'} shares 2 clip(s)" in line
    assert f"test/{tests[0]}" in line and f"test/{tests[1]}" in line and not (tmp_path / "run" / "model").exists()
