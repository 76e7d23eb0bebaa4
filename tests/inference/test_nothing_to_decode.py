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
from inference_helpers import audio, model_folder
from transformers import AutoProcessor

from adaptspeech import AdaptSpeechForCTC, AdaptSpeechForJointCTCAttention
from adaptspeech.cli import main
from adaptspeech.inference.local_norm import recording_input
from adaptspeech.inference.long_form import IMPOSSIBLE_LOG_PROB, paused_ctc_log_probs
from adaptspeech.inference.segmenting import plan_segments
from adaptspeech.inference.transcriber import transcribe


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
    log_probs, regions = paused_ctc_log_probs(model, inputs, wave, chunk_length_s=1.0, stride_length_s=0.25)
    assert regions == []
    assert len(log_probs) == int(model._get_feat_extract_output_lengths(len(inputs)))
    assert (log_probs[:, model.config.pad_token_id] == 0).all()
    assert (log_probs == IMPOSSIBLE_LOG_PROB).sum() == log_probs.numel() - len(log_probs)
    for method in ("ctc_greedy", "ctc_beam"):
        result = transcribe(model, processor, [wave], method=method, chunk_length_s=1.0, stride_length_s=0.25)[0]
        assert result.text == "" and result.extra["speech"] == []


def test_empty_silent_or_frameless_clips_give_no_text_and_the_others_are_kept(ctc) -> None:
    model, processor = ctc
    good = audio(1.0, seed=1)
    tiny = good[:10]  # wav2vec2: no output frame; fbank: one padded window
    silent = np.zeros(16000, np.float32)
    empty = np.zeros(0, np.float32)
    alone = transcribe(model, processor, [good])[0].text
    assert alone
    results = transcribe(model, processor, [good, empty, silent, tiny, good], timestamps="word")
    assert [r.text for r in results] == [alone, "", "", results[3].text, alone]
    assert results[1].extra["skipped"] == "no samples" and results[1].chunks == []
    assert results[2].extra["skipped"] == "digital silence only" and results[2].chunks == []
    if model.main_input_name == "input_values":  # wav2vec2's feature encoder gives no frame from 10 samples
        assert results[3].text == "" and results[3].extra["skipped"] == "too short for one output frame (10 samples)"
    else:
        assert "skipped" not in results[3].extra


def test_attention_decoding_of_a_recording_without_speech_decodes_nothing(tmp_path: Path) -> None:
    folder = model_folder(tmp_path, head="ctc_las", seed=2)
    model = AdaptSpeechForJointCTCAttention.from_pretrained(folder).eval()
    processor = AutoProcessor.from_pretrained(folder)
    wave = _click_between_pauses()
    inputs = recording_input(wave, processor.feature_extractor)
    assert plan_segments(model, inputs, wave, chunk_length_s=1.0, search_length_s=0.3, split_by="pauses") == []
    result = transcribe(model, processor, [wave], method="joint", chunk_length_s=1.0, search_length_s=0.3,
                        beam_size=2)[0]
    assert result.text == "" and result.extra["segments"] == []


def test_the_command_warns_and_goes_on_to_the_next_file(tmp_path: Path, capsys) -> None:
    folder = model_folder(tmp_path / "model", backbone="wav2vec2")
    files = []
    for name, wave in (("a.wav", audio(1.0, seed=1)), ("tiny.wav", audio(1.0, seed=1)[:10]),
                       ("b.wav", audio(1.0, seed=2))):
        sf.write(tmp_path / name, wave, 16000)
        files.append(str(tmp_path / name))
    torch.manual_seed(0)
    code = main(["transcribe", "--model", str(folder), *files, "--no-progress", "--device", "cpu"])
    out, err = capsys.readouterr()
    assert code == 0, err
    lines = out.rstrip("\n").split("\n")
    assert [line.split("\t")[0] for line in lines] == files
    assert lines[1] == f"{files[1]}\t" and lines[0].split("\t")[1] and lines[2].split("\t")[1]
    assert f"warning: {files[1]}: no text: too short for one output frame (10 samples)" in err


def test_a_forward_pass_on_a_frameless_input_is_refused_in_one_line(tmp_path: Path) -> None:
    """transformers' pipeline calls the model itself: a clip too short for one output frame gets a line naming the
    input and its length, not GroupNorm's ``Expected more than 1 value per channel``."""
    from transformers import pipeline

    folder = model_folder(tmp_path, backbone="wav2vec2")
    model = AdaptSpeechForCTC.from_pretrained(folder).eval()
    with pytest.raises(ValueError, match="input_values of 10 samples is too short for one output frame"):
        model(input_values=torch.randn(1, 10))
    shortest = next(n for n in range(1, 1000) if int(model._get_feat_extract_output_lengths(n)) > 0)
    assert model(input_values=torch.randn(1, shortest)).logits.shape[1] == 1
    with pytest.raises(ValueError, match=f"input_values of {shortest - 1} samples is too short"):
        model(input_values=torch.randn(1, shortest - 1))
    asr = pipeline("automatic-speech-recognition", model=str(folder), device="cpu")
    with pytest.raises(ValueError, match="input_values of 10 samples is too short for one output frame"):
        asr({"raw": audio(1.0, seed=1)[:10], "sampling_rate": 16000})
