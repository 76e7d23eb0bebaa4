"""``lm tune`` (adaptspeech.lm.tune) on a tiny split: the grid table, best first, its no-LM point and the saved
processor the pipeline decodes with; a full disk while saving keeps the earlier LM; a destination that cannot be
written is refused before the grid runs."""

from __future__ import annotations

import os
from pathlib import Path
from types import SimpleNamespace

import pytest
from helpers.cli import one_error_line, run_main
from helpers.files import folder_bytes
from helpers.lm import prepared_dev, tune_argv
from helpers.model_folders import audio, model_folder
from transformers import AutoProcessor, pipeline

from adaptspeech.cli import main
from adaptspeech.lm.decoder import LMDecoder, build_decoder

pytest.importorskip("kenlm")
pytest.importorskip("pyctcdecode")


ROOT_SKIP = pytest.mark.skipif(
    os.geteuid() == 0, reason="root writes into read-only folders; the variant under a file runs as root too"
)


def test_lm_tune_cli_table_and_saved_processor(tmp_path: Path, capsys) -> None:
    """``lm build`` then ``lm tune --save``: the JSON table holds every grid point, best first, its no-LM point is
    pyctcdecode without an LM and its best point is what transformers' pipeline gives with the saved processor."""
    import itertools
    import json

    from adaptspeech import AdaptSpeechForCTC
    from adaptspeech.inference.transcriber import transcribe
    from adaptspeech.metrics import compute_error_rates

    folder = model_folder(tmp_path / "model")
    texts = ["abc def", "ghi jab", "lot of letters", "abc jab", "def ghi"]
    waves = [audio(1.0 + 0.25 * i, seed=20 + i) for i in range(len(texts))]
    prepared = prepared_dev(tmp_path / "prepared", folder, waves, texts)
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n".join(["abc def", "ghi jab", "abc def", "lot of letters", "ghi jab", "def ghi"]) + "\n")
    assert main(["lm", "build", "--text", str(corpus), "--order", "2", "--out", str(tmp_path / "lm")]) == 0
    alphas, betas = [0.0, 1.0, 3.0], [0.0, 2.0]
    argv = ["lm", "tune", "--model", str(folder), "--data", str(prepared), "--lm", str(tmp_path / "lm"),
            "--alphas", ",".join(map(str, alphas)), "--betas", ",".join(map(str, betas)), "--beam-size", "8",
            "--save", "--output", str(tmp_path / "tune.json"), "--device", "cpu"]
    assert main(argv) == 0
    printed = capsys.readouterr().out
    table = json.loads((tmp_path / "tune.json").read_text())
    grid = table["grid"]
    assert sorted((g["alpha"], g["beta"]) for g in grid) == sorted(itertools.product(alphas, betas))
    assert [(g["wer"], g["cer"]) for g in grid] == sorted((g["wer"], g["cer"]) for g in grid)
    assert table["best"] == grid[0]
    assert len({(g["wer"], g["cer"]) for g in grid}) > 1  # the weights matter on this split: the order is tested
    assert f"best: alpha {grid[0]['alpha']:g}, beta {grid[0]['beta']:g} (5 utterances of dev)" in printed

    # the alpha = beta = 0 point: pyctcdecode's beam search without an LM, through the transcriber on the audio
    model = AdaptSpeechForCTC.from_pretrained(folder)
    processor = AutoProcessor.from_pretrained(prepared / "processor")
    plain = LMDecoder(build_decoder(processor.tokenizer, None), beam_width=8)
    no_lm = compute_error_rates([r.text for r in transcribe(model, processor, waves, lm_decoder=plain)], texts)
    zero = next(g for g in grid if g["alpha"] == 0 and g["beta"] == 0)
    assert (zero["wer"], zero["cer"]) == pytest.approx((no_lm["overall"]["wer"], no_lm["overall"]["cer"]))

    # --save: the model folder's processor carries the LM at the best weights; the pipeline decodes with it
    from adaptspeech.lm.processor import AdaptSpeechProcessorWithLM

    saved = AdaptSpeechProcessorWithLM.from_pretrained(folder)
    weights = LMDecoder(saved.decoder)
    assert (weights.alpha, weights.beta) == (grid[0]["alpha"], grid[0]["beta"])
    asr = pipeline("automatic-speech-recognition", model=str(folder))
    assert asr.type == "ctc_with_lm"
    piped = []
    for wave in waves:
        text = asr(wave, decoder_kwargs={"beam_width": 8})["text"]
        for label in ("⁇", "<s>", "</s>"):
            text = text.replace(label, "")
        piped.append(" ".join(text.split()))
    rates = compute_error_rates(piped, texts)["overall"]
    assert (rates["wer"], rates["cer"]) == pytest.approx((grid[0]["wer"], grid[0]["cer"]))
    # and `transcribe --lm` with the tuned weights gives the same text as the pipeline
    lm_decoder = LMDecoder(build_decoder(processor.tokenizer, tmp_path / "lm", grid[0]["alpha"], grid[0]["beta"]),
                           beam_width=8)
    assert [r.text for r in transcribe(model, processor, waves, lm_decoder=lm_decoder)] == piped


