"""espeak-ng through ctypes, from the shared library and voice data of the ``espeakng-loader`` wheel.

No system espeak-ng, no subprocess, no network. The library keeps global state and is not thread-safe:
the instances of a process share one loaded copy, and the corpus builder runs one process per worker.
"""

from __future__ import annotations

import _ctypes
import ctypes
import logging
import os
from pathlib import Path
from types import ModuleType
from typing import ClassVar

import numpy as np

# espeak_AUDIO_OUTPUT, espeak_PARAMETER, espeak_POSITION_TYPE and flag values from speak_lib.h
_AUDIO_OUTPUT_SYNCHRONOUS = 2
_ESPEAK_RATE, _ESPEAK_PITCH = 1, 3
_POS_CHARACTER = 1
_ESPEAK_CHARS_UTF8 = 1
_EE_OK = 0

logger = logging.getLogger(__name__)

_close_library = getattr(_ctypes, "dlclose", None) or _ctypes.FreeLibrary  # POSIX / Windows

_SynthCallback = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.POINTER(ctypes.c_short), ctypes.c_int, ctypes.c_void_p)

RATE_RANGE = (80, 450)
"""Speaking rates (words per minute) espeak-ng accepts."""
PITCH_RANGE = (0, 99)
"""Base pitches espeak-ng accepts."""


def _loader() -> ModuleType:
    """``espeakng_loader``, imported lazily so that the package imports without it."""
    try:
        import espeakng_loader
    except ImportError as err:
        raise ImportError(
            "the synthetic corpus needs the espeakng-loader wheel (espeak-ng's library and voice data): "
            "pip install 'adaptspeech[synth]'"
        ) from err
    return espeakng_loader


def espeak_data_path() -> Path:
    """The ``espeak-ng-data`` folder shipped in the ``espeakng-loader`` wheel."""
    return Path(_loader().get_data_path())


def espeak_languages() -> set[str]:
    """Language codes espeak-ng has a voice for (file names under ``espeak-ng-data/lang``, lowercase)."""
    return {p.name.lower() for p in (espeak_data_path() / "lang").rglob("*") if p.is_file()}


def voice_variants() -> list[str]:
    """Names of the voice variants (``espeak-ng-data/voices/!v``) that :meth:`EspeakSynthesizer.synthesize` accepts."""
    return sorted(p.name for p in (espeak_data_path() / "voices" / "!v").iterdir() if p.is_file())


