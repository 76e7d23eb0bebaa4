"""Attention / joint decoding of long recordings (adaptspeech.inference.long_form.segmenting, and the transcriber's
pass): the cut rule on known costs, one segment = unsegmented decoding exactly, cuts in the pauses of a recording made
of utterances and silences, the encoder never called on more than the chunk length, each segment's input normalised over
its own audio."""

from __future__ import annotations

import itertools
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
import torch
from helpers.model_folders import audio, model_folder, span_audio
from transformers import AutoProcessor

from adaptspeech import AdaptSpeechForJointCTCAttention
from adaptspeech.cli import main
from adaptspeech.decoding import transcribe_batch
from adaptspeech.inference.long_form.local_norm import model_input
from adaptspeech.inference.long_form.segmenting import plan_cuts
from adaptspeech.inference.transcriber import LongFormSettings, attention_segments, transcribe

UTTERANCES_S = (1.3, 1.7, 1.1)
PAUSE_S = 0.5
CHUNK_S = 2.5
SEARCH_S = 1.5


@pytest.fixture(scope="module")
def joint_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return model_folder(tmp_path_factory.mktemp("joint"), head="ctc_las", seed=2)


@pytest.fixture(scope="module")
def las_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return model_folder(tmp_path_factory.mktemp("las"), head="las", seed=3)


def utterances_and_pauses() -> tuple[np.ndarray, list[tuple[float, float]]]:
    """Chirps of ``UTTERANCES_S`` separated by ``PAUSE_S`` of faint noise (-60 dB); returns the waveform and the
    pauses' ``(start, end)`` seconds."""
    rng = np.random.default_rng(9)
    pieces, pauses, now = [], [], 0.0
    for i, seconds in enumerate(UTTERANCES_S):
        if i:
            pieces.append((1e-3 * rng.standard_normal(int(PAUSE_S * 16000))).astype(np.float32))
            pauses.append((now, now + PAUSE_S))
            now += PAUSE_S
        pieces.append(audio(seconds, seed=10 + i))
        now += seconds
    return np.concatenate(pieces), pauses


def test_cuts_at_the_middle_of_the_lowest_run_in_the_zone() -> None:
    cost = np.ones(100)
    cost[30:36] = 0.0  # zone of the first cut: frames 25..40
    cost[70:73] = 0.0  # zone of the second, from 32: frames 57..72
    cost[10] = -5.0  # outside every zone
    assert plan_cuts(cost, max_frames=40, search_frames=15) == [32, 71]
    assert plan_cuts(cost[:40], max_frames=40, search_frames=15) == []  # fits: one segment


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_segments_hold_between_m_minus_z_and_m_frames(seed: int) -> None:
    cost = np.random.default_rng(seed).standard_normal(1000)
    bounds = [0, *plan_cuts(cost, max_frames=60, search_frames=20, smoothing_frames=5), 1000]
    sizes = np.diff(bounds)
    assert (sizes[:-1] >= 40).all() and (sizes <= 60).all() and sizes[-1] >= 1
    assert sizes.sum() == 1000  # the segments tile the recording once


def test_short_recording_is_one_segment_and_decodes_exactly_as_unsegmented(joint_folder: Path) -> None:
    model = AdaptSpeechForJointCTCAttention.from_pretrained(joint_folder).eval()
    processor = AutoProcessor.from_pretrained(joint_folder)
    wave = audio(2.0, seed=4)
    inputs = model_input(wave, processor.feature_extractor)
    segments = attention_segments(model, inputs, wave, LongFormSettings(chunk_length_s=CHUNK_S, split_by="chunks"))
    assert [(s.start, s.end) for s in segments] == [(0, inputs.shape[0])]
    for method, options in (("joint", {"beam_size": 3, "ctc_weight": 0.4}), ("attention_beam", {"beam_size": 2})):
        ids = transcribe_batch(model, {"input_features": inputs[None]}, method, **options)[0]
        expected = processor.tokenizer.decode(ids, group_tokens=False, skip_special_tokens=True)
        result = transcribe(model, processor, [wave], method=method, chunk_length_s=CHUNK_S, **options)[0]
        assert len(expected) > 3 and result.text == expected
        assert result.extra["segments"] == [{"text": expected.strip(), "start": 0.0, "end": 2.0}]