def test_a_full_disk_while_saving_the_tuned_lm_keeps_the_earlier_one(lm_setup: SimpleNamespace, capsys,
                                                                    monkeypatch) -> None:  # fmt: skip
    """The disk fills up while ``lm tune --save`` copies ``lm.arpa`` (a few bytes reach it): one line, the model
    folder holds its earlier LM byte for byte and nothing else; with space again the save succeeds."""
    import errno
    import os
    import shutil

    from adaptspeech.lm.processor import AdaptSpeechProcessorWithLM

    assert run_main([*tune_argv(lm_setup), "--alphas", "0.5", "--betas", "1", "--save"], capsys)[0] == 0
    before = folder_bytes(lm_setup.model)
    assert "language_model/lm.arpa" in before and "alphabet.json" in before
    real_copy = shutil.copy2

    def disk_full(src, dst, *args, **kwargs):
        with open(src, "rb") as source, open(dst, "wb") as target:
            target.write(source.read(100))
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(dst))

    monkeypatch.setattr(shutil, "copy2", disk_full)
    code, out, err = run_main([*tune_argv(lm_setup), "--alphas", "2", "--betas", "0", "--save"], capsys)
    assert code == 1 and "saved" not in out
    assert one_error_line(err) == (
        f"adaptspeech: error: saving the LM into {lm_setup.model} failed (No space left on device); "
        f"{lm_setup.model} was left as it was"
    )
    assert folder_bytes(lm_setup.model) == before
    saved = AdaptSpeechProcessorWithLM.from_pretrained(lm_setup.model)
    assert (LMDecoder(saved.decoder).alpha, LMDecoder(saved.decoder).beta) == (0.5, 1.0)

    monkeypatch.setattr(shutil, "copy2", real_copy)  # space freed
    code, out, err = run_main([*tune_argv(lm_setup), "--alphas", "2", "--betas", "0", "--save"], capsys)
    assert code == 0, err
    saved = AdaptSpeechProcessorWithLM.from_pretrained(lm_setup.model)
    assert (LMDecoder(saved.decoder).alpha, LMDecoder(saved.decoder).beta) == (2.0, 0.0)
    assert not [p.name for p in lm_setup.model.iterdir() if p.name.startswith(".")]


@pytest.mark.parametrize(
    ("variant", "message"),
    [
        ("output under a file", "argument --output: {root}/file.txt/tune.json: {root}/file.txt is a file"),
        pytest.param("output in a read-only folder", "argument --output: {root}/ro/tune.json: cannot write into "
                     "{root}/ro", marks=ROOT_SKIP),
        pytest.param("save into a read-only model", "--save: cannot write into {root}/model", marks=ROOT_SKIP),
    ],
)
def test_an_unwritable_tune_destination_is_refused_before_the_grid(variant, message, lm_setup, capsys,
                                                                  monkeypatch) -> None:  # fmt: skip
    """``lm tune --output`` / ``--save`` that cannot be written are refused before the encoder and the grid run."""
    import adaptspeech.lm.tune

    root = lm_setup.root
    (root / "file.txt").write_text("x")
    (root / "ro").mkdir()
    calls = []
    monkeypatch.setattr(adaptspeech.lm.tune, "dev_log_probs", lambda *a, **k: calls.append(1))
    extra = {"output under a file": ["--output", root / "file.txt" / "tune.json"],
             "output in a read-only folder": ["--output", root / "ro" / "tune.json"],
             "save into a read-only model": ["--save"]}[variant]
    before = folder_bytes(lm_setup.model)
    (root / "ro").chmod(0o555)
    if variant.startswith("save"):
        lm_setup.model.chmod(0o555)
    try:
        code, out, err = run_main([*tune_argv(lm_setup), *extra], capsys)
    finally:
        (root / "ro").chmod(0o755)
        lm_setup.model.chmod(0o755)
    assert code in (1, 2) and out == "" and calls == []
    assert message.format(root=root) in one_error_line(err)
    assert folder_bytes(lm_setup.model) == before


def test_an_existing_tune_output_is_kept_unless_overwrite(lm_setup, capsys) -> None:
    """Before: ``lm tune --output`` replaced any file, even one that is no tune output, as ``evaluate --output`` once
    did; now an earlier tune output is replaced with ``--overwrite`` only, any other file never, both before the
    grid runs."""
    import json

    root = lm_setup.root
    notes = root / "notes.json"
    notes.write_text('{"mine": 1}')
    for extra in ([], ["--overwrite"]):
        code, out, err = run_main([*tune_argv(lm_setup, "--output", notes), *extra], capsys)
        assert (code, out) == (1, "") and one_error_line(err) == (
            f"adaptspeech: error: --output {notes}: the file is not an adaptspeech lm tune output (JSON with the best "
            "weights and the grid; --overwrite replaces only those); remove it or choose another --output")
    assert notes.read_text() == '{"mine": 1}'
    output = root / "tune.json"
    assert run_main(tune_argv(lm_setup, "--output", output, "--alphas", "0"), capsys)[0] == 0
    first = output.read_text()
    code, out, err = run_main(tune_argv(lm_setup, "--output", output), capsys)
    assert (code, out) == (1, "") and one_error_line(err) == (
        f"adaptspeech: error: --output {output} already holds an earlier adaptspeech lm tune output: pass "
        "--overwrite to replace it, or choose another --output")
    assert output.read_text() == first
    assert run_main(tune_argv(lm_setup, "--output", output, "--overwrite"), capsys)[0] == 0
    assert len(json.loads(output.read_text())["grid"]) == 5 * 3  # the default grid replaced the one-alpha grid