class EspeakSynthesizer:
    """An espeak-ng engine in synchronous mode (all instances of a process share one loaded library).

    espeak-ng carries state from one utterance to the next (its pitch-flutter phase and wave generator are
    static variables that ``espeak_Initialize`` does not reset), so the same call gives slightly different
    audio depending on what was spoken before. With ``deterministic=True`` (the default) every call starts
    from a freshly loaded library (``dlclose`` + ``dlopen`` resets the statics, about 6 ms) with espeak-ng's
    random seed and libc's ``srand`` set to ``seed``, so a clip depends only on its own arguments. This needs
    the library to be loaded by this class only: if something else in the process holds it, a warning says
    that clips are not bit-reproducible.

    Args:
        data_path (`str`, *optional*): the ``espeak-ng-data`` folder; defaults to the wheel's.
        deterministic (`bool`, defaults to `True`): reload the library before every utterance.

    Attributes:
        sample_rate (`int`): the rate of the returned audio (22050 Hz for espeak-ng's voices).
    """

    _lib: ClassVar[ctypes.CDLL | None] = None
    _loaded_data_path: ClassVar[bytes | None] = None
    _sample_rate: ClassVar[int] = 0
    _warned_shared: ClassVar[bool] = False

    def __init__(self, data_path: str | None = None, deterministic: bool = True) -> None:
        loader = _loader()
        self._library_path = loader.get_library_path()
        self._data_path = (data_path or loader.get_data_path()).encode()
        self.deterministic = deterministic
        self._chunks: list[np.ndarray] = []
        self._callback = _SynthCallback(self._collect)  # keep a reference: espeak holds the pointer
        self._libc = ctypes.CDLL(None)
        if EspeakSynthesizer._lib is None or EspeakSynthesizer._loaded_data_path != self._data_path:
            self._reload()
        self.sample_rate = EspeakSynthesizer._sample_rate

    def _reload(self) -> None:
        """(Re)load the shared library, which resets all of espeak-ng's static state, and initialise it."""
        cls = EspeakSynthesizer
        if cls._lib is not None:
            cls._lib.espeak_Terminate()
            handle = cls._lib._handle
            cls._lib = None
            _close_library(handle)
            if not cls._warned_shared and _still_loaded(self._library_path):
                cls._warned_shared = True
                logger.warning(
                    "libespeak-ng stays loaded by other code in this process: synthetic clips will not be "
                    "bit-reproducible (their plan still is)"
                )
        lib = ctypes.CDLL(self._library_path)
        lib.espeak_Initialize.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_char_p, ctypes.c_int]
        lib.espeak_Initialize.restype = ctypes.c_int
        lib.espeak_SetVoiceByName.argtypes = [ctypes.c_char_p]
        lib.espeak_SetVoiceByName.restype = ctypes.c_int
        lib.espeak_SetParameter.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_int]
        lib.espeak_SetParameter.restype = ctypes.c_int
        lib.espeak_Synth.argtypes = [
            ctypes.c_void_p,
            ctypes.c_size_t,
            ctypes.c_uint,
            ctypes.c_int,
            ctypes.c_uint,
            ctypes.c_uint,
            ctypes.c_void_p,
            ctypes.c_void_p,
        ]
        lib.espeak_Synth.restype = ctypes.c_int
        lib.espeak_Synchronize.restype = ctypes.c_int
        lib.espeak_ng_SetRandSeed.argtypes = [ctypes.c_long]
        sample_rate = int(lib.espeak_Initialize(_AUDIO_OUTPUT_SYNCHRONOUS, 0, self._data_path, 0))
        if sample_rate <= 0:
            raise RuntimeError(f"espeak-ng failed to initialise with data at {self._data_path.decode()}")
        cls._lib, cls._loaded_data_path, cls._sample_rate = lib, self._data_path, sample_rate

    def _collect(self, wav: ctypes._Pointer, num_samples: int, _events: int) -> int:
        if wav and num_samples > 0:
            self._chunks.append(np.ctypeslib.as_array(wav, shape=(num_samples,)).copy())
        return 0

    def has_voice(self, name: str) -> bool:
        """Whether espeak-ng accepts ``name`` (a language such as ``"ro"``, optionally ``"+variant"``)."""
        return EspeakSynthesizer._lib.espeak_SetVoiceByName(name.encode()) == _EE_OK

    def synthesize(self, text: str, voice: str, rate: int = 175, pitch: int = 50, seed: int = 0) -> np.ndarray:
        """Speak ``text``.

        Args:
            text (`str`): UTF-8 text in the voice's language.
            voice (`str`): ``"<lang>"`` or ``"<lang>+<variant>"`` (e.g. ``"ro+m3"``).
            rate (`int`, defaults to 175): words per minute, within :data:`RATE_RANGE`.
            pitch (`int`, defaults to 50): base pitch, within :data:`PITCH_RANGE`.
            seed (`int`, defaults to 0): seed of espeak-ng's random numbers (with ``deterministic``).

        Returns:
            `np.ndarray` ``[S]`` int16 at :attr:`sample_rate`.
        """
        if not RATE_RANGE[0] <= rate <= RATE_RANGE[1] or not PITCH_RANGE[0] <= pitch <= PITCH_RANGE[1]:
            raise ValueError(f"espeak-ng: rate must be in {RATE_RANGE} and pitch in {PITCH_RANGE}; got {rate}, {pitch}")
        if self.deterministic or EspeakSynthesizer._loaded_data_path != self._data_path:
            self._reload()
        lib = EspeakSynthesizer._lib
        if self.deterministic:
            lib.espeak_ng_SetRandSeed(seed)
            self._libc.srand(ctypes.c_uint(seed % 2**32))
        lib.espeak_SetSynthCallback(self._callback)
        if lib.espeak_SetVoiceByName(voice.encode()) != _EE_OK:
            raise ValueError(f"espeak-ng has no voice {voice!r} (use <lang> or <lang>+<variant>)")
        lib.espeak_SetParameter(_ESPEAK_RATE, int(rate), 0)
        lib.espeak_SetParameter(_ESPEAK_PITCH, int(pitch), 0)
        self._chunks = []
        data = text.encode("utf-8") + b"\0"
        status = lib.espeak_Synth(data, len(data), 0, _POS_CHARACTER, 0, _ESPEAK_CHARS_UTF8, None, None)
        if status != _EE_OK:
            raise RuntimeError(f"espeak-ng could not synthesise {text!r} with {voice!r} (error {status})")
        lib.espeak_Synchronize()
        audio = np.concatenate(self._chunks) if self._chunks else np.zeros(0, dtype=np.int16)
        self._chunks = []
        return audio


def _still_loaded(library_path: str) -> bool:
    """Whether ``library_path`` is still mapped in this process (``dlopen`` with ``RTLD_NOLOAD``)."""
    flag = getattr(os, "RTLD_NOLOAD", None)
    if flag is None:
        return False
    try:
        probe = ctypes.CDLL(library_path, mode=flag)
    except OSError:
        return False
    _close_library(probe._handle)  # undo the reference the probe took
    return True
