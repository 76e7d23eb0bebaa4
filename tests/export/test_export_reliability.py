"""Bad input to ``adaptspeech export`` and to an exported folder: one clear line each, nothing half-written
(docs/reliability.md)."""

from __future__ import annotations

import json
import os
import shutil
import stat
from pathlib import Path

import pytest
from helpers.cli import one_error_line, run_main
from helpers.files import folder_bytes
from helpers.model_folders import model_folder
from huggingface_hub import ModelCard

from adaptspeech.export import exporter
from adaptspeech.runtime import OnnxRecognizer
from adaptspeech.runtime.folder import SETTINGS_FILE, TOKENS_FILE, ExportFolderError


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    """Tiny fbank model folders (ro / cs adapters), and one exported with its ro adapter."""
    from adaptspeech.export import export_model

    root = tmp_path_factory.mktemp("models")
    model_folder(root / "two")
    export_model(root / "two", root / "onnx", language="ro")
    return root


def _error(argv, capsys) -> str:
    code, _, err = run_main(argv, capsys)
    assert code == 1
    return one_error_line(err)


def test_a_language_the_model_lacks_names_those_it_has(models, tmp_path, capsys):
    line = _error(["export", "--model", models / "two", "--language", "de", "--out", tmp_path / "o"], capsys)
    assert "--language de" in line and "cs, ro" in line
    assert not (tmp_path / "o").exists()


def test_several_languages_need_a_language(models, tmp_path, capsys):
    line = _error(["export", "--model", models / "two", "--out", tmp_path / "o"], capsys)
    assert "2 languages (cs, ro)" in line and "--language" in line


def test_fusion_without_a_fusion(models, tmp_path, capsys):
    line = _error(["export", "--model", models / "two", "--fusion", "--out", tmp_path / "o"], capsys)
    assert "--fusion" in line and "no SimAdapter fusion" in line


def test_an_attention_kind_onnx_cannot_express_is_named(tmp_path, capsys):
    model_folder(tmp_path / "lsh", attention={"kind": "lsh_simple", "layers": [1]})
    line = _error(["export", "--model", tmp_path / "lsh", "--language", "ro", "--out", tmp_path / "o"], capsys)
    assert "'lsh_simple'" in line and "the kinds that export: default, mhsa" in line
    assert not (tmp_path / "o").exists()


def test_a_las_head_has_no_ctc_graph(tmp_path, capsys):
    model_folder(tmp_path / "las", head="las", languages=("ro",))
    line = _error(["export", "--model", tmp_path / "las", "--out", tmp_path / "o"], capsys)
    assert "head 'las'" in line and "only CTC heads export" in line


def test_an_existing_export_is_kept_unless_overwrite(models, tmp_path, capsys):
    out = tmp_path / "onnx"
    shutil.copytree(models / "onnx", out)
    before = folder_bytes(out)
    line = _error(["export", "--model", models / "two", "--language", "cs", "--out", out], capsys)
    assert f"--out {out} already holds an earlier adaptspeech export output ({SETTINGS_FILE}): pass --overwrite" in line
    assert folder_bytes(out) == before


def test_a_failed_export_leaves_nothing(models, tmp_path, monkeypatch):
    def fail(*args, **kwargs):
        raise RuntimeError("translation failed")

    monkeypatch.setattr(exporter, "export_graph", fail)
    with pytest.raises(RuntimeError, match="translation failed"):
        exporter.export_model(models / "two", tmp_path / "o", language="ro")
    assert list(tmp_path.iterdir()) == []  # neither the folder nor its temporary sibling


def test_overwrite_replaces_an_earlier_export(models, tmp_path, capsys):
    out = tmp_path / "onnx"
    shutil.copytree(models / "onnx", out)
    (out / "stale.txt").write_text("old")
    results = tmp_path / "results.json"  # as `adaptspeech evaluate --output` writes it
    results.write_text(json.dumps({"split": "test", "overall": {"cer": 0.1, "wer": 0.3, "num_utterances": 5},
                                   "per_language": {"cs": {"cer": 0.12, "wer": 0.25, "num_utterances": 3}}}))
    code, _, _ = run_main(["export", "--model", models / "two", "--language", "cs", "--out", out, "--overwrite",
                           "--metrics", results, "--dataset", "toy"], capsys)
    assert code == 0
    assert not (out / "stale.txt").exists()
    assert json.loads((out / SETTINGS_FILE).read_text())["language"] == "cs"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["onnx", "results.json"]
    card = ModelCard.load(out / "README.md")
    assert card.data.language == ["cs"]
    assert {(r.metric_type, r.metric_value) for r in card.data.eval_results} == {("cer", 12.0), ("wer", 25.0)}


