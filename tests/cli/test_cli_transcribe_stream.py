"""``adaptspeech transcribe --stream``: JSON lines of partial and final text from files and from raw PCM / WAV streams
on standard input, and one clear line for what cannot stream or cannot be read."""

from __future__ import annotations

import io
import json
import re
import struct

import numpy as np
import pytest
import soundfile as sf
from helpers.cli import one_error_line, run_main
from transformers import Wav2Vec2Processor

from adaptspeech import AdaptSpeechForCTC
from adaptspeech.inference.streaming.recognizer import StreamingRecognizer
from adaptspeech.testing.tiny_models import save_tiny_model


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return save_tiny_model(tmp_path_factory.mktemp("stream_cli"), streaming=True)


def tone(seconds: float, rate: int = 16000) -> np.ndarray:
    t = np.arange(int(seconds * rate)) / rate
    rng = np.random.default_rng(0)
    return (0.3 * np.sin(2 * np.pi * 440 * t) + 0.05 * rng.standard_normal(len(t))).astype(np.float32)


def pcm(samples: np.ndarray) -> bytes:
    return (np.clip(samples, -1, 1) * 32767).astype("<i2").tobytes()


def wav_stream(samples: np.ndarray, rate: int) -> bytes:
    """A WAV stream as ``arecord -t wav`` writes it (data size unknown: 0xFFFFFFFF)."""
    fmt = struct.pack("<HHIIHH", 1, 1, rate, rate * 2, 2, 16)
    return b"RIFF\xff\xff\xff\xffWAVEfmt " + struct.pack("<I", 16) + fmt + b"data\xff\xff\xff\xff" + pcm(samples)


def lines(out: str) -> list[dict]:
    return [json.loads(line) for line in out.splitlines()]


def expected_text(model_dir, samples: np.ndarray, chunk_ms: float) -> str:
    model = AdaptSpeechForCTC.from_pretrained(model_dir).eval()
    recognizer = StreamingRecognizer(model, Wav2Vec2Processor.from_pretrained(model_dir), chunk_ms=chunk_ms)
    recognizer.accept_waveform(samples)
    return recognizer.finalize()


def with_stdin(monkeypatch, data: bytes) -> None:
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(data)))


def test_a_file_streams_partial_then_final_results(model_dir, tmp_path, capsys) -> None:
    samples = tone(1.5)
    path = tmp_path / "a.wav"
    sf.write(path, samples, 16000, subtype="FLOAT")
    code, out, _ = run_main(["transcribe", "--stream", "--chunk-ms", "320", "--model", model_dir, path], capsys)
    assert code == 0
    events = lines(out)
    assert events[-1]["final"] and events[-1]["seconds"] == 1.5
    assert events[-1]["text"] == expected_text(model_dir, samples, 320)
    seconds = [event["seconds"] for event in events[:-1]]
    assert seconds == sorted(seconds) and all("partial" in event for event in events[:-1])
    code, out, _ = run_main(["transcribe", "--stream", "--endpoint-silence", "0.4", "--model", model_dir, path], capsys)
    events = lines(out)
    segments = [event["segment"] for event in events if "segment" in event]
    assert code == 0 and events[-1]["final"]
    assert events[-1]["text"].startswith(" ".join(segments))  # the final text holds every ended utterance


def test_raw_pcm_and_wav_streams_on_standard_input(model_dir, capsys, monkeypatch) -> None:
    samples = tone(1.0)
    quantised = np.frombuffer(pcm(samples), dtype="<i2").astype(np.float32) / 32768.0
    with_stdin(monkeypatch, pcm(samples))
    code, out, _ = run_main(["transcribe", "--stream", "--model", model_dir, "-"], capsys)
    assert code == 0 and lines(out)[-1]["text"] == expected_text(model_dir, quantised, 640)
    low = tone(1.0, rate=8000)
    with_stdin(monkeypatch, pcm(low))
    code, out, _ = run_main(["transcribe", "--stream", "--sample-rate", "8000", "--model", model_dir, "-"], capsys)
    assert code == 0 and abs(lines(out)[-1]["seconds"] - 1.0) < 0.01  # resampled to 16 kHz
    with_stdin(monkeypatch, wav_stream(low, 8000))
    code, out, _ = run_main(["transcribe", "--stream", "--model", model_dir, "-"], capsys)
    assert code == 0 and abs(lines(out)[-1]["seconds"] - 1.0) < 0.01  # the header's rate


