"""The LM saved with a model (adaptspeech.lm.processor, adaptspeech.lm.files): what the pipeline and
``transcribe --lm`` apply, at the saved weights; a save that fails puts the earlier LM back; a cut-short LM file is
refused naming it."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest
from helpers.cli import one_error_line, run_main
from helpers.files import folder_bytes
from helpers.model_folders import audio, model_folder
from transformers import AutoProcessor, pipeline

from adaptspeech.cli import main
from adaptspeech.lm.build import build_arpa
from adaptspeech.lm.decoder import LMDecoder, build_decoder
from adaptspeech.lm.processor import save_processor_with_lm

pytest.importorskip("kenlm")
pytest.importorskip("pyctcdecode")


def test_saved_lm_is_applied_by_the_pipeline_and_transcribe(tmp_path: Path, capsys) -> None:
    folder = model_folder(tmp_path / "model")
    processor = AutoProcessor.from_pretrained(folder)
    text = tmp_path / "corpus.txt"
    text.write_text("\n".join(["abc def", "ghi jab", "abc def", "lot of letters", "ghi jab"]) + "\n")
    build_arpa(text, tmp_path / "lm", order=2)
    decoder = build_decoder(processor.tokenizer, tmp_path / "lm", alpha=1.0, beta=0.5)
    save_processor_with_lm(processor, decoder, folder)
    asr = pipeline("automatic-speech-recognition", model=str(folder))
    assert asr.type == "ctc_with_lm"
    wave = audio(1.5, seed=9)
    from adaptspeech import AdaptSpeechForCTC
    from adaptspeech.inference.transcriber import transcribe

    model = AdaptSpeechForCTC.from_pretrained(folder)
    expected = transcribe(model, processor, [wave], lm_decoder=LMDecoder(decoder))[0].text
    piped = asr(wave)["text"]  # transformers' text keeps pyctcdecode's unknown / special labels; ours drops them
    for label in ("⁇", "<s>", "</s>"):
        piped = piped.replace(label, "")
    assert " ".join(piped.split()) == expected
    import soundfile as sf

    clip = tmp_path / "clip.wav"
    sf.write(clip, wave, 16000, subtype="FLOAT")
    code = main(["transcribe", "--model", str(folder), str(clip), "--lm", str(tmp_path / "lm"), "--alpha", "1.0",
                 "--beta", "0.5", "--no-progress", "--device", "cpu"])
    out, err = capsys.readouterr()
    assert code == 0, err
    assert out.strip().split("\t", 1)[1] == expected


def test_a_save_that_fails_while_renaming_puts_the_earlier_lm_back(lm_setup: SimpleNamespace, monkeypatch) -> None:
    """The new files are complete and a rename into place fails (the last one, ``processor_config.json``): the
    files already swapped in are taken out again and the earlier ones put back, byte for byte."""
    import os

    import adaptspeech.lm.processor as lm_processor_module
    from adaptspeech.lm.processor import AdaptSpeechProcessorWithLM

    processor = AutoProcessor.from_pretrained(lm_setup.model)
    save_processor_with_lm(processor, build_decoder(processor.tokenizer, lm_setup.lm, 1.0, 0.5), lm_setup.model)
    before = folder_bytes(lm_setup.model)
    real_replace = os.replace

    def failing_replace(src, dst):
        if ".lm_save.partial" in str(src) and str(dst).endswith("processor_config.json"):
            raise OSError(5, "Input/output error", str(dst))
        return real_replace(src, dst)

    monkeypatch.setattr(lm_processor_module.os, "replace", failing_replace)
    with pytest.raises(OSError, match="Input/output error"):
        save_processor_with_lm(processor, build_decoder(processor.tokenizer, lm_setup.lm, 3.0, 0.0), lm_setup.model)
    monkeypatch.setattr(lm_processor_module.os, "replace", real_replace)
    assert folder_bytes(lm_setup.model) == before
    saved = LMDecoder(AdaptSpeechProcessorWithLM.from_pretrained(lm_setup.model).decoder)
    assert (saved.alpha, saved.beta) == (1.0, 0.5)


@pytest.mark.parametrize(
    ("damaged", "cut", "message"),
    [
        ("language_model/lm.arpa", 0.5, "language_model/lm.arpa: not a complete ARPA file"),
        ("language_model/lm.arpa", -7, "language_model/lm.arpa: not a complete ARPA file"),
        ("language_model/attrs.json", 0.5, "language_model/attrs.json: unreadable"),
        ("alphabet.json", 0.5, "alphabet.json: unreadable"),
    ],
)
def test_a_truncated_lm_in_a_model_folder_is_refused_naming_the_file(damaged, cut, message, lm_setup, capsys) -> None:
    """A cut-short file of the LM saved in a model folder (a copy that ran out of space) is refused wherever the
    folder's LM is loaded: ``transcribe --lm MODEL``, ``AdaptSpeechProcessorWithLM``, the decoder loader; the
    pipeline (transformers reads the folder through pyctcdecode and KenLM) refuses a truncated ``lm.arpa`` naming
    it too."""
    import soundfile as sf

    from adaptspeech.lm.files import load_processor_decoder
    from adaptspeech.lm.processor import AdaptSpeechProcessorWithLM

    processor = AutoProcessor.from_pretrained(lm_setup.model)
    save_processor_with_lm(processor, build_decoder(processor.tokenizer, lm_setup.lm, 1.0, 0.5), lm_setup.model)
    target = lm_setup.model / damaged
    data = target.read_bytes()
    target.write_bytes(data[: int(len(data) * cut)] if isinstance(cut, float) else data[:cut])
    clip = lm_setup.root / "clip.wav"
    sf.write(clip, lm_setup.waves[0], 16000)
    argv = ["transcribe", "--model", lm_setup.model, clip, "--lm", lm_setup.model, "--no-progress", "--device", "cpu"]
    code, out, err = run_main(argv, capsys)
    assert (code, out) == (1, "")
    assert one_error_line(err).startswith(f"adaptspeech: error: {lm_setup.model}/{message}")
    for load in (AdaptSpeechProcessorWithLM.from_pretrained, load_processor_decoder):
        with pytest.raises((OSError, ValueError), match=f"{lm_setup.model}/{message}"):
            load(lm_setup.model)
    if damaged.endswith("lm.arpa"):
        with pytest.raises(OSError, match=str(target)):
            pipeline("automatic-speech-recognition", model=str(lm_setup.model))


def test_transcribe_and_evaluate_lm_model_use_the_tuned_weights(lm_setup: SimpleNamespace, capsys) -> None:
    """``--lm MODEL`` (a model folder with the LM of ``lm tune --save``) and ``--lm MODEL/language_model`` decode
    with the saved alpha and beta; ``--alpha`` / ``--beta`` override them one by one."""
    import json

    import soundfile as sf

    from adaptspeech import AdaptSpeechForCTC
    from adaptspeech.inference.transcriber import transcribe

    processor = AutoProcessor.from_pretrained(lm_setup.model)
    save_processor_with_lm(processor, build_decoder(processor.tokenizer, lm_setup.lm, 2.5, -0.5), lm_setup.model)
    results = lm_setup.root / "results.json"

    def weights(lm: Path, *extra: str) -> tuple[float, float]:
        argv = ["evaluate", "--model", lm_setup.model, "--data", lm_setup.prepared, "--split", "dev", "--lm", lm,
                "--no-progress", "--device", "cpu", "--output", results, "--overwrite", *extra]  # replaces the last
        code, _, err = run_main(argv, capsys)
        assert code == 0, err
        options = json.loads(results.read_text())["options"]
        return options["alpha"], options["beta"]

    assert weights(lm_setup.model) == (2.5, -0.5)
    assert weights(lm_setup.model / "language_model") == (2.5, -0.5)
    assert weights(lm_setup.model, "--alpha", "0.25") == (0.25, -0.5)
    assert weights(lm_setup.model, "--beta", "3") == (2.5, 3.0)
    assert weights(lm_setup.lm) == (0.5, 1.0)  # an `lm build` folder: the defaults

    clip = lm_setup.root / "clip.wav"
    sf.write(clip, lm_setup.waves[1], 16000, subtype="FLOAT")
    model = AdaptSpeechForCTC.from_pretrained(lm_setup.model)
    tuned = LMDecoder(build_decoder(processor.tokenizer, lm_setup.lm, 2.5, -0.5))
    expected = transcribe(model, processor, [lm_setup.waves[1]], lm_decoder=tuned)[0].text
    code, out, err = run_main(["transcribe", "--model", lm_setup.model, clip, "--lm", lm_setup.model, "--no-progress",
                              "--device", "cpu"], capsys)  # fmt: skip
    assert code == 0, err
    assert out.rstrip("\n").split("\t", 1)[1] == expected
