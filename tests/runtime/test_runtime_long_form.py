"""Long recordings without PyTorch: ``OnnxRecognizer`` and ``adaptspeech transcribe --onnx`` split a recording longer
than one graph call at pauses with the PyTorch path's own (numpy) functions (adaptspeech.runtime.long_form), so a
recording longer than the export's position table covers is transcribed, to the PyTorch path's text (an fbank model,
whose utterances next to digital silence are read from their own samples: tests/export/test_export_folder.py)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from helpers.cli import one_error_line, run_main
from helpers.model_folders import model_folder, onnx_splits_as_pytorch, synthetic_recording
from helpers.without_torch import outside_the_runtime_extra, run_without

from adaptspeech.cli import main
from adaptspeech.cli.common import _load_model
from adaptspeech.inference.long_form.recording import FrameGrid
from adaptspeech.inference.long_form.regions import find_speech
from adaptspeech.runtime import OnnxRecognizer
from adaptspeech.runtime.audio import load_audio
from adaptspeech.runtime.command import unescape_field
from adaptspeech.runtime.folder import read_export
from adaptspeech.runtime.long_form import speech_spans
from adaptspeech.testing.tiny_models import FRONT_END_320X

SPLIT = {"chunk_length_s": 8.0, "stride_length_s": 2.0}
"""Both paths split a recording longer than 8 s (the tiny wav2vec2-conformer's graph covers 10 s)."""
SPLIT_OPTIONS = ["--chunk-length", "8", "--stride-length", "2"]


@pytest.fixture(scope="module")
def recording(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, np.ndarray]:
    path = synthetic_recording(tmp_path_factory.mktemp("long"))
    return path, load_audio(path, 16000)


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny wav2vec2-conformer with 20-ms frames and a position table of 500 frames: its graph covers 10 s."""
    root = tmp_path_factory.mktemp("w2v2c")
    model_folder(root / "model", backbone="wav2vec2_conformer",
                 backbone_overrides={**FRONT_END_320X, "max_source_positions": 500})
    assert main(["export", "--model", str(root / "model"), "--language", "ro", "--out", str(root / "onnx")]) == 0
    return root


def _texts(stdout: str) -> list[str]:
    return [unescape_field(line.split("\t")[1]) for line in stdout.splitlines()]


def test_the_export_gives_the_models_frame_grid(exported):
    """``first_frame_units`` and the frame geometry give the front end's output length (convolutions: ``(n - r) //
    u + 1``) and the speech regions the PyTorch path finds."""
    root = exported
    model, _ = _load_model(str(root / "model"))
    geometry = read_export(root / "onnx").geometry
    grid = FrameGrid.of(model)
    for units in [*range(1, 3 * geometry.units_per_frame + 700), 16000 * 7 // geometry.unit_hop + 13]:
        assert geometry.output_frames(units) == int(model._get_feat_extract_output_lengths(units)), units
    rng = np.random.default_rng(0)
    waveform = np.concatenate([np.zeros(9000), rng.normal(0, 0.1, 20000), np.zeros(7000), rng.normal(0, 0.1, 9000)])
    units = len(grid.features.raw(waveform.astype(np.float32)))
    assert speech_spans(geometry, units, waveform, 0.25, 0.0, 30.0) == find_speech(grid, units, waveform)


def test_a_recording_longer_than_the_graph_covers_is_transcribed_as_pytorch_splits_it(exported, recording, capsys):
    root = exported
    path, waveform = recording
    folder = read_export(root / "onnx")
    assert len(waveform) / 16000 > folder.max_frames * folder.seconds_per_frame  # one graph call cannot read it
    expected = onnx_splits_as_pytorch(root, waveform, SPLIT["chunk_length_s"], SPLIT["stride_length_s"])
    code, out, _ = run_main(["transcribe", "--model", root / "model", "--language", "ro", *SPLIT_OPTIONS, path],
                            capsys)
    assert code == 0 and _texts(out) == [expected]
    done = run_without(outside_the_runtime_extra(), "from adaptspeech.cli import main\ncode = main(sys.argv[1:])\n",
                       ["transcribe", "--onnx", root / "onnx", *SPLIT_OPTIONS, path])
    assert done.returncode == 0, done.stderr
    assert _texts(done.stdout) == [expected]


def test_split_in_chunks_covers_the_whole_grid(exported, recording):
    """``split_by="chunks"``: overlapping chunks stitched on the recording's frame grid (each chunk normalised over
    all of it, where PyTorch uses a sliding window: the texts may differ, the grid does not)."""
    root = exported
    _, waveform = recording
    recognizer = OnnxRecognizer(root / "onnx", precision="fp32", split_by="chunks", **SPLIT)
    log_probs = recognizer.recording_log_probs(waveform)
    units = len(recognizer.features(waveform))
    assert log_probs.shape == (recognizer.model.geometry.output_frames(units), len(recognizer.model.table))
    assert np.allclose(np.exp(log_probs).sum(-1), 1.0, atol=1e-4)


def test_a_folder_exported_without_its_frame_geometry_reads_recordings_whole(exported, recording, tmp_path):
    root = exported
    _, waveform = recording
    shutil.copytree(root / "onnx", tmp_path / "old")
    settings = json.loads((tmp_path / "old" / "adaptspeech_export.json").read_text())
    del settings["feature"]["first_frame_units"]
    (tmp_path / "old" / "adaptspeech_export.json").write_text(json.dumps(settings))
    recognizer = OnnxRecognizer(tmp_path / "old", precision="fp32", **SPLIT)
    assert recognizer.fits_one_call(waveform[:16000])
    assert recognizer.fits_one_call(waveform)


def test_bad_split_settings_are_one_line(exported, recording, capsys):
    root = exported
    path, _ = recording
    code, out, err = run_main(["transcribe", "--onnx", root / "onnx", "--chunk-length", "4", "--stride-length", "2",
                               path], capsys)
    assert code == 1 and out == ""
    assert "chunk_length_s 4 must be longer than twice stride_length_s 2" in one_error_line(err)
    with pytest.raises(ValueError, match="split_by='words'; allowed values: pauses, chunks"):
        OnnxRecognizer(root / "onnx", split_by="words")
    with pytest.raises(ValueError, match="min_pause_s must be positive"):
        OnnxRecognizer(root / "onnx", min_pause_s=0.0)


def _zero_runs(num_samples: int, seed: int) -> np.ndarray:
    """Noise with runs of exact zeros of 1-1200 samples (some a window long or more), at random places."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(num_samples).astype(np.float32) + 2.0
    for start in rng.integers(0, num_samples, size=num_samples // 2000):
        x[start : start + int(rng.integers(1, 1200))] = 0.0
    return x


def _peak_bytes(call) -> int:
    import tracemalloc

    tracemalloc.start()
    try:
        call()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_digital_silence_marks_the_zero_runs_a_window_long_in_a_few_bytes_a_sample():
    # an hour's int64 marks and their running sum took 920 MB (16 bytes a sample)
    from adaptspeech.runtime.audio import digital_silence

    x = _zero_runs(400_000, seed=0)
    expected = np.zeros(len(x), bool)
    zero, i = x == 0, 0
    while i < len(x):
        if zero[i]:
            j = i
            while j < len(x) and zero[j]:
                j += 1
            expected[i:j] = j - i >= 400
            i = j
        else:
            i += 1
    marked = digital_silence(x)
    assert 0 < marked.sum() < len(x) and np.array_equal(marked, expected)
    assert np.array_equal(digital_silence(np.zeros(500, np.float32)), np.ones(500, bool))
    assert not digital_silence(np.zeros(399, np.float32)).any() and len(digital_silence(np.zeros(0))) == 0
    assert _peak_bytes(lambda: digital_silence(x)) < 5 * len(x)


def test_units_touching_in_pieces_of_units_as_at_once_in_a_few_bytes_a_sample():
    # an hour's int64 running count of the marked samples took 460 MB
    from adaptspeech.runtime.audio import digital_silence
    from adaptspeech.runtime.long_form import units_touching

    marked = digital_silence(_zero_runs(400_000, seed=1))
    units = 1 + (len(marked) - 400) // 160 + 3  # three units past the end read nothing
    counts = np.concatenate([[0], np.cumsum(marked)])
    starts = np.minimum(np.arange(units) * 160, len(marked))
    expected = counts[np.minimum(starts + 400, len(marked))] - counts[starts] > 0
    for piece in (1, 7, 6000, 10**9):
        assert np.array_equal(units_touching(marked, units, 160, 400, piece_units=piece), expected)
    assert _peak_bytes(lambda: units_touching(marked, units, 160, 400, piece_units=250)) < 3 * len(marked)  # was 16