def _training_run(root):
    """A training run's folder as ``adaptspeech train`` leaves it: checkpoints, a log and the model."""
    run = root / "run"
    (run / "checkpoint-2").mkdir(parents=True)
    (run / "checkpoint-2" / "trainer_state.json").write_text('{"global_step": 2}')
    (run / "log_history.json").write_text("[]")
    return run


@pytest.mark.parametrize("out", ["run", "run/model", "run/model/onnx"])
def test_overwrite_refuses_the_folder_of_the_model(models, tmp_path, capsys, out):
    run = _training_run(tmp_path)
    shutil.copytree(models / "two", run / "model")
    before = folder_bytes(tmp_path)
    line = _error(["export", "--model", run / "model", "--language", "cs", "--out", tmp_path / out, "--overwrite"],
                  capsys)
    relation = {"run": "holds", "run/model": "is", "run/model/onnx": "lies inside"}[out]
    assert f"--out {tmp_path / out}: the folder {relation} --model {run / 'model'}" in line
    assert folder_bytes(tmp_path) == before  # the run, its checkpoints and the model as they were


def test_overwrite_refuses_a_folder_that_is_no_export(models, tmp_path, capsys):
    run = _training_run(tmp_path)
    before = folder_bytes(tmp_path)
    line = _error(["export", "--model", models / "two", "--language", "cs", "--out", run, "--overwrite"], capsys)
    assert f"--out {run}: the folder holds files but no {SETTINGS_FILE}" in line and "remove it" in line
    assert folder_bytes(tmp_path) == before


def test_overwrite_refuses_a_file(models, tmp_path, capsys):
    weights = tmp_path / "model.safetensors"
    weights.write_bytes(b"weights")
    for _ in range(2):  # the second try was "[Errno 20] Not a directory"
        line = _error(["export", "--model", models / "two", "--language", "cs", "--out", weights, "--overwrite"],
                      capsys)
        assert line == f"adaptspeech: error: --out {weights}: a file, not a folder; choose another --out"
    assert [p.name for p in tmp_path.iterdir()] == ["model.safetensors"] and weights.read_bytes() == b"weights"


@pytest.mark.parametrize("where", ["under_a_file", "proc"])
def test_an_out_that_cannot_be_written_is_named_not_its_temporary_folder(models, tmp_path, capsys, where):
    if where == "proc":
        if not Path("/proc/self").is_dir():
            pytest.skip("no /proc here")
        out, reason = Path("/proc/adaptspeech-export"), "cannot write there"
    else:
        (tmp_path / "notes.txt").write_text("x")
        out, reason = tmp_path / "notes.txt" / "onnx", f"{tmp_path / 'notes.txt'} is a file, not a folder"
    line = _error(["export", "--model", models / "two", "--language", "cs", "--out", out], capsys)
    assert line.startswith(f"adaptspeech: error: --out {out}: {reason}")
    assert ".adaptspeech-export" not in line and ".onnx" not in line


def test_an_export_folder_follows_the_umask(models, tmp_path):
    from adaptspeech.export import export_model

    before = os.umask(0o022)
    try:
        export_model(models / "two", tmp_path / "onnx", language="cs")
    finally:
        os.umask(before)
    assert stat.S_IMODE((tmp_path / "onnx").stat().st_mode) == 0o755


def test_tokens_of_another_size_are_refused_at_load(models, tmp_path):
    out = tmp_path / "onnx"
    shutil.copytree(models / "onnx", out)
    with (out / TOKENS_FILE).open("a", encoding="utf-8") as handle:
        handle.write(f"x {len((out / TOKENS_FILE).read_text().splitlines())}\n")
    settings = json.loads((out / SETTINGS_FILE).read_text())
    settings["vocab_size"] += 1
    (out / SETTINGS_FILE).write_text(json.dumps(settings))
    with pytest.raises(ExportFolderError, match=r"model.onnx: the graph outputs \d+ labels but tokens.txt holds"):
        OnnxRecognizer(out)


