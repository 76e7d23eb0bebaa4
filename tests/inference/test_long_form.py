"""Long recordings chunk by chunk (adaptspeech.inference.long_form): the chunks tile the recording, the stitched
CTC output equals the unchunked one exactly where the encoder's receptive field fits in the stride, and the
``transcribe`` command gives the same text chunked and unchunked, with timestamps as JSON."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
import torch
from inference_helpers import audio, model_folder
from transformers import AutoProcessor

from adaptspeech import AdaptSpeechForCTC
from adaptspeech.cli import main
from adaptspeech.data.audio import log_mel
from adaptspeech.inference.long_form import chunked_ctc_log_probs, model_input, plan_chunks
from adaptspeech.inference.transcriber import transcribe


@pytest.mark.parametrize(("units", "per_frame", "chunk", "stride"), [(1000, 4, 25, 5), (997, 4, 25, 5),
                                                                     (48000, 320, 30, 0), (100, 4, 25, 5)])
def test_kept_frames_tile_the_recording_once(units: int, per_frame: int, chunk: int, stride: int) -> None:
    chunks = plan_chunks(units, per_frame, chunk, stride)
    frames = -(-units // per_frame)
    covered = []
    for c in chunks:
        n = -(-(c.end - c.start) // per_frame)
        covered.extend(range(c.first_frame + c.keep_from, c.first_frame + (n if c.keep_to is None else c.keep_to)))
        assert c.start == c.first_frame * per_frame
    assert covered == list(range(frames))


def _unchunked(model: AdaptSpeechForCTC, inputs: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        hidden, _, _, _ = model.encode(inputs[None])
        return model.ctc_head(hidden).float().log_softmax(-1)[0]


def test_chunked_equals_unchunked_for_a_local_encoder(tmp_path: Path) -> None:
    """The stitching rule, exactly: no attention layer (receptive field +-1 output frame), so every kept frame of a
    chunk with 0.2 s of stride is the unchunked frame."""
    folder = model_folder(tmp_path, backbone_overrides={"num_hidden_layers": 0})
    model = AdaptSpeechForCTC.from_pretrained(folder).eval()
    processor = AutoProcessor.from_pretrained(folder)
    inputs = model_input(audio(7.3, seed=1), processor.feature_extractor)
    whole = _unchunked(model, inputs)
    chunked = chunked_ctc_log_probs(model, inputs, chunk_length_s=1.0, stride_length_s=0.2, batch_size=3)
    assert chunked.shape == whole.shape
    torch.testing.assert_close(chunked, whole, atol=1e-5, rtol=0)


def test_one_chunk_equals_unchunked_with_attention(tmp_path: Path) -> None:
    folder = model_folder(tmp_path)
    model = AdaptSpeechForCTC.from_pretrained(folder).eval()
    inputs = model_input(audio(2.0, seed=2), AutoProcessor.from_pretrained(folder).feature_extractor)
    torch.testing.assert_close(chunked_ctc_log_probs(model, inputs, chunk_length_s=30.0), _unchunked(model, inputs))
    chunked = chunked_ctc_log_probs(model, inputs, chunk_length_s=1.0, stride_length_s=0.3)
    assert chunked.shape == _unchunked(model, inputs).shape  # full attention: close, not equal (module docstring)


def test_transcribe_command_chunked_equals_unchunked_with_json_timestamps(tmp_path: Path, capsys) -> None:
    folder = model_folder(tmp_path / "model", backbone_overrides={"num_hidden_layers": 0})
    wave = audio(6.0, seed=3)
    clip = tmp_path / "clip.wav"
    sf.write(clip, wave, 16000, subtype="FLOAT")
    outputs = {}
    for name, chunking in (("whole", ["--chunk-length", "60"]), ("chunked", ["--chunk-length", "1.5",
                                                                            "--stride-length", "0.3"])):
        code = main(["transcribe", "--model", str(folder), str(clip), "--no-progress", "--timestamps", "word",
                     "--device", "cpu", *chunking])
        out, err = capsys.readouterr()
        assert code == 0, err
        outputs[name] = json.loads(out)
    assert outputs["chunked"] == outputs["whole"]
    result = outputs["whole"]
    model = AdaptSpeechForCTC.from_pretrained(folder)
    expected = transcribe(model, AutoProcessor.from_pretrained(folder), [wave], timestamps="word")[0]
    assert result["text"] == expected.text and len(result["text"]) > 5
    assert " ".join(c["text"] for c in result["chunks"]) == result["text"].strip()
    starts = [c["start"] for c in result["chunks"]]
    assert starts == sorted(starts) and all(c["end"] > c["start"] for c in result["chunks"])
    assert np.isclose(result["seconds"], 6.0)



def test_chunked_log_probs_of_a_routed_model_use_the_languages_head(tmp_path: Path) -> None:
    """A model routing ro + cs where cs has its own CTC head: the recording's language picks the head, as in the
    forward (the chunked path asked for the active languages' head and was refused)."""
    folder = model_folder(tmp_path, language_heads={"cs": {"vocab_size": 7}})
    model = AdaptSpeechForCTC.from_pretrained(folder).eval()
    model.set_active_languages(["ro", "cs"])
    inputs = model_input(audio(1.0, seed=5), AutoProcessor.from_pretrained(folder).feature_extractor)
    for language, vocab in (("cs", 7), ("ro", model.config.vocab_size)):
        ids = torch.tensor([model.language_to_id[language]])
        with torch.no_grad():
            expected = model(input_features=inputs[None], lang_ids=ids).logits.float().log_softmax(-1)[0]
        chunked = chunked_ctc_log_probs(model, inputs, lang_ids=ids)
        assert chunked.shape == (expected.shape[0], vocab)
        torch.testing.assert_close(chunked, expected)


def test_long_recording_normalisation_leaves_digital_silence_out(tmp_path: Path) -> None:
    """Two clips joined by 1 s of zeros: with skip_digital_silence the mean and variance come from the frames that
    carry signal (reference computed here from the raw filterbanks); without zeros both ways agree exactly."""
    extractor = AutoProcessor.from_pretrained(model_folder(tmp_path)).feature_extractor
    recording = np.concatenate([audio(2.0, seed=6), np.zeros(16000, np.float32), audio(1.5, seed=7)])
    raw = np.asarray(log_mel(recording, sr=16000, n_mels=extractor.n_mels), dtype=np.float64)
    signal = raw.max(axis=1) > np.log(1e-10) + 1.0
    assert 90 <= (~signal).sum() <= 100  # the second of zeros (100 frames, less the windows reaching into speech)
    kept = raw[signal]
    expected = (raw - kept.mean(0)) / np.sqrt(kept.var(0) + 1e-7)
    skipped = model_input(recording, extractor, skip_digital_silence=True)
    np.testing.assert_allclose(skipped.numpy(), expected, atol=1e-4)
    default = model_input(recording, extractor)
    assert default[torch.from_numpy(signal)].mean() > 0.2  # the zeros' frames drag the plain mean below the speech
    assert abs(float(skipped[torch.from_numpy(signal)].mean())) < 1e-4
    clean = audio(3.0, seed=8)
    torch.testing.assert_close(model_input(clean, extractor, skip_digital_silence=True), model_input(clean, extractor),
                               atol=0, rtol=0)
