"""CTC decoding of long recordings one speech region at a time (adaptspeech.runtime.pauses and
``recording_ctc_log_probs``): the pause rule against a frame-by-frame reference, the regions against each utterance
decoded alone, the word boundary at every pause, and ``transcribe`` / the command's ``--split-by``."""

from __future__ import annotations

import itertools
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
import torch
from helpers.model_folders import audio, model_folder
from transformers import AutoProcessor

from adaptspeech import AdaptSpeechForCTC
from adaptspeech.cli import main
from adaptspeech.data.audio import digital_silence
from adaptspeech.data.feature_types import FbankFeatures, WaveformFeatures
from adaptspeech.inference.encoding import IMPOSSIBLE_LOG_PROB, chunked_ctc_log_probs
from adaptspeech.inference.long_form.local_norm import recording_input
from adaptspeech.inference.long_form.segmenting import SegmentInput
from adaptspeech.inference.model_mixin import inputs_to_logits_ratio
from adaptspeech.inference.transcriber import LongFormSettings, attention_segments, recording_ctc_log_probs, transcribe
from adaptspeech.runtime.pauses import MIN_SPEECH_S, edge_threshold, find_pauses, pause_threshold, speech_regions

FRAME = 640  # samples per output frame of the fbank front end


def _reference_pauses(energy: np.ndarray, min_frames: int, pause_db: float) -> list[tuple[int, int]]:
    """The pause rule, frame by frame."""
    sounding = [e for e in energy if e > -95]
    speech, floor = np.percentile(sounding, 90), np.percentile(sounding, 2)
    threshold = max(speech - pause_db, min(floor + 3, speech - 10))
    pauses, run = [], None
    for t, e in enumerate([*energy, np.inf]):
        quiet = e <= -95 or e < threshold
        if quiet and run is None:
            run = t
        if not quiet and run is not None:
            if t - run >= min_frames:
                pauses.append((run, t))
            run = None
    return pauses


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_pauses_match_the_rule_frame_by_frame(seed: int) -> None:
    rng = np.random.default_rng(seed)
    energy = rng.normal(-20, 4, 400)
    for start in rng.integers(0, 390, 12):  # quiet stretches of 1-10 frames, some digital silence
        energy[start : start + rng.integers(1, 11)] = -100 if rng.random() < 0.3 else rng.normal(-60, 3)
    for min_frames, pause_db in ((1, 30), (4, 30), (6, 20)):
        assert find_pauses(energy, min_frames, pause_db) == _reference_pauses(energy, min_frames, pause_db)


def test_the_threshold_follows_the_noise_floor_and_ignores_digital_silence() -> None:
    clean = np.r_[np.full(80, -20.0), np.full(10, -58.0), np.full(10, -100.0)]
    assert pause_threshold(clean) == pytest.approx(-50.0)  # R - 30: the -100 dB frames are left out
    even = np.full(100, -20.0)
    assert pause_threshold(even) == pytest.approx(-30.0) and find_pauses(even, 1) == []  # R - 10 caps F + 3
    noisy = np.r_[np.full(70, -20.0), np.full(30, -35.0)]  # pauses at -35 dB: above R - 30 = -50
    assert pause_threshold(noisy) == pytest.approx(-32.0)  # F + 3
    assert find_pauses(noisy, 5) == [(70, 100)]
    assert pause_threshold(np.full(5, -100.0)) == -np.inf


def test_regions_lie_between_pauses_padded_within_half_a_pause() -> None:
    energy = np.full(100, -20.0)
    energy[:5] = -100  # leading digital silence
    energy[30:40] = -70  # a pause of 10 frames: middle 34
    energy[60:63] = -70  # too short to be a pause
    energy[80:] = -70  # trailing silence
    regions, boundaries = speech_regions(energy, min_pause_frames=4, pad_frames=2)
    assert regions == [(3, 32), (38, 82)] and boundaries == [34]
    regions, boundaries = speech_regions(energy, min_pause_frames=4, pad_frames=50)
    assert regions == [(0, 34), (35, 100)] and boundaries == [34]  # the boundary frame belongs to no region
    assert speech_regions(np.full(20, -20.0), 4) == ([(0, 20)], [])
    assert speech_regions(np.full(20, -100.0), 4) == ([], [])


