"""A small corpus in the Common Voice release layout, for dry runs of the real-data recipe (no download).

:func:`write_common_voice_layout` writes, for each language::

    <root>/<lang>/clips/common_voice_<lang>_<n>.mp3     48 kHz mono MP3, as in the releases (resampled on load)
    <root>/<lang>/{train,dev,test}.tsv                 the 17.0 column set, tab-separated
    <root>/<lang>/clip_durations.tsv                   clip, duration[ms]

The audio is not speech: a few harmonic tones with a random pitch contour plus noise (never silent, so that the
data preparation keeps every row); the sentences are short real sentences of each language, so that the text
normalisation and the vocabulary see each language's own letters. Test speakers are disjoint from the training and
dev speakers, as in Common Voice's official splits. What it is good for: running every stage of
``recipes/common_voice`` end to end with the real model shape and the real data path (MP3 decoding, resampling,
TSV parsing, subsets) in minutes. What it is not: data anything can learn from.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from pathlib import Path

import numpy as np
import soundfile as sf

from ...data.common_voice import CV_COLUMNS

SAMPLE_RATE = 48_000
"""Common Voice clips are 48 kHz (older releases) or 32 kHz MP3; 48 kHz makes the preparation resample."""

SENTENCES: dict[str, tuple[str, ...]] = {
    "ru": ("Сегодня хорошая погода.", "Я люблю читать книги.", "Где находится вокзал?", "Это мой дом."),
    "cy": ("Mae hi'n braf heddiw.", "Rydw i'n hoffi darllen.", "Ble mae'r orsaf?", "Dyma fy nhŷ."),
    "it": ("Oggi fa bel tempo.", "Mi piace leggere libri.", "Dov'è la stazione?", "Questa è casa mia."),
    "eu": ("Gaur eguraldi ona dago.", "Liburuak irakurtzea gustatzen zait.", "Non dago geltokia?", "Hau nire etxea."),
    "pt": ("Hoje está um dia bonito.", "Eu gosto de ler livros.", "Onde fica a estação?", "Esta é a minha casa."),
    "ro": ("Astăzi e vreme frumoasă.", "Îmi place să citesc.", "Unde este gara?", "Aceasta e casa mea."),
    "cs": ("Dnes je hezky.", "Rád čtu knížky.", "Kde je nádraží?", "Tohle je můj dům."),
    "br": ("Brav eo an amzer hiziv.", "Plijout a ra din lenn.", "Pelec'h emañ ar gar?", "Setu va zi."),
    "ar": ("الطقس جميل اليوم.", "أحب قراءة الكتب.", "أين المحطة؟", "هذا بيتي."),
    "uk": ("Сьогодні гарна погода.", "Я люблю читати книжки.", "Де вокзал?", "Це мій дім."),
}
"""A few short sentences per language (short enough for CTC on 2 s of audio: about 100 encoder frames)."""

FALLBACK_SENTENCES: tuple[str, ...] = ("one two three", "four five six", "seven eight", "nine ten")


def _clip(rng: np.random.Generator, seconds: float) -> np.ndarray:
    """A non-silent, speech-like 48 kHz signal of ``seconds``: harmonics of a wandering pitch plus noise. [S]"""
    n = round(seconds * SAMPLE_RATE)
    t = np.arange(n) / SAMPLE_RATE
    pitch = rng.uniform(90, 220) * (1 + 0.15 * np.sin(2 * np.pi * rng.uniform(0.5, 3.0) * t))
    phase = 2 * np.pi * np.cumsum(pitch) / SAMPLE_RATE
    wave = sum(np.sin(k * phase) / k for k in range(1, 6))
    envelope = 0.5 + 0.5 * np.abs(np.sin(2 * np.pi * rng.uniform(2, 5) * t))  # syllable-like amplitude
    wave = 0.2 * wave * envelope + 0.02 * rng.standard_normal(n)
    return (wave / max(1e-6, float(np.abs(wave).max())) * 0.5).astype(np.float32)


def write_common_voice_layout(
    root: str | os.PathLike[str],
    languages: Iterable[str],
    clips: Mapping[str, int] | None = None,
    seconds: float = 2.0,
    seed: int = 0,
    audio_format: str = "mp3",
) -> dict[str, dict[str, int]]:
    """Write a tiny Common Voice release (see the module docstring) under ``root``.

    Args:
        root: the release folder to write (``<root>/<lang>/...``); existing files are overwritten.
        languages: language codes; languages without sentences in :data:`SENTENCES` get English-like filler text.
        clips: clips per split, default ``{"train": 8, "dev": 2, "test": 2}``.
        seconds: the mean clip length (each clip is ``seconds`` x a random factor in [0.9, 1.1]).
        seed: seeds the audio and the durations.
        audio_format: ``"mp3"`` (as the releases) or ``"wav"``.

    Returns:
        ``{language: {split: rows written}}``.
    """
    if audio_format not in ("mp3", "wav"):
        raise ValueError(f"audio_format {audio_format!r} unknown; allowed values: mp3, wav")
    clips = dict(clips or {"train": 8, "dev": 2, "test": 2})
    rng = np.random.default_rng(seed)
    root = Path(root)
    written: dict[str, dict[str, int]] = {}
    for lang in languages:
        lang_dir = root / lang
        (lang_dir / "clips").mkdir(parents=True, exist_ok=True)
        sentences = SENTENCES.get(lang, FALLBACK_SENTENCES)
        durations: list[tuple[str, int]] = []
        written[lang] = {}
        number = 0
        for split, count in clips.items():
            rows = []
            for i in range(count):
                number += 1
                name = f"common_voice_{lang}_{number}.{audio_format}"
                length = seconds * rng.uniform(0.9, 1.1)
                wave = _clip(rng, length)
                sf.write(lang_dir / "clips" / name, wave, SAMPLE_RATE, format=audio_format.upper())
                durations.append((name, round(1000 * len(wave) / SAMPLE_RATE)))
                # two speakers per split and language; test speakers never speak in train or dev
                speaker = f"{lang}_{'test' if split == 'test' else 'pool'}_speaker{i % 2}"
                row = {c: "" for c in CV_COLUMNS}
                row.update(
                    client_id=speaker,
                    path=name,
                    sentence_id=f"{lang}{number}",
                    sentence=sentences[(number - 1) % len(sentences)],
                    up_votes="2",
                    down_votes="0",
                    locale=lang,
                )
                rows.append(row)
            lines = ["\t".join(CV_COLUMNS)] + ["\t".join(r[c] for c in CV_COLUMNS) for r in rows]
            (lang_dir / f"{split}.tsv").write_text("\n".join(lines) + "\n", encoding="utf-8")
            written[lang][split] = len(rows)
        lines = ["clip\tduration[ms]"] + [f"{n}\t{ms}" for n, ms in durations]
        (lang_dir / "clip_durations.tsv").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return written
