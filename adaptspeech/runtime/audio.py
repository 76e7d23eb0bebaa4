"""Audio decoding without torchcodec, torchaudio or torch.

``datasets`` decodes audio through torchcodec, whose wheels do not load with the CPU torch of this project,
and torchaudio has no CPU wheel here. So clips stay ``Audio(decode=False)`` in the datasets and are decoded
here: soundfile (libsndfile: wav, flac, ogg, mp3) reads them, the channels are averaged to mono and soxr
resamples to the model's rate. Bad clips raise :class:`BadClipError` with a machine-readable ``reason``
so that the data preparation can skip and count them instead of crashing an epoch.

libsndfile's mp3 decoder (mpg123) prints notes such as ``Illegal Audio-MPEG-Header`` straight to the process's
standard error (file descriptor 2, below Python's ``sys.stderr``). :func:`load_audio` captures them while it
decodes: a clip that fails names them in its error, a clip that decodes drops them, and the terminal stays clean.

Nothing here imports torch: the data preparation (:mod:`adaptspeech.data.audio` re-exports these names) and the
torch-free ONNX runtime (:mod:`adaptspeech.runtime`) decode audio with the same code.
"""

from __future__ import annotations

import io
import os
import re
import sys
import tempfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager

import numpy as np
import soundfile as sf
import soxr

from .features import frame_params

# Reasons a clip is rejected by :func:`load_audio` (the data preparation adds its own, see ``report.py``).
MISSING = "missing"
EMPTY = "empty"
UNREADABLE = "unreadable"
NAN = "nan"
SILENT = "silent"
TOO_LONG = "too_long"
TRUNCATED = "truncated"

DEFAULT_SILENCE_THRESHOLD = 1e-4
"""Peak amplitude (full scale = 1.0) under which a clip counts as silent, about -80 dBFS."""


class BadClipError(Exception):
    """A clip that cannot be used for training.

    Args:
        path (`str`): the clip's file name or path, as it should appear in a report.
        reason (`str`): one of ``missing``, ``empty``, ``unreadable``, ``truncated``, ``nan``, ``silent``,
            ``too_long`` (or a reason added by the data preparation, e.g. ``too_short``).
        detail (`str`, *optional*): a human-readable explanation (durations, the decoder's message).
    """

    def __init__(self, path: str | os.PathLike[str], reason: str, detail: str = "") -> None:
        self.path = str(path)
        self.reason = reason
        self.detail = detail
        super().__init__(f"{self.path}: {reason}" + (f" ({detail})" if detail else ""))


def load_audio(
    path: str | os.PathLike[str],
    target_sr: int = 16000,
    max_seconds: float | None = None,
    *,
    data: bytes | None = None,
    silence_threshold: float = DEFAULT_SILENCE_THRESHOLD,
) -> np.ndarray:
    """Decode one clip to a mono float32 waveform at ``target_sr``.

    Args:
        path (`str` or `os.PathLike`): the audio file. With ``data`` it only names the clip in errors.
        target_sr (`int`, defaults to 16000): output sampling rate; soxr (``HQ``) resamples when the
            file's rate differs.
        max_seconds (`float`, *optional*): clips longer than this raise ``too_long``.
        data (`bytes`, *optional*): the encoded file in memory (e.g. the ``bytes`` of a Hub dataset's
            ``Audio(decode=False)`` column); read instead of ``path``.
        silence_threshold (`float`, defaults to 1e-4): clips whose peak amplitude is below it raise
            ``silent``.

    Returns:
        `np.ndarray` of shape ``[S]``, dtype float32, C-contiguous; not normalised (the feature extractor
        does that).

    Raises:
        BadClipError: ``missing`` (no such file, or a folder), ``empty`` (zero bytes or zero frames),
            ``unreadable`` (soundfile cannot decode it; the detail gives the decoder's reason), ``truncated`` (the
            file ends before the length its header declares: a WAV data chunk cut short, an mp3 whose frames stop
            early), ``nan`` (non-finite samples), ``silent``, ``too_long``.
    """
    name = str(path)
    if data is None:
        if os.path.isdir(path):
            raise BadClipError(name, MISSING, "a folder, not an audio file")
        if not os.path.isfile(path):
            raise BadClipError(name, MISSING, "no such file")
        if os.path.getsize(path) == 0:
            raise BadClipError(name, EMPTY, "zero-byte file")
        source: str | os.PathLike[str] | io.BytesIO = path
    else:
        if len(data) == 0:
            raise BadClipError(name, EMPTY, "zero bytes")
        source = io.BytesIO(data)
    with _decoder_messages() as notes:
        try:
            with sf.SoundFile(source) as handle:
                sr = handle.samplerate
                declared = handle.frames if 0 < handle.frames < np.iinfo(np.int64).max else None
                if max_seconds is not None and declared is not None:
                    _check_length(name, declared, sr, max_seconds)
                wave = handle.read(dtype="float32", always_2d=True)
                cut_short = _truncation(handle)
        except BadClipError:
            raise
        except (sf.SoundFileError, RuntimeError, ValueError, EOFError, OSError) as err:
            error = err
        else:
            error = None
    if error is not None:
        raise BadClipError(name, UNREADABLE, _unreadable_detail(error, notes)) from None
    if cut_short is not None:
        raise BadClipError(name, TRUNCATED, cut_short)
    if wave.shape[0] == 0:
        raise BadClipError(name, EMPTY, "no audio frames")
    if declared is not None and wave.shape[0] < declared - max(_FRAME_TOLERANCE, 0.01 * declared):
        raise BadClipError(
            name, TRUNCATED, f"{wave.shape[0] / sr:.2f} s decoded of the {declared / sr:.2f} s its header declares"
        )
    if max_seconds is not None:
        _check_length(name, wave.shape[0], sr, max_seconds)
    if not np.isfinite(wave).all():
        raise BadClipError(name, NAN, "non-finite samples")
    mono = wave.mean(axis=1, dtype=np.float32) if wave.shape[1] > 1 else wave[:, 0]
    check_samples(mono, name, silence_threshold)
    if sr != target_sr:
        mono = soxr.resample(mono, sr, target_sr, quality="HQ")
    return np.ascontiguousarray(mono, dtype=np.float32)


