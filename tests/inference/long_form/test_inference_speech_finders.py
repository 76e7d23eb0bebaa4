"""The speech-region finders (adaptspeech.inference.long_form.speech_finders): the energy rule and silero-vad (its real
model, from the silero-vad wheel) on speech spoken by espeak-ng with white noise in the pauses; the choice reaching
``transcribe``'s splitter and the streaming endpointer; bad settings and a missing package refused in one line."""

from __future__ import annotations

import itertools
import sys

import numpy as np
import pytest
import soundfile as sf
import soxr
import torch
from helpers.cli import one_error_line, run_main
from transformers import Wav2Vec2Processor

from adaptspeech import AdaptSpeechForCTC
from adaptspeech.data.espeak import EspeakSynthesizer
from adaptspeech.inference.long_form.recording import FrameGrid
from adaptspeech.inference.long_form.regions import find_speech
from adaptspeech.inference.long_form.silero import MissingSileroError
from adaptspeech.inference.long_form.speech_finders import SPEECH_FINDERS, SpeechFinderSettings, samples_to_frames
from adaptspeech.inference.streaming.recognizer import StreamingRecognizer, check_stream_finder
from adaptspeech.inference.transcriber import transcribe
from adaptspeech.testing.tiny_models import save_tiny_model

SENTENCES = (("Bună ziua ce mai faci astăzi", "ro+m3"), ("Mulțumesc foarte bine", "ro+f2"),
             ("Ne vedem mâine la școală", "ro+m1"))
LEAD_S, GAP_S = 0.5, 0.6
"""Noise before the first sentence, and between two (0.6 s: silero's probabilities fall 0.2-0.3 s after speech ends
in noise, so a 0.3 s pause can be bridged; the bench in docs/benchmarks.md measures both lengths)."""
ONSET_TOLERANCE_S = 0.064
"""Two silero windows of 32 ms: its decision is per window and a window at the onset may still read mostly noise."""
OFFSET_TOLERANCE_S = 0.4
"""silero's probability falls below ``threshold - 0.15`` some time after the speech ends in noise (its recurrent state
decays): on these clips its regions end 0.07-0.13 s late at -60 dBFS, 0.11-0.29 s at -50 and 0.25-0.33 s at -40 (the
energy rule's within 0.03 s), so a region may end up to 0.4 s late, never more than two windows early."""


@pytest.fixture(scope="module")
def sentences() -> list[np.ndarray]:
    engine = EspeakSynthesizer()
    spoken = [engine.synthesize(text, voice, rate=160) for text, voice in SENTENCES]
    return [soxr.resample(pcm.astype(np.float32) / 32768, engine.sample_rate, 16000).astype(np.float32)
            for pcm in spoken]


def noisy_recording(sentences: list[np.ndarray], noise_db: float) -> tuple[np.ndarray, list[tuple[float, float]]]:
    """The sentences with white noise at ``noise_db`` dBFS before, between and after them -> ``(recording, true
    (start, end) seconds of each sentence)``."""
    rng = np.random.default_rng(0)

    def noise(seconds: float) -> np.ndarray:
        return (rng.standard_normal(round(16000 * seconds)) * 10 ** (noise_db / 20)).astype(np.float32)

    pieces, spans, now = [noise(LEAD_S)], [], round(16000 * LEAD_S)
    for clip in sentences:
        pieces += [clip, noise(GAP_S)]
        spans.append((now / 16000, (now + len(clip)) / 16000))
        now += len(clip) + round(16000 * GAP_S)
    return np.concatenate(pieces), spans