def test_bad_streams_are_one_line_and_lose_nothing(model_dir, capsys, monkeypatch) -> None:
    samples = tone(0.7)
    with_stdin(monkeypatch, pcm(samples) + b"\x01")  # stops mid-sample
    code, out, err = run_main(["transcribe", "--stream", "--model", model_dir, "-"], capsys)
    assert code == 1
    assert "standard input: odd byte count, 1 byte(s) after the last whole sample" in one_error_line(err)
    quantised = np.frombuffer(pcm(samples), dtype="<i2").astype(np.float32) / 32768.0
    assert lines(out)[-1]["text"] == expected_text(model_dir, quantised, 640)  # every whole sample decoded
    with_stdin(monkeypatch, wav_stream(samples, 44100))
    code, _, err = run_main(["transcribe", "--stream", "--sample-rate", "16000", "--model", model_dir, "-"], capsys)
    assert code == 1 and "the WAV header says 44100 Hz but --sample-rate is 16000" in one_error_line(err)


def test_what_cannot_stream_is_refused(model_dir, tmp_path, capsys) -> None:
    path = tmp_path / "a.wav"
    sf.write(path, tone(0.5), 16000)
    plain = save_tiny_model(tmp_path / "plain")
    cases = [
        (["--model", plain], r"cannot stream: attention\.kind='default' cannot stream"),
        (["--model", model_dir, "--chunk-ms", "650"], "chunk of 650 ms: must be a positive multiple of the"),
        (["--model", model_dir, "--chunk-ms", "1280"], r"maximum, attention\.max_chunk_size=25"),
        (["--model", model_dir, "--method", "attention_beam"],
         r"--method attention_beam: not served by streaming \(transcribe --stream\), which serves: "
         "ctc_greedy, ctc_beam$"),
        (["--model", model_dir, "--timestamps", "word"], "--timestamps cannot be combined with --stream"),
        (["--model", model_dir, "--sample-rate", "8000"], "--sample-rate applies to raw PCM on standard input"),
    ]
    for options, message in cases:
        code, _, err = run_main(["transcribe", "--stream", *options, path], capsys)
        assert code == 1
        assert re.search(message, one_error_line(err))


def test_a_model_trained_without_chunks_streams_with_a_warning(tmp_path, capsys) -> None:
    folder = save_tiny_model(tmp_path / "unchunked")
    config = json.loads((folder / "config.json").read_text())
    config["attention"] = {"kind": "rel_pos"}
    config["backbone_config"]["conv_lookahead"] = 0
    (folder / "config.json").write_text(json.dumps(config))  # the same weights: rel_pos's own start from zero
    path = tmp_path / "a.wav"
    sf.write(path, tone(0.5), 16000)
    code, out, err = run_main(["transcribe", "--stream", "--model", folder, path], capsys)
    assert code == 0 and lines(out)[-1]["final"]
    assert err.strip().startswith("adaptspeech: warning: this model was trained without chunk masks")


@pytest.mark.parametrize(
    ("argv", "named"),
    [
        (["--chunk-ms", "320", "--model", "MODEL"], "--chunk-ms: used with --stream only"),
        (["--sample-rate", "8000", "--model", "MODEL"], "--sample-rate: used with --stream only"),
        (["--stream", "--onnx", "EXPORT"], "--stream: decodes a --model DIR"),
    ],
)
def test_a_streaming_setting_without_stream_is_refused_not_ignored(argv, named, tmp_path, capsys) -> None:
    """A streaming setting given without ``--stream`` (or ``--stream`` on an ONNX export) would be ignored without a
    word: it is refused in one line before any work."""
    code, _, err = run_main(["transcribe", *argv, str(tmp_path / "clip.wav")], capsys)
    assert code != 0 and named in one_error_line(err)