def test_regions_grow_over_soft_edges_up_to_digital_silence_or_the_noise_floor() -> None:
    """The second threshold: a region takes the quiet frames between it and a pause's digital silence (a soft onset
    or fade-out below R - 30 dB was cut off: 0.3 of cs's 1.5-point long-form loss on 30 joined utterances), and in a
    pause of room noise the frames above the floor + 3 dB, never the noise itself."""
    energy = np.full(100, -20.0)
    energy[30:33] = -60  # fade-out, below R - 30 = -50
    energy[33:38] = -100  # digital silence
    energy[38:40] = -70  # soft onset
    regions, boundaries = speech_regions(energy, min_pause_frames=4)
    assert regions == [(0, 33), (38, 100)] and boundaries == [34]
    energy[33] = -97  # the fade's last samples: below -95 dB, not zeros
    assert speech_regions(energy, min_pause_frames=4)[0] == [(0, 34), (38, 100)]
    noisy = np.full(200, -20.0)
    noisy[50:70] = -80.0  # room noise: F = -80, grow above -77
    noisy[50:52] = -60.0  # fade-out above the noise
    noisy[68:70] = -76.0  # onset just above F + 3
    noisy[120:140] = -80.0
    regions, boundaries = speech_regions(noisy, min_pause_frames=4)
    assert regions == [(0, 52), (68, 120), (140, 200)] and boundaries == [59, 129]
    assert edge_threshold(noisy) == pytest.approx(-77.0)
    assert speech_regions(noisy, min_pause_frames=4, pad_frames=3)[0] == [(0, 55), (65, 123), (137, 200)]


def test_frames_touching_digital_silence() -> None:
    wave = np.ones(4000, dtype=np.float32)
    wave[1000:1500] = 0  # 500 zeros: digital silence
    wave[3000:3100] = 0  # 100 zeros: not
    frames = (len(wave) - 400) // 160 + 1
    expected = [bool(np.any((np.arange(t * 160, t * 160 + 400) >= 1000) & (np.arange(t * 160, t * 160 + 400) < 1500)))
                for t in range(frames)]
    assert FbankFeatures().units_touching(digital_silence(wave), frames).tolist() == expected
    samples = WaveformFeatures().units_touching(digital_silence(wave), len(wave))
    assert samples[1000:1500].all() and samples.sum() == 500