def test_a_recording_of_utterances_splits_at_the_pauses_in_bounded_segments(joint_folder: Path) -> None:
    model = AdaptSpeechForJointCTCAttention.from_pretrained(joint_folder).eval()
    processor = AutoProcessor.from_pretrained(joint_folder)
    wave, pauses = utterances_and_pauses()
    inputs = model_input(wave, processor.feature_extractor)
    settings = LongFormSettings(chunk_length_s=CHUNK_S, search_length_s=SEARCH_S, split_by="chunks")
    segments = attention_segments(model, inputs, wave, settings)
    chunk_units = round(CHUNK_S / 0.04) * 4  # fbank frames in the chunk length (4 per 40 ms output frame)
    assert len(segments) == len(UTTERANCES_S)
    assert all(0 < s.end - s.start <= chunk_units for s in segments)
    assert segments[0].start == 0 and segments[-1].end == inputs.shape[0]
    assert all(a.end == b.start for a, b in itertools.pairwise(segments))
    for segment, (start, end) in zip(segments[1:], pauses, strict=True):
        assert start < segment.first_frame * 0.04 < end  # each cut inside its pause

    seen: list[torch.Tensor] = []
    encode = model.encode

    def spy(x: torch.Tensor, *args: object, **kwargs: object) -> object:
        seen.append(x[0].clone())
        return encode(x, *args, **kwargs)

    model.encode = spy
    result = transcribe(model, processor, [wave], method="joint", chunk_length_s=CHUNK_S, search_length_s=SEARCH_S,
                        split_by="chunks", beam_size=2)[0]
    assert [len(x) for x in seen] == [s.end - s.start for s in segments]  # never more than the chunk length
    model.encode = encode
    texts = []
    for s, x in zip(segments, seen, strict=True):
        own = model_input(span_audio(wave, s.start, s.end, "fbank"), processor.feature_extractor)
        torch.testing.assert_close(x, own, atol=2e-5, rtol=0)  # each segment normalised over its own audio
        ids = transcribe_batch(model, {"input_features": own[None]}, "joint", beam_size=2)[0]
        texts.append(processor.tokenizer.decode(ids, group_tokens=False, skip_special_tokens=True).strip())
    assert [span["text"] for span in result.extra["segments"]] == texts
    assert result.text == " ".join(t for t in texts if t) and len(result.text) > 10
    assert [span["start"] for span in result.extra["segments"]] == [round(s.first_frame * 0.04, 6) for s in segments]


def test_ctc_blank_cuts_need_a_ctc_head(joint_folder: Path, las_folder: Path) -> None:
    wave, _ = utterances_and_pauses()
    joint = AdaptSpeechForJointCTCAttention.from_pretrained(joint_folder).eval()
    inputs = model_input(wave, AutoProcessor.from_pretrained(joint_folder).feature_extractor)
    segments = attention_segments(joint, inputs, wave, LongFormSettings(chunk_length_s=CHUNK_S, cut_by="ctc_blank",
                                                                        search_length_s=SEARCH_S, split_by="chunks"))
    assert len(segments) >= 3 and all(s.last_frame - s.first_frame <= round(CHUNK_S / 0.04) for s in segments)
    las = AdaptSpeechForJointCTCAttention.from_pretrained(las_folder).eval()
    with pytest.raises(ValueError, match=r"ctc_blank.*needs a CTC head"):
        attention_segments(las, inputs, wave, LongFormSettings(chunk_length_s=CHUNK_S, cut_by="ctc_blank",
                                                              split_by="chunks"))
    with pytest.raises(ValueError, match="allowed values: energy, ctc_blank"):
        attention_segments(las, inputs, wave, LongFormSettings(chunk_length_s=CHUNK_S, cut_by="loudness"))


def test_transcribe_command_decodes_a_long_recording_with_attention(las_folder: Path, tmp_path: Path,
                                                                     capsys: pytest.CaptureFixture) -> None:
    wave, _ = utterances_and_pauses()
    clip = tmp_path / "long.wav"
    sf.write(clip, wave, 16000, subtype="FLOAT")
    code = main(["transcribe", "--model", str(las_folder), str(clip), "--no-progress", "--device", "cpu",
                 "--method", "attention_beam", "--beam-size", "2", "--chunk-length", str(CHUNK_S),
                 "--search-length", str(SEARCH_S)])
    out, err = capsys.readouterr()
    assert code == 0, err
    model = AdaptSpeechForJointCTCAttention.from_pretrained(las_folder)
    expected = transcribe(model, AutoProcessor.from_pretrained(las_folder), [wave], method="attention_beam",
                          chunk_length_s=CHUNK_S, search_length_s=SEARCH_S, beam_size=2)[0]
    assert len(expected.extra["segments"]) == 3
    assert out == f"{clip}\t{expected.text}\n"
    code = main(["transcribe", "--model", str(las_folder), str(clip), "--no-progress", "--device", "cpu",
                 "--method", "attention_beam", "--cut-by", "ctc_blank"])
    out, err = capsys.readouterr()
    assert code == 1 and out == ""
    assert err.splitlines()[-1].startswith(
        "adaptspeech: error: cut_by='ctc_blank' (--cut-by ctc_blank) needs a CTC head; head 'las' has none")
