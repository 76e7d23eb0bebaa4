"""Recordings with nothing to decode give no text, not a guess and not a crash that loses the other recordings.

Found: a wav2vec2 model crashed on a clip too short for one output frame (10 samples), taking the rest of the batch
and the command's later files with it; an empty or all-zero clip of an fbank model came out as text; a long
recording whose only sound is a click between pauses was decoded whole, as if it had no pause (CTC), or as one
segment longer than the chunk (attention / joint)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
import torch
from helpers.model_folders import audio, model_folder
from transformers import AutoProcessor

from adaptspeech import AdaptSpeechForCTC, AdaptSpeechForJointCTCAttention
from adaptspeech.cli import main
from adaptspeech.inference.encoding import IMPOSSIBLE_LOG_PROB
from adaptspeech.inference.long_form.local_norm import recording_input
from adaptspeech.inference.transcriber import (
    LongFormSettings,
    attention_segments,
    recording_ctc_log_probs,
    transcribe,
)


def _click_between_pauses() -> np.ndarray:
    """2.5 s of digital silence with a 20 ms burst in the middle: no speech region (shorter than MIN_SPEECH_S)."""
    burst = (0.3 * np.random.default_rng(0).standard_normal(320)).astype(np.float32)
    return np.concatenate([np.zeros(20000, np.float32), burst, np.zeros(20000, np.float32)])


@pytest.fixture(scope="module", params=["fbank_conformer", "wav2vec2"])
def ctc(request, tmp_path_factory) -> tuple[AdaptSpeechForCTC, object]:
    folder = model_folder(tmp_path_factory.mktemp(request.param), backbone=request.param)
    return AdaptSpeechForCTC.from_pretrained(folder).eval(), AutoProcessor.from_pretrained(folder)


def test_a_long_recording_without_speech_is_blank(ctc) -> None:
    model, processor = ctc
    wave = _click_between_pauses()
    inputs = recording_input(wave, processor.feature_extractor)
    log_probs, regions = recording_ctc_log_probs(model, inputs, wave, LongFormSettings(chunk_length_s=1.0,
                                                                                     stride_length_s=0.25))
    assert regions == []
    assert len(log_probs) == int(model._get_feat_extract_output_lengths(len(inputs)))
    assert (log_probs[:, model.config.pad_token_id] == 0).all()
    assert (log_probs == IMPOSSIBLE_LOG_PROB).sum() == log_probs.numel() - len(log_probs)
    for method in ("ctc_greedy", "ctc_beam"):
        result = transcribe(model, processor, [wave], method=method, chunk_length_s=1.0, stride_length_s=0.25)[0]
        assert result.text == "" and result.extra["speech"] == []


#: the fewest samples the tiny models decode: at least one encoder stride (``prepare`` calls a clip with fewer
#: ``too_short``: ``samples // stride`` encoder frames for at least one label) and the front end's receptive field:
#: fbank 4 x 160-sample hops = 640; the tiny wav2vec2 (kernels 10, 3, strides 5, 2) a 20-sample receptive field
#: beside its 10-sample stride (XLS-R: 400 and 320).
SHORTEST = {"input_features": 640, "input_values": 20}


def nothing_cases(shortest: int) -> dict[str, tuple[np.ndarray, str]]:
    """``{name: (waveform, the reason it has nothing to decode)}``."""
    good = audio(1.0, seed=1)
    quiet = (good / np.abs(good).max() * 5e-5).astype(np.float32)
    return {
        "empty": (np.zeros(0, np.float32), "no samples"),
        "zeros": (np.zeros(16000, np.float32), "digital silence only"),
        "nan": (np.full(16000, np.nan, np.float32), "non-finite samples (NaN or infinity)"),
        "inf": (np.concatenate([good[:8000], [np.inf], good[8000:]]).astype(np.float32),
                "non-finite samples (NaN or infinity)"),
        "quiet": (quiet, "silent (peak amplitude 5.00e-05 < 1e-04)"),
        "one_sample": (good[:1], f"too short for one output frame (1 samples; the model needs at least {shortest})"),
        "just_short": (good[:shortest - 1],
                       f"too short for one output frame ({shortest - 1} samples; the model needs at least {shortest})"),
    }


def test_empty_silent_or_frameless_clips_give_no_text_and_the_others_are_kept(ctc) -> None:
    """An fbank clip shorter than one encoder frame was padded to one 25-ms window and decoded as a letter, and NaN
    samples decoded as text; ``prepare`` calls such clips too short / nan / silent."""
    model, processor = ctc
    shortest = SHORTEST[model.main_input_name]
    good = audio(1.0, seed=1)
    cases = nothing_cases(shortest)
    alone = transcribe(model, processor, [good])[0].text
    assert alone
    waves = [good, *(wave for wave, _ in cases.values()), good[:shortest], good]
    results = transcribe(model, processor, waves, timestamps="word")
    assert [r.text for r in results[:-2]] == [alone] + [""] * len(cases) and results[-1].text == alone
    for result, (name, (_, reason)) in zip(results[1:], cases.items()):
        assert result.extra["skipped"] == reason and result.chunks == [], name
    assert "skipped" not in results[-2].extra  # the shortest clip with one output frame is decoded


def test_attention_decoding_of_a_recording_without_speech_decodes_nothing(tmp_path: Path) -> None:
    folder = model_folder(tmp_path, head="ctc_las", seed=2)
    model = AdaptSpeechForJointCTCAttention.from_pretrained(folder).eval()
    processor = AutoProcessor.from_pretrained(folder)
    wave = _click_between_pauses()
    inputs = recording_input(wave, processor.feature_extractor)
    assert attention_segments(model, inputs, wave, LongFormSettings(chunk_length_s=1.0, search_length_s=0.3)) == []
    result = transcribe(model, processor, [wave], method="joint", chunk_length_s=1.0, search_length_s=0.3,
                        beam_size=2)[0]
    assert result.text == "" and result.extra["segments"] == []


@pytest.mark.parametrize("backbone", ["fbank_conformer", "wav2vec2"])
def test_the_command_names_each_clip_without_text_and_goes_on_to_the_next_file(backbone, tmp_path: Path,
                                                                             capsys) -> None:
    """``transcribe`` of a 1-sample or 10-ms wav printed ``h`` with exit 0 for an fbank model (``prepare`` calls the
    clip too short): a clip with nothing to decode is one line on stderr, no stdout line, exit 1; the other files
    get their text."""
    folder = model_folder(tmp_path / "model", backbone=backbone)
    shortest = SHORTEST["input_features" if backbone == "fbank_conformer" else "input_values"]
    short = 160 if backbone == "fbank_conformer" else 10  # 10 ms of fbank audio; wav2vec2: below its receptive field
    files = []
    for name, wave in (("a.wav", audio(1.0, seed=1)), ("one.wav", audio(1.0, seed=1)[:1]),
                       ("short.wav", audio(1.0, seed=1)[:short]), ("b.wav", audio(1.0, seed=2))):
        sf.write(tmp_path / name, wave, 16000)
        files.append(str(tmp_path / name))
    torch.manual_seed(0)
    capsys.readouterr()
    code = main(["transcribe", "--model", str(folder), *files, "--no-progress", "--device", "cpu"])
    out, err = capsys.readouterr()
    assert code == 1, err
    lines = out.rstrip("\n").split("\n")
    assert [line.split("\t")[0] for line in lines] == [files[0], files[3]]
    assert all(line.split("\t")[1] for line in lines)
    assert err.splitlines() == [
        f"adaptspeech: error: {files[1]}: no text: too short for one output frame (1 samples; the model needs at "
        f"least {shortest})",
        f"adaptspeech: error: {files[2]}: no text: too short for one output frame ({short} samples; the model needs "
        f"at least {shortest})",
    ]


def test_a_forward_pass_on_a_frameless_input_is_refused_in_one_line(tmp_path: Path) -> None:
    """A clip too short for one output frame gets a line naming the input and its length, not GroupNorm's
    ``Expected more than 1 value per channel``."""
    folder = model_folder(tmp_path, backbone="wav2vec2")
    model = AdaptSpeechForCTC.from_pretrained(folder).eval()
    with pytest.raises(ValueError, match="input_values of 10 samples is too short for one output frame"):
        model(input_values=torch.randn(1, 10))
    shortest = next(n for n in range(1, 1000) if int(model._get_feat_extract_output_lengths(n)) > 0)
    assert model(input_values=torch.randn(1, shortest)).logits.shape[1] == 1
    with pytest.raises(ValueError, match=f"input_values of {shortest - 1} samples is too short"):
        model(input_values=torch.randn(1, shortest - 1))


@pytest.fixture(scope="module", params=["fbank_conformer", "wav2vec2", "ctc_las"])
def asr(request, tmp_path_factory):
    """transformers' pipeline on a saved model folder (CTC fbank, CTC wav2vec2, joint fbank)."""
    from transformers import pipeline

    backbone, head = ("fbank_conformer", "ctc_las") if request.param == "ctc_las" else (request.param, "ctc")
    folder = model_folder(tmp_path_factory.mktemp(request.param), backbone=backbone, head=head, seed=2)
    pipe = pipeline("automatic-speech-recognition", model=str(folder), device="cpu")
    if head == "ctc_las":
        pipe.model.generation_config.num_beams = 2
        pipe.model.generation_config.max_new_tokens = 8
    return pipe