def _utterances() -> tuple[list[np.ndarray], np.ndarray, list[int]]:
    """Three 'utterances' (noisy chirps) of whole output frames, joined by 0.4 s of digital silence at offsets on the
    output-frame grid: ``(clips, recording, first sample of each clip)``."""
    clips = [audio(seconds, seed=seed)[: int(seconds * 16000) // FRAME * FRAME]
             for seconds, seed in ((1.2, 10), (0.8, 11), (1.6, 12))]
    gap = np.zeros(10 * FRAME, dtype=np.float32)
    pieces, starts, now = [], [], 0
    for clip in clips:
        pieces += [gap, clip]
        starts.append(now + len(gap))
        now += len(gap) + len(clip)
    return clips, np.concatenate([*pieces, gap]), starts


@pytest.fixture(scope="module")
def ctc_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return model_folder(tmp_path_factory.mktemp("paused"))


@pytest.mark.parametrize("backbone", ["fbank_conformer", "wav2vec2"])
def test_each_region_is_its_utterance_decoded_alone_and_pauses_are_word_boundaries(backbone: str,
                                                                                  tmp_path: Path) -> None:
    """With full attention: each region's frames equal the utterance decoded on its own (the units that read the zeros
    are left out, as the utterance alone has none), frames outside are blank, the middle of each pause is the word
    delimiter, and the grid is the unchunked model's (wav2vec2's convolutions give one frame fewer than the input
    spans)."""
    folder = model_folder(tmp_path, backbone=backbone)
    model = AdaptSpeechForCTC.from_pretrained(folder).eval()
    processor = AutoProcessor.from_pretrained(folder)
    frame = inputs_to_logits_ratio(model)  # samples per output frame: 640 (fbank), 10 (tiny wav2vec2)
    clips, recording, starts = _utterances()
    inputs = recording_input(recording, processor.feature_extractor)
    delimiter = processor.tokenizer.word_delimiter_token_id
    log_probs, regions = recording_ctc_log_probs(model, inputs, recording, LongFormSettings(chunk_length_s=2.0,
                                                 stride_length_s=0.5), word_delimiter_id=delimiter)
    whole = chunked_ctc_log_probs(model, inputs, chunk_length_s=600.0)
    assert log_probs.shape == whole.shape
    assert [a for a, _ in regions] == [s // frame for s in starts]
    for clip, (a, b) in zip(clips, regions, strict=True):
        alone = chunked_ctc_log_probs(model, recording_input(clip, processor.feature_extractor), 30.0)
        assert b - a == len(alone)
        torch.testing.assert_close(log_probs[a:b], alone, atol=1e-4, rtol=0)  # statistics in float64 vs float32
    outside = torch.ones(len(log_probs), dtype=torch.bool)
    for a, b in regions:
        outside[a:b] = False
    middles = [(b1 + a2 - 1) // 2 for (_, b1), (a2, _) in itertools.pairwise(regions)]
    for t in torch.nonzero(outside).flatten().tolist():
        label = delimiter if t in middles else model.config.pad_token_id
        assert log_probs[t, label] == 0 and (log_probs[t] == IMPOSSIBLE_LOG_PROB).sum() == log_probs.shape[1] - 1
    assert sum(1 for t in middles if outside[t]) == 2


def test_an_utterance_joined_by_zeros_off_the_frame_grid_is_read_from_its_own_samples(tmp_path: Path) -> None:
    """Clips starting at any sample (not on the 10-ms grid) and of any length: each region is the clip decoded alone,
    as ``prepare`` computed its features, not the recording's grid, which read it at another phase and dropped up
    to 35 ms at each end (cs +1.5 CER points on 30 joined test utterances, where pl and es stayed within 0.5)."""
    folder = model_folder(tmp_path)
    model = AdaptSpeechForCTC.from_pretrained(folder).eval()
    processor = AutoProcessor.from_pretrained(folder)
    clips = [audio(seconds, seed=seed) for seconds, seed in ((1.23, 20), (0.87, 21), (1.61, 22))]
    gaps = [np.zeros(n, dtype=np.float32) for n in (6977, 7123, 6451, 7001)]
    recording = np.concatenate([gaps[0], clips[0], gaps[1], clips[1], gaps[2], clips[2], gaps[3]])
    inputs = recording_input(recording, processor.feature_extractor)
    log_probs, regions = recording_ctc_log_probs(model, inputs, recording, LongFormSettings(chunk_length_s=2.0,
                                                                                            stride_length_s=0.5))
    assert len(regions) == 3
    for clip, (a, b) in zip(clips, regions, strict=True):
        alone = chunked_ctc_log_probs(model, recording_input(clip, processor.feature_extractor), 30.0)
        assert b - a == len(alone)
        torch.testing.assert_close(log_probs[a:b], alone, atol=1e-4, rtol=0)
    off_grid = inputs.utterance_samples(7000 // 160, (6977 + 19680) // 160)
    assert off_grid == (6977, 6977 + len(clips[0]))
    noisy = recording + np.random.default_rng(0).normal(0, 1e-3, len(recording)).astype(np.float32)
    assert recording_input(noisy, processor.feature_extractor).utterance_samples(44, 123) is None  # no zeros: grid


def test_short_or_pauseless_recordings_decode_as_chunks(ctc_folder: Path) -> None:
    model = AdaptSpeechForCTC.from_pretrained(ctc_folder).eval()
    processor = AutoProcessor.from_pretrained(ctc_folder)
    _, recording, _ = _utterances()
    for wave, chunk in ((recording, 60.0), (audio(5.0, seed=4), 2.0)):  # one call; no pause in a chirp
        inputs = recording_input(wave, processor.feature_extractor)
        paused, regions = recording_ctc_log_probs(model, inputs, wave, LongFormSettings(chunk_length_s=chunk,
                                                                                        stride_length_s=0.5))
        # no pause: the same chunked computation
        torch.testing.assert_close(paused, chunked_ctc_log_probs(model, inputs, chunk, 0.5), atol=0, rtol=0)
        assert regions == [(0, len(paused))]


@pytest.mark.parametrize("backbone", ["fbank_conformer", "wav2vec2"])
def test_a_click_between_two_pauses_is_not_decoded(backbone: str, tmp_path: Path) -> None:
    """A burst shorter than ``MIN_SPEECH_S`` between two pauses is no speech region (10 samples once crashed
    wav2vec2's feature encoder: no frame from a 10-sample input); one of 0.15 s is decoded as its own utterance."""
    folder = model_folder(tmp_path, backbone=backbone)
    model = AdaptSpeechForCTC.from_pretrained(folder).eval()
    processor = AutoProcessor.from_pretrained(folder)
    rng = np.random.default_rng(0)
    gap = np.zeros(8000, dtype=np.float32)
    found = {}
    for samples in (10, 300, int(1.5 * MIN_SPEECH_S * 16000)):
        burst = (0.3 * rng.standard_normal(samples)).astype(np.float32)
        wave = np.concatenate([audio(1.0, seed=1), gap, burst, gap, audio(1.0, seed=2)])
        result = transcribe(model, processor, [wave], chunk_length_s=1.5, stride_length_s=0.3)[0]
        found[samples] = [(r["start"], r["end"]) for r in result.extra["speech"]]
    assert [len(spans) for spans in found.values()] == [2, 2, 3]
    start, end = found[2400][1]
    assert start == pytest.approx(1.5, abs=0.05) and end - start == pytest.approx(0.15, abs=0.05)


def test_transcribe_joins_the_utterances_texts_and_the_command_takes_split_by(ctc_folder: Path, tmp_path: Path,
                                                                             capsys) -> None:
    model = AdaptSpeechForCTC.from_pretrained(ctc_folder)
    processor = AutoProcessor.from_pretrained(ctc_folder)
    clips, recording, starts = _utterances()
    alone = [t.text for t in transcribe(model, processor, clips)]
    result = transcribe(model, processor, [recording], chunk_length_s=2.0, stride_length_s=0.5)[0]
    assert result.text == " ".join(t for t in alone if t) and len(result.text) > 10
    assert [r["start"] for r in result.extra["speech"]] == pytest.approx([s / 16000 for s in starts])
    chunks = transcribe(model, processor, [recording], chunk_length_s=2.0, stride_length_s=0.5, split_by="chunks")[0]
    assert "speech" not in chunks.extra
    with pytest.raises(ValueError, match="split_by 'vad'; allowed values: pauses, chunks"):
        transcribe(model, processor, [recording], split_by="vad")
    clip = tmp_path / "long.flac"
    sf.write(clip, recording, 16000)
    for split, expected in (("pauses", result.text), ("chunks", chunks.text)):
        code = main(["transcribe", "--model", str(ctc_folder), str(clip), "--no-progress", "--device", "cpu",
                     "--chunk-length", "2", "--stride-length", "0.5", "--split-by", split])
        out, err = capsys.readouterr()
        assert code == 0, err
        assert out.rstrip("\n").split("\t")[1] == expected


def test_attention_decoding_splits_at_pauses_first(tmp_path: Path) -> None:
    """Joint decoding with ``split_by="pauses"``: an utterance no longer than the chunk is one segment decoded exactly
    as alone; a longer one is cut inside by the length rule, its segments tiling its region; pauses are not decoded."""
    from adaptspeech import AdaptSpeechForJointCTCAttention

    folder = model_folder(tmp_path, head="ctc_las", seed=2)
    model = AdaptSpeechForJointCTCAttention.from_pretrained(folder).eval()
    processor = AutoProcessor.from_pretrained(folder)
    clips, recording, starts = _utterances()  # 1.2 s, 0.8 s, 1.6 s
    inputs = recording_input(recording, processor.feature_extractor)
    segments = attention_segments(model, inputs, recording, LongFormSettings(chunk_length_s=1.0, search_length_s=0.3))
    first_units = [s // 160 for s in starts]  # fbank frames
    ends = [u + len(recording_input(c, processor.feature_extractor)) for u, c in zip(first_units, clips, strict=True)]
    by_clip = [[s for s in segments if u <= s.start < e] for u, e in zip(first_units, ends, strict=True)]
    assert sum(map(len, by_clip)) == len(segments)
    assert [len(group) for group in by_clip] == [2, 1, 2]
    for group, u, e in zip(by_clip, first_units, ends, strict=True):
        assert group[0].start == u and group[-1].end == e
        assert all(a.end == b.start for a, b in itertools.pairwise(group))
        assert all(s.last_frame - s.first_frame <= 25 for s in group)
        assert all((s.read_as is SegmentInput.UTTERANCE) == (len(group) == 1) for s in group)
    options = {"beam_size": 2, "ctc_weight": 0.3}
    result = transcribe(model, processor, [recording], method="joint", chunk_length_s=1.0, search_length_s=0.3,
                        **options)[0]
    alone = transcribe(model, processor, [clips[1]], method="joint", chunk_length_s=1.0, **options)[0].text
    assert len(result.extra["segments"]) == 5 and result.extra["segments"][2]["text"] == alone and len(alone) > 2
    assert result.extra["segments"][2]["start"] == pytest.approx(starts[1] / 16000)


@pytest.mark.parametrize(("num_samples", "num_frames"), [(6400, 10), (6399, 10), (7000, 10), (640, 3)])
def test_frame_energies_in_pieces_are_those_at_once(num_samples: int, num_frames: int):
    # an hour's samples at once in float64 (and their squares) took 920 MB: the frames are computed a piece at a time
    from adaptspeech.runtime.pauses import energy_cost

    wave = np.random.default_rng(3).standard_normal(num_samples).astype(np.float32)
    whole = energy_cost(wave, 640, num_frames, piece_frames=10**9)
    for piece in (1, 3, 4):
        np.testing.assert_array_equal(energy_cost(wave, 640, num_frames, piece_frames=piece), whole)
    padded = np.zeros(num_frames * 640, np.float64)
    padded[: min(num_samples, len(padded))] = wave[: len(padded)]
    expected = 10 * np.log10(np.maximum(np.square(padded).reshape(num_frames, 640).mean(-1), 1e-10))
    np.testing.assert_allclose(whole, expected, rtol=1e-12)