def check_samples(samples: np.ndarray, name: str, silence_threshold: float = DEFAULT_SILENCE_THRESHOLD) -> None:
    """Refuse decoded samples ``[S]`` that :func:`load_audio` refuses in a file: none (``empty``), a non-finite one
    (``nan``), a peak amplitude below ``silence_threshold`` (``silent``); ``name`` names them in the error.

    Raises:
        BadClipError: with that reason.
    """
    samples = np.asarray(samples)
    if samples.size == 0:
        raise BadClipError(name, EMPTY, "no audio frames")
    if not np.isfinite(samples).all():
        raise BadClipError(name, NAN, "non-finite samples")
    peak = float(np.abs(samples).max())
    if peak < silence_threshold:
        raise BadClipError(name, SILENT, f"peak amplitude {peak:.2e} < {silence_threshold:.0e}")


_FRAME_TOLERANCE = 2 * 1152
"""Samples a decoded clip may fall short of its header's count (two mp3 frames: encoder delay and padding), beyond
1% of the count, before it counts as truncated."""

_WAV_DATA_CHUNK = re.compile(r"^data\s*:\s*(\d+)\s*\(should be (\d+)\)", re.MULTILINE)
_UNKNOWN_SIZES = (0, 0xFFFFFFFF)  # streaming writers leave the size unset
_NOT_A_FILE = "File does not exist or is not a regular file"
_DECODE_LOCK = threading.Lock()


def _truncation(handle: sf.SoundFile) -> str | None:
    """Why the open file ends before its content does, from libsndfile's log (``extra_info``), or ``None``.

    libsndfile reads a WAV file whose data chunk is cut short up to the cut without an error (its log says
    ``data : N (should be M)``), and an Ogg file without its last page as zero frames (its log says ``File ended
    unexpectedly``).
    """
    if handle.format in ("WAV", "WAVEX", "RF64", "W64"):
        match = _WAV_DATA_CHUNK.search(handle.extra_info)
        if match is None:
            return None
        declared, present = int(match.group(1)), int(match.group(2))
        if declared in _UNKNOWN_SIZES or present >= declared:
            return None
        return f"the data chunk declares {declared} bytes, the file holds {present}"
    if handle.format == "OGG" and "File ended unexpectedly" in handle.extra_info:
        return "the Ogg stream ends without its end-of-stream page"
    return None


_CAPTURE: dict[int, int] = {}
"""Per process id, the descriptor of an unlinked temporary file that :func:`_decoder_messages` reuses."""


def _capture_file() -> int:
    fd = _CAPTURE.get(os.getpid())
    if fd is None:
        with tempfile.TemporaryFile() as handle:
            fd = os.dup(handle.fileno())
        _CAPTURE.clear()  # a forked worker does not share its parent's file offset
        _CAPTURE[os.getpid()] = fd
    os.ftruncate(fd, 0)
    os.lseek(fd, 0, os.SEEK_SET)
    return fd


