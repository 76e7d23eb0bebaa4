"""Live audio from a byte stream (a pipe, standard input): raw 16-bit little-endian PCM, or a WAV stream (``arecord -t
wav``) whose header gives the rate and channels, read block by block, mixed to mono and resampled to 16 kHz as it comes
(soxr's streaming resampler).

Bad input is one clear message and loses nothing: an odd byte count (half a sample at the end) is reported after the
whole samples are decoded; a WAV header whose rate contradicts an explicit ``--sample-rate`` is refused before
anything is read; a WAV stream that is not 16-bit PCM is refused.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from typing import BinaryIO

import numpy as np
import soxr

MODEL_RATE = 16000
BLOCK_SECONDS = 0.1
"""Seconds of audio per block read from the stream (the granularity of a live source)."""


class PCMStreamError(ValueError):
    """The byte stream cannot be read as PCM (one line naming the stream and the problem)."""


def _read_exact(stream: BinaryIO, size: int) -> bytes:
    data = b""
    while len(data) < size:
        more = stream.read(size - len(data))
        if not more:
            break
        data += more
    return data


def _wav_header(stream: BinaryIO, first: bytes, name: str) -> tuple[int, int, bytes]:
    """``(sample rate, channels, bytes of the data chunk already read)`` of a WAV stream whose first 12 bytes are
    ``first``; refuses what is not 16-bit PCM."""
    rate = channels = None
    while True:
        head = _read_exact(stream, 8)
        if len(head) < 8:
            raise PCMStreamError(f"{name}: the WAV header ends before its data chunk")
        chunk_id, size = head[:4], struct.unpack("<I", head[4:])[0]
        if chunk_id == b"data":
            if rate is None or channels is None:
                raise PCMStreamError(f"{name}: WAV data before its fmt chunk")
            return rate, channels, b""
        body = _read_exact(stream, size + (size & 1))
        if chunk_id == b"fmt ":
            audio_format, channels, rate = struct.unpack("<HHI", body[:8])
            bits = struct.unpack("<H", body[14:16])[0]
            if audio_format not in (1, 0xFFFE) or bits != 16:
                raise PCMStreamError(
                    f"{name}: WAV stream of format {audio_format} with {bits}-bit samples; streaming reads 16-bit PCM "
                    "(convert with sox/ffmpeg, or transcribe it as a file without --stream)"
                )


def pcm_blocks(
    stream: BinaryIO, sample_rate: int | None = None, name: str = "standard input", problems: list[str] | None = None
) -> Iterator[np.ndarray]:
    """Float32 mono blocks at 16 kHz from ``stream``: raw 16-bit little-endian PCM at ``sample_rate`` (16000 when
    None, mono), or a WAV stream (its header's rate and channels; ``sample_rate``, when given, must agree).

    Args:
        stream: a binary stream, read until its end.
        sample_rate: the rate of raw PCM (``--sample-rate``).
        name: the stream's name in messages.
        problems: where to append a message about input that could not be decoded whole (an odd byte count), so
            the caller can report it after the transcript; raised instead when None.
    """
    first = _read_exact(stream, 12)
    channels, rate, pending = 1, sample_rate or MODEL_RATE, first
    if first[:4] == b"RIFF" and first[8:12] == b"WAVE":
        header_rate, channels, pending = _wav_header(stream, first, name)
        if sample_rate is not None and sample_rate != header_rate:
            raise PCMStreamError(
                f"{name}: the WAV header says {header_rate} Hz but --sample-rate is {sample_rate}; drop --sample-rate "
                "(a WAV stream gives its own) or fix it"
            )
        rate = header_rate
    resampler = soxr.ResampleStream(rate, MODEL_RATE, 1, dtype="float32") if rate != MODEL_RATE else None
    frame_bytes = 2 * channels
    block_bytes = max(frame_bytes, int(rate * BLOCK_SECONDS) * frame_bytes)
    while True:
        block = _read_exact(stream, block_bytes)
        at_end = len(block) < block_bytes
        data = pending + block
        whole = len(data) // frame_bytes * frame_bytes
        pending = data[whole:]
        samples = np.frombuffer(data[:whole], dtype="<i2").astype(np.float32) / 32768.0
        if channels > 1:
            samples = samples.reshape(-1, channels).mean(axis=1)
        if resampler is not None:
            samples = resampler.resample_chunk(samples, last=at_end)
        if len(samples):
            yield samples.astype(np.float32, copy=False)
        if at_end:
            break
    if pending:
        layout = f"16-bit PCM, {channels} channel(s): {frame_bytes} bytes per frame"
        message = (
            f"{name}: odd byte count, {len(pending)} byte(s) after the last whole sample ({layout}; the stream stopped "
            "mid-sample); the audio before them was decoded"
        )
        if problems is None:
            raise PCMStreamError(message)
        problems.append(message)