def test_feature_settings_that_disagree_with_the_graph_are_refused_at_load(models, tmp_path):
    out = tmp_path / "onnx"
    shutil.copytree(models / "onnx", out)
    settings = json.loads((out / SETTINGS_FILE).read_text())
    settings["feature"]["framed"] = False
    (out / SETTINGS_FILE).write_text(json.dumps(settings))
    with pytest.raises(ExportFolderError, match="the graph reads input of rank 3"):
        OnnxRecognizer(out)


def test_a_folder_that_is_no_export(tmp_path, capsys):
    line = _error(["transcribe", "--onnx", tmp_path, "clip.wav"], capsys)
    assert f"no {SETTINGS_FILE} there" in line


@pytest.mark.parametrize(
    ("argv", "named"),
    [
        (["--onnx", "EXPORT", "--language", "ro"], "--language"),
        (["--onnx", "EXPORT", "--timestamps", "word"], "--timestamps"),
        (["--onnx", "EXPORT", "--confidence"], "--confidence"),
        (["--onnx", "EXPORT", "--hotwords", "a,b"], "--hotwords"),
        (["--model", "MODEL", "--precision", "int8"], "--precision"),
        (["--model", "MODEL", "--decoder", "beam"], "--decoder"),
    ],
)
def test_an_option_of_the_other_path_is_refused_not_ignored(argv, named, tmp_path, capsys):
    """``--onnx`` decodes whole files with the export's own decoders: a ``--model`` option given with it (or an
    ``--onnx`` option given with ``--model``) would be ignored without a word, so it is refused before any work."""
    line = _error(["transcribe", *argv, str(tmp_path / "clip.wav")], capsys)
    assert named in line and ("--onnx" in line if "--model" not in argv else "--model" in line)


def test_a_language_that_is_not_the_fusion_s_target_is_refused(models, tmp_path, capsys):
    """The fusion's attention was trained for its target's head: ``--language cs --fusion`` of a fusion for ro would
    write ro's graph under cs's name; refused, nothing written; the target itself (or no language) is the fusion."""
    from adaptspeech import AdaptSpeechForCTC

    model = AdaptSpeechForCTC.from_pretrained(models / "two")
    model.add_fusion(["ro", "cs"], target_language="ro")
    shutil.copytree(models / "two", tmp_path / "fused")  # the processor
    model.save_pretrained(tmp_path / "fused")
    line = _error(["export", "--model", tmp_path / "fused", "--language", "cs", "--fusion", "--out", tmp_path / "o"],
                  capsys)
    assert "--language cs" in line and "fusion for ro" in line and not (tmp_path / "o").exists()
    for language in ("ro", None):
        assert exporter.choose_language(model, language, fusion=True) == ("ro", ["ro", "cs"])
        assert model.config.fusion_active


def test_a_waveform_with_nothing_to_decode_is_refused_as_its_file_would_be(models, tmp_path):
    """An array of no samples, with a NaN or of digital silence gave ``''``; the same samples in a file are refused
    by ``transcribe --onnx`` (``load_audio``): the same error, reason and detail, for the array."""
    import numpy as np
    import soundfile as sf

    from adaptspeech.runtime.audio import BadClipError, load_audio

    recognizer = OnnxRecognizer(models / "onnx")
    good = np.sin(np.arange(16000) / 7.0).astype(np.float32) * 0.3
    nan = good.copy()
    nan[100] = np.nan
    for samples, reason in ((np.zeros(0, np.float32), "empty"), (nan, "nan"), (np.zeros(16000, np.float32), "silent")):
        with pytest.raises(BadClipError) as raised:
            recognizer.transcribe([good, samples])
        assert raised.value.reason == reason and raised.value.path == "audio[1]"
        if len(samples):
            sf.write(tmp_path / "x.wav", samples, 16000, subtype="FLOAT")
            with pytest.raises(BadClipError) as from_file:
                load_audio(tmp_path / "x.wav")
            assert (from_file.value.reason, from_file.value.detail) == (reason, raised.value.detail)
    assert len(recognizer.transcribe([good])) == 1