def test_the_pipeline_gives_no_text_for_clips_with_nothing_to_decode(asr, caplog) -> None:
    """transformers' pipeline returned ``'h'`` for an empty array, ``'dhz hh'`` for a second of zeros and ``''``
    for NaN samples of an fbank model (and a wav2vec2 model raised on a 10-sample clip): the rule of ``transcribe``
    holds: no text, ``"skipped"`` saying why, a warning, and the other inputs of a call decoded as alone."""
    shortest = SHORTEST[asr.model.main_input_name]
    good = audio(1.0, seed=1)
    alone = asr(good)
    assert set(alone) == {"text"}
    for name, (wave, reason) in nothing_cases(shortest).items():
        caplog.clear()
        with caplog.at_level("WARNING", logger="adaptspeech.pipeline"):
            assert asr({"raw": wave, "sampling_rate": 16000}) == {"text": "", "skipped": reason}, name
        assert [r.getMessage() for r in caplog.records] == [f"no text: {reason}"], name
    assert asr(good[:shortest]).get("skipped") is None
    cases = nothing_cases(shortest)
    batch = asr([good, cases["empty"][0], cases["nan"][0], good, cases["one_sample"][0]], batch_size=2)
    assert [r["text"] for r in batch] == [alone["text"], "", "", alone["text"], ""]
    assert [r.get("skipped") for r in batch] == [None, "no samples", "non-finite samples (NaN or infinity)", None,
                                                 cases["one_sample"][1]]
    if asr.type == "ctc":
        assert asr(cases["zeros"][0], return_timestamps="word") == {"text": "", "chunks": [],
                                                                     "skipped": "digital silence only"}
        assert asr(cases["zeros"][0], chunk_length_s=0.5, stride_length_s=0.1)["skipped"] == "digital silence only"
