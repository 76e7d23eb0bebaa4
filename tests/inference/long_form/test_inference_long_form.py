"""Long recordings chunk by chunk (adaptspeech.inference.encoding): the chunks tile the recording, the stitched
CTC output equals the unchunked one exactly where the encoder's receptive field fits in the stride, and the
``transcribe`` command prints the API's result, with timestamps as JSON (the local normalisation of each chunk:
test_inference_local_norm.py)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
import torch
from helpers.model_folders import audio, model_folder
from transformers import AutoProcessor

from adaptspeech import AdaptSpeechForCTC
from adaptspeech.cli import main
from adaptspeech.inference.encoding import chunked_ctc_log_probs, plan_chunks
from adaptspeech.inference.long_form.local_norm import model_input
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


def test_transcribe_command_equals_the_api_chunked_and_unchunked_with_json_timestamps(tmp_path: Path,
                                                                                    capsys) -> None:
    """The command prints what ``transcribe`` returns, unchunked and chunked (each chunk normalised over its own
    audio, so the two differ slightly: test_inference_local_norm.py), as JSON with word timestamps."""
    folder = model_folder(tmp_path / "model", backbone_overrides={"num_hidden_layers": 0})
    wave = audio(6.0, seed=3)
    clip = tmp_path / "clip.wav"
    sf.write(clip, wave, 16000, subtype="FLOAT")
    model = AdaptSpeechForCTC.from_pretrained(folder)
    processor = AutoProcessor.from_pretrained(folder)
    texts = []
    for chunk, stride, window in ((60.0, 5.0, 4.0), (1.5, 0.3, 4.0), (1.5, 0.3, 0.5)):
        code = main(["transcribe", "--model", str(folder), str(clip), "--no-progress", "--timestamps", "word",
                     "--device", "cpu", "--chunk-length", str(chunk), "--stride-length", str(stride),
                     "--norm-window", str(window)])
        out, err = capsys.readouterr()
        assert code == 0, err
        result = json.loads(out)
        expected = transcribe(model, processor, [wave], timestamps="word", chunk_length_s=chunk,
                              stride_length_s=stride, norm_window_s=window)[0]
        texts.append(result["text"])
        assert result["text"] == expected.text and len(result["text"]) > 5
        assert result["chunks"] == expected.chunks
        assert " ".join(c["text"] for c in result["chunks"]) == result["text"].strip()
        starts = [c["start"] for c in result["chunks"]]
        assert starts == sorted(starts) and all(c["end"] > c["start"] for c in result["chunks"])
        assert np.isclose(result["seconds"], 6.0)
    assert texts[2] != texts[1]  # --norm-window reaches the normalisation


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