@contextmanager
def _decoder_messages() -> Iterator[list[str]]:
    """Capture what C code prints on file descriptor 2 inside the block; yield a list that then holds its lines.

    The descriptor is duplicated before and restored after (also on errors); a lock keeps two threads from
    swapping it at once. Where descriptor 2 cannot be duplicated (closed), nothing is captured.
    """
    lines: list[str] = []
    with _DECODE_LOCK:
        try:
            sys.stderr.flush()
            capture = _capture_file()
            saved = os.dup(2)
        except (OSError, ValueError, AttributeError):
            yield lines
            return
        os.dup2(capture, 2)
        try:
            yield lines
        finally:
            os.dup2(saved, 2)
            os.close(saved)
            lines.extend(os.pread(capture, 8192, 0).decode("utf-8", "replace").splitlines())


def _clean_note(line: str) -> str:
    """``[src/libmpg123/parse.c:...] warning: Cannot read ...`` or ``Note: Illegal ...`` -> the message alone."""
    line = re.sub(r"^\[[^\]]*\]\s*", "", line.strip())
    return re.sub(r"^(?:note|warning|error)\s*:\s*", "", line, flags=re.IGNORECASE).strip()


def _unreadable_detail(error: BaseException, notes: list[str]) -> str:
    """The decoder's reason in one line: libsndfile's message (not its misleading "does not exist" for a file that
    exists but holds no stream it can decode) and the first notes the decoder printed."""
    message = error.error_string if isinstance(error, sf.LibsndfileError) else str(error)
    message = " ".join(message.split()).rstrip(".")
    if message.startswith(_NOT_A_FILE):
        message = "no audio stream that libsndfile can decode"
    cleaned = list(dict.fromkeys(note for note in map(_clean_note, notes) if note))
    said = "; ".join(note.rstrip(".") for note in cleaned[:2])
    return f"soundfile cannot decode it: {message}" + (f"; the decoder said: {said[:200]}" if said else "")


def _check_length(name: str, frames: int, sr: int, max_seconds: float) -> None:
    if frames > max_seconds * sr:
        raise BadClipError(name, TOO_LONG, f"{frames / sr:.2f} s > max_seconds={max_seconds:g}")



def digital_silence(samples: np.ndarray, sr: int = 16000) -> np.ndarray:
    """``[S]`` bool: samples inside a run of exact zeros at least one :func:`log_mel` window long (25 ms, 400 samples
    at 16 kHz): digital silence (muted stretches, zero padding, clips joined by zeros), which a recorded utterance
    never holds.

    Args:
        samples: ``[S]`` float samples.
        sr: their sampling rate.
    """
    zero = np.concatenate([[False], np.asarray(samples) == 0, [False]])
    edges = np.flatnonzero(zero[1:] != zero[:-1])
    del zero
    starts, ends = edges[::2], edges[1::2]  # runs of zeros [start, end)
    long = ends - starts >= frame_params(sr)[0]
    marked = np.zeros(len(samples), dtype=bool)  # one byte a sample: an hour's int64 running sum took 920 MB
    for start, end in zip(starts[long].tolist(), ends[long].tolist(), strict=True):
        marked[start:end] = True
    return marked


def undecodable(
    waveform: np.ndarray, shortest: int, silence_threshold: float = DEFAULT_SILENCE_THRESHOLD
) -> str | None:
    """Why a recording gives no text without running a model, or ``None``: no samples, a non-finite sample, nothing
    but digital silence (exact zeros), a peak amplitude below ``silence_threshold``, or fewer than ``shortest``
    samples (the fewest a model needs for one output frame; ``adaptspeech prepare`` skips such clips as ``empty``,
    ``nan``, ``silent`` and ``too_short``). The torch inference asks it through
    :func:`adaptspeech.inference.long_form.recording.nothing_to_decode`, the ONNX runtime with the exported model's
    ``shortest_input``.

    Args:
        waveform: ``[S]`` the recording at 16 kHz.
        shortest: the model's shortest input in samples (0: not checked).
        silence_threshold: peak amplitude below which a recording is silent.
    """
    waveform = np.asarray(waveform)
    if waveform.size == 0:
        return "no samples"
    if not np.isfinite(waveform).all():
        return "non-finite samples (NaN or infinity)"
    peak = float(np.abs(waveform).max())
    if peak == 0.0:
        return "digital silence only"
    if peak < silence_threshold:
        return f"silent (peak amplitude {peak:.2e} < {silence_threshold:.0e})"
    if len(waveform) < shortest:
        return f"too short for one output frame ({len(waveform)} samples; the model needs at least {shortest})"
    return None