def regions_s(finder: str, recording: np.ndarray) -> tuple[list[tuple[float, float]], list[float]]:
    """``(regions, boundaries)`` in seconds on a 40 ms frame grid."""
    regions, boundaries = SpeechFinderSettings(finder).find(recording, 640, -(-len(recording) // 640))
    return [(a * 0.04, b * 0.04) for a, b in regions], [t * 0.04 for t in boundaries]


@pytest.mark.parametrize("noise_db", [-60, -40])
def test_silero_finds_each_sentence_between_noisy_pauses(sentences, noise_db) -> None:
    recording, truth = noisy_recording(sentences, noise_db)
    regions, boundaries = regions_s("silero", recording)
    assert len(regions) == len(truth)
    for (start, end), (true_start, true_end) in zip(regions, truth, strict=True):
        assert true_start - ONSET_TOLERANCE_S <= start <= true_start + ONSET_TOLERANCE_S
        assert true_end - ONSET_TOLERANCE_S <= end <= true_end + OFFSET_TOLERANCE_S
    for boundary, ((_, end), (start, _)) in zip(boundaries, itertools.pairwise(truth), strict=True):
        assert end < boundary < start  # every word boundary falls in the pause between two sentences


def test_auto_is_the_energy_rule_unless_it_finds_no_pause(sentences, monkeypatch) -> None:
    """At -60 dBFS the energy rule finds the pauses and ``auto`` keeps its regions; at -35 dBFS (noise as loud as the
    quiet frames of the speech) it finds none and ``auto`` takes silero's, or keeps the energy rule's when silero-vad
    is not installed."""
    clean, _ = noisy_recording(sentences, -60)
    assert regions_s("auto", clean) == regions_s("energy", clean) != regions_s("silero", clean)
    loud, _ = noisy_recording(sentences, -35)
    assert len(regions_s("energy", loud)[0]) == 1
    assert regions_s("auto", loud) == regions_s("silero", loud) and len(regions_s("auto", loud)[0]) == 3
    monkeypatch.setitem(sys.modules, "silero_vad", None)  # the package is not importable
    assert regions_s("auto", loud) == regions_s("energy", loud)


def test_samples_to_frames_merges_regions_without_a_frame_between_them() -> None:
    regions, boundaries = samples_to_frames([(100, 700), (1300, 2000), (3300, 4000), (9000, 9500)], 640, 12)
    # (100, 700) -> frames [0, 2); (1300, 2000) -> [2, 4): touching, one region; (3300, 4000) -> [5, 7);
    # (9000, 9500) -> [14, 15) lies past the 12 frames: dropped
    assert regions == [(0, 4), (5, 7)] and boundaries == [4]


def test_the_finder_reaches_transcribes_splitter(sentences, tmp_path) -> None:
    """A recording longer than one encoder call (chunk 2 s) is split where the chosen finder says: the frames
    decoded are exactly its regions (the recording has no digital silence to trim)."""
    folder = save_tiny_model(tmp_path / "model")
    model, processor = AdaptSpeechForCTC.from_pretrained(folder), Wav2Vec2Processor.from_pretrained(folder)
    recording, _ = noisy_recording(sentences, -40)
    grid = FrameGrid.of(model)
    num_units = processor.feature_extractor(recording, sampling_rate=16000, return_tensors="np")["input_features"]
    num_units = num_units.shape[1]
    for finder in SPEECH_FINDERS:
        result = transcribe(model, processor, [recording], chunk_length_s=2.0, stride_length_s=0.5,
                            speech_finder=finder)[0]
        spans = find_speech(grid, num_units, recording, SpeechFinderSettings(finder)).spans
        expected = [(a // grid.units_per_frame * 0.04, -(-b // grid.units_per_frame) * 0.04) for a, b in spans]
        got = [(s["start"], s["end"]) for s in result.extra["speech"]]
        assert np.allclose(got, expected, atol=1e-6), finder



def test_the_finder_reaches_the_streaming_endpointer(sentences, tmp_path) -> None:
    """The CTC head is forced to one label on every frame, so the best path never has a blank and WeNet's rule never
    ends an utterance; with ``speech_finder="silero"`` the utterances end where silero hears the pauses."""
    model, processor = forced_label_model(tmp_path / "stream")
    recording, truth = noisy_recording(sentences, -60)
    ended = {}
    for finder in (None, "silero"):
        recognizer = StreamingRecognizer(model, processor, chunk_ms=160, endpoint_silence_s=0.25,
                                         speech_finder=finder)
        for start in range(0, len(recording), 1600):
            recognizer.accept_waveform(recording[start : start + 1600])
        recognizer.finalize()
        ended[finder] = recognizer.pop_segments()
    assert ended[None] == []
    assert len(ended["silero"]) == len(truth)  # the last one too: 0.6 s of noise follow it
    for segment, (_, true_end) in zip(ended["silero"], truth, strict=True):
        assert true_end - ONSET_TOLERANCE_S <= segment["end"] <= true_end + OFFSET_TOLERANCE_S + 0.04  # + a frame


def forced_label_model(folder) -> tuple[AdaptSpeechForCTC, Wav2Vec2Processor]:
    """A streaming tiny model whose CTC head emits one label on every frame (never the blank), saved in ``folder``."""
    save_tiny_model(folder, streaming=True)
    model, processor = AdaptSpeechForCTC.from_pretrained(folder).eval(), Wav2Vec2Processor.from_pretrained(folder)
    with torch.no_grad():
        model.ctc_head.lm_head.weight.zero_()
        model.ctc_head.lm_head.bias.fill_(0.0)
        model.ctc_head.lm_head.bias[model.config.pad_token_id + 5] = 10.0
    model.save_pretrained(folder)
    return model, processor


def test_the_command_line_passes_the_finder_on(sentences, tmp_path, capsys) -> None:
    """``transcribe --speech-finder`` gives the API's text for that finder (at -35 dBFS the energy rule finds one region
    and silero three, so the texts differ); ``--stream --speech-finder silero`` prints one segment per sentence where
    the blanks end none."""
    folder = save_tiny_model(tmp_path / "model")
    model, processor = AdaptSpeechForCTC.from_pretrained(folder), Wav2Vec2Processor.from_pretrained(folder)
    loud, _ = noisy_recording(sentences, -35)
    sf.write(tmp_path / "loud.wav", loud, 16000)
    texts = {}
    for finder in ("energy", "silero"):
        code, out, _ = run_main(["transcribe", "--model", folder, "--chunk-length", "2", "--stride-length", "0.5",
                                 "--speech-finder", finder, tmp_path / "loud.wav"], capsys)
        texts[finder] = out.rstrip("\n").split("\t")[1]
        api = transcribe(model, processor, [sf.read(tmp_path / "loud.wav", dtype="float32")[0]], chunk_length_s=2.0,
                         stride_length_s=0.5, speech_finder=finder)[0].text
        assert code == 0 and texts[finder] == api
    assert texts["energy"] != texts["silero"]
    forced_label_model(tmp_path / "stream")
    quiet, _ = noisy_recording(sentences, -60)
    sf.write(tmp_path / "quiet.wav", quiet, 16000)
    segments = {}
    for extra in ([], ["--speech-finder", "silero"]):
        code, out, _ = run_main(["transcribe", "--stream", "--chunk-ms", "160", "--endpoint-silence", "0.25", *extra,
                                 "--model", tmp_path / "stream", tmp_path / "quiet.wav"], capsys)
        assert code == 0
        segments[bool(extra)] = [line for line in out.splitlines() if '"segment"' in line]
    assert segments == {False: [], True: segments[True]} and len(segments[True]) == len(SENTENCES)


def test_bad_settings_are_one_line(monkeypatch) -> None:
    with pytest.raises(ValueError, match=r"speech_finder: unknown speech finder 'webrtc'; allowed values: auto, "
                                         r"energy, silero"):
        SpeechFinderSettings("webrtc")
    with pytest.raises(ValueError, match=r"vad_threshold 1\.2: a speech probability between 0\.15 and 1"):
        SpeechFinderSettings("silero", vad_threshold=1.2)
    with pytest.raises(ValueError, match="min_pause_s must be positive"):
        SpeechFinderSettings("silero", min_pause_s=0.0)
    defaults = SpeechFinderSettings("auto")
    assert (defaults.min_pause("energy"), defaults.min_pause("silero")) == (0.25, 0.1)
    assert SpeechFinderSettings("auto", min_pause_s=0.3).min_pause("silero") == 0.3
    with pytest.raises(ValueError, match=r"speech_finder 'auto' cannot endpoint a stream .*; finders that can: silero"):
        check_stream_finder("auto", 0.5, 0.5)
    with pytest.raises(ValueError, match=r"speech_finder 'silero' endpoints a stream: set endpoint_silence_s"):
        check_stream_finder("silero", 0.5, None)
    monkeypatch.setitem(sys.modules, "silero_vad", None)  # the package is not importable
    for refused in (lambda: SpeechFinderSettings("silero"), lambda: check_stream_finder("silero", 0.5, 0.5)):
        with pytest.raises(MissingSileroError, match=r"needs the silero-vad package, which is not installed: pip "):
            refused()
    SpeechFinderSettings("energy")  # the energy rule needs nothing, auto falls back to it
    SpeechFinderSettings("auto")


@pytest.mark.parametrize(("argv", "expected"), [
    (["--speech-finder", "silero", "--vad-threshold", "0.1"], "--speech-finder silero: vad_threshold 0.1: a speech "
     "probability between 0.15 and 1"),
    (["--speech-finder", "energy", "--vad-threshold", "0.6"], "--vad-threshold: read by --speech-finder auto, "
     "silero only, not energy"),
    (["--speech-finder", "energy", "--stream", "--endpoint-silence", "0.5"], "--speech-finder energy: speech_finder "
     "'energy' cannot endpoint a stream (it needs the whole recording); finders that can: silero"),
    (["--speech-finder", "silero", "--stream"], "--speech-finder silero: speech_finder 'silero' endpoints a stream: "
     "set endpoint_silence_s (--endpoint-silence SECONDS, the silence that ends an utterance)"),
    (["--stream", "--vad-threshold", "0.6"], "--vad-threshold: read by --speech-finder silero only"),
    (["--speech-finder", "silero", "--missing"], "--speech-finder silero: speech finder 'silero' needs the silero-vad "
     "package, which is not installed: pip install 'adaptspeech[vad]'"),
])
def test_the_command_line_refuses_in_one_line(argv, expected, tmp_path, capsys, monkeypatch) -> None:
    if "--missing" in argv:
        argv = [a for a in argv if a != "--missing"]
        monkeypatch.setitem(sys.modules, "silero_vad", None)
    code, _, err = run_main(["transcribe", "--model", str(tmp_path / "no_model"), *argv, "clip.wav"], capsys)
    assert code != 0 and one_error_line(err).startswith(f"adaptspeech: error: {expected}")
