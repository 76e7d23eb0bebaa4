"""An offline multilingual speech corpus: wordfreq sentences spoken by espeak-ng, in the Common Voice layout.

:mod:`adaptspeech.data.synthetic_plan` decides every clip from the seed (sentences of wordfreq's word lists, voices,
rates, pitches, gains, noise; the test split's voices and words are held out of train and dev); this module
renders the clips with espeak-ng (through its shared library in the ``espeakng-loader`` wheel, see ``espeak.py``)
and writes ``out_dir/<lang>/clips/*.mp3`` plus ``train.tsv``, ``dev.tsv``, ``test.tsv``,
``validated.tsv`` (and empty ``other.tsv`` / ``invalidated.tsv``) with the real Common Voice columns and a
``clip_durations.tsv``, so :func:`~adaptspeech.data.common_voice.load_common_voice` reads it.

Since everything is decided up front, the corpus is the same for any number of workers; clips already on disk are
kept when a build is resumed.
"""

from __future__ import annotations

import hashlib
import json
import logging
import multiprocessing as mp
import os
import time
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import fields
from pathlib import Path
from typing import Any

import numpy as np
import soundfile as sf
import soxr
from tqdm.auto import tqdm

from ..settings import unknown_settings_message
from .common_voice import CV_COLUMNS, parse_languages
from .espeak import EspeakSynthesizer
from .output_folder import owned_folder
from .synthetic_plan import (
    SPLITS,
    UNLABELLED_SPLIT,
    ClipSpec,
    SyntheticConfig,
    espeak_voice,
    load_word_list,
    plan_language,
    split_word_list,
    supported_languages,
)

__all__ = [
    "CONFIG_FILE",
    "DEFAULT_LANGUAGES",
    "SPLITS",
    "UNLABELLED_SENTENCES",
    "UNLABELLED_SPLIT",
    "ClipSpec",
    "SyntheticConfig",
    "build_synthetic_corpus",
    "load_word_list",
    "plan_language",
    "render_clip",
    "split_word_list",
    "supported_languages",
]

logger = logging.getLogger(__name__)

DEFAULT_LANGUAGES: tuple[str, ...] = ("ro", "cs", "pl", "sl", "sk", "it", "es", "pt", "nl", "de")
"""Languages both espeak-ng and wordfreq cover (wordfreq has no ``hr``)."""

CONFIG_FILE = "synthetic_config.json"
UNLABELLED_SENTENCES = "unlabelled_sentences.tsv"
"""Beside ``other.tsv``: what each unlabelled clip says (``path``, ``sentence``). Read only to measure the error of
pseudo-labels, never by training or labelling."""


# ---- rendering (runs in worker processes) -------------------------------------------------------------

_ENGINE: EspeakSynthesizer | None = None


def _engine() -> EspeakSynthesizer:
    global _ENGINE
    if _ENGINE is None:
        _ENGINE = EspeakSynthesizer()
    return _ENGINE


def render_clip(spec: ClipSpec, clips_dir: str, sample_rate: int | None) -> tuple[str, float]:
    """Synthesise ``spec`` into ``clips_dir/spec.file_name`` (written atomically); return its name and seconds."""
    engine = _engine()
    voice = f"{espeak_voice(spec.language)}+{spec.voice}"
    pcm = engine.synthesize(spec.sentence, voice, spec.rate, spec.pitch, seed=spec.seed)
    if pcm.size == 0:
        raise RuntimeError(f"espeak-ng produced no audio for {spec.file_name} ({voice}): {spec.sentence!r}")
    wave = pcm.astype(np.float32) / 32768.0
    sr = engine.sample_rate
    if sample_rate is not None and sample_rate != sr:
        wave, sr = soxr.resample(wave, sr, sample_rate).astype(np.float32), sample_rate
    wave *= spec.peak / max(float(np.abs(wave).max()), 1e-9)
    if spec.snr_db is not None:
        noise = np.random.default_rng(spec.seed).standard_normal(wave.size).astype(np.float32)
        noise *= np.sqrt(np.mean(wave**2) / 10 ** (spec.snr_db / 10)) / max(float(np.sqrt(np.mean(noise**2))), 1e-12)
        wave = np.clip(wave + noise, -1.0, 1.0)
    target = Path(clips_dir) / spec.file_name
    partial = target.with_name(target.name + ".part")
    sf.write(partial, wave, sr, format="MP3")
    os.replace(partial, target)
    return spec.file_name, wave.size / sr


def _render_task(task: tuple[ClipSpec, str, int | None]) -> tuple[str, str, float]:
    spec, clips_dir, sample_rate = task
    name, seconds = render_clip(spec, clips_dir, sample_rate)
    return spec.language, name, seconds


def _existing_duration(path: Path) -> float | None:
    """Seconds of a clip already written, or ``None`` if it must be (re)written."""
    if not path.is_file() or path.stat().st_size == 0:
        return None
    try:
        info = sf.info(str(path))
    except (sf.SoundFileError, RuntimeError):
        logger.warning("rewriting unreadable clip %s", path)
        return None
    return info.frames / info.samplerate if info.frames > 0 else None


# ---- the corpus ------------------------------------------------------------------------------------------


def _gender(voice: str) -> str:
    return {"m": "male_masculine", "f": "female_feminine"}.get(voice[0], "") if voice[1:].isdigit() else ""


def _write_tsv(path: Path, columns: Sequence[str], rows: Iterable[Sequence[str]]) -> None:
    partial = path.with_name(path.name + ".part")
    with partial.open("w", encoding="utf-8", newline="") as handle:
        handle.write("\t".join(columns) + "\n")
        for row in rows:
            handle.write("\t".join(row) + "\n")
    os.replace(partial, path)


def _write_language_tsvs(lang_dir: Path, specs: list[ClipSpec], durations: dict[str, float]) -> None:
    def row(spec: ClipSpec) -> list[str]:
        values = {
            "client_id": spec.voice,
            "path": spec.file_name,
            "sentence_id": hashlib.sha256(f"{spec.language}:{spec.sentence}".encode()).hexdigest(),
            "sentence": spec.sentence,
            "sentence_domain": "",
            "up_votes": "2",
            "down_votes": "0",
            "age": "",
            "gender": _gender(spec.voice),
            "accents": "",
            "variant": "",
            "locale": spec.language,
            "segment": "",
        }
        return [values[c] for c in CV_COLUMNS]

    labelled = [s for s in specs if s.split != UNLABELLED_SPLIT]
    unlabelled = [s for s in specs if s.split == UNLABELLED_SPLIT]
    for split in SPLITS:
        _write_tsv(lang_dir / f"{split}.tsv", CV_COLUMNS, (row(s) for s in labelled if s.split == split))
    _write_tsv(lang_dir / "validated.tsv", CV_COLUMNS, (row(s) for s in labelled))
    _write_tsv(lang_dir / "invalidated.tsv", CV_COLUMNS, ())
    # the unlabelled clips: other.tsv without their sentences, which go to a file of their own
    sentence = CV_COLUMNS.index("sentence")
    _write_tsv(lang_dir / f"{UNLABELLED_SPLIT}.tsv", CV_COLUMNS,
               ([*row(s)[:sentence], "", *row(s)[sentence + 1:]] for s in unlabelled))
    sentences = lang_dir / UNLABELLED_SENTENCES
    if unlabelled:
        _write_tsv(sentences, ("path", "sentence"), ((s.file_name, s.sentence) for s in unlabelled))
    else:
        sentences.unlink(missing_ok=True)
    _write_tsv(
        lang_dir / "clip_durations.tsv",
        ("clip", "duration[ms]"),
        ((s.file_name, str(round(durations[s.file_name] * 1000))) for s in specs),
    )


def _check_resume(out_dir: Path, config: SyntheticConfig, languages: list[str]) -> list[str]:
    """Refuse a folder built with other settings; return the union of its languages and ``languages``."""
    path = out_dir / CONFIG_FILE
    if not path.is_file():
        return languages
    stored = json.loads(path.read_text(encoding="utf-8"))
    current = config.to_json()
    diffs = [f.name for f in fields(config) if stored.get("config", {}).get(f.name) != current[f.name]]
    if diffs:
        raise ValueError(
            f"{out_dir} holds a synthetic corpus built with other settings ({', '.join(diffs)}); "
            "resume with the same settings or write to another folder"
        )
    return [*stored.get("languages", []), *[lang for lang in languages if lang not in stored.get("languages", [])]]


def build_synthetic_corpus(
    out_dir: str | os.PathLike[str],
    languages: str | Iterable[str] = DEFAULT_LANGUAGES,
    clips_per_language: int = 1000,
    seed: int = 0,
    num_workers: int = 2,
    *,
    progress: bool = True,
    unlabelled_clips: int = 0,
    unlabelled_languages: Iterable[str] | None = None,
    **settings: Any,
) -> dict[str, Any]:
    """Build (or resume) a synthetic multilingual corpus in the Common Voice release layout.

    Args:
        out_dir: the corpus folder; ``out_dir/<lang>/`` is a Common Voice language folder.
        languages: language codes (a list or ``"ro,cs"``), each with a wordfreq list and an espeak-ng voice
            (see :func:`supported_languages`); default :data:`DEFAULT_LANGUAGES`.
        clips_per_language (`int`, defaults to 1000): clips per language over train, dev and test.
        seed (`int`, defaults to 0): the corpus is a function of the seed and the settings.
        num_workers (`int`, defaults to 2): synthesis processes (1: in this process).
        progress (`bool`, defaults to `True`): show a tqdm progress bar.
        unlabelled_clips (`int`, defaults to 0): clips per language without a transcript, for self-training: new
            sentences of the training word lists, training voices, written to ``other.tsv`` with empty sentences
            (what each says goes to :data:`UNLABELLED_SENTENCES`, to measure pseudo-label error only). Their number
            leaves the labelled clips unchanged, and a corpus resumed with another number keeps every other clip.
        unlabelled_languages: the languages that get them (default: all of ``languages``).
        **settings: any other field of :class:`SyntheticConfig` (voices, noise_snr_db, sample_rate, ...).

    While it writes, ``out_dir/.owner_pid`` holds this process's id: a second build into the same folder is refused
    (it would remove the first one's half-written clips), one left by a build that died is taken over
    (:func:`~adaptspeech.data.output_folder.owned_folder`).

    Raises:
        FileExistsError: another live process is writing ``out_dir``.

    Returns:
        A summary: ``clips_total``, ``clips_written``, ``clips_kept`` (already on disk), ``synthesis_seconds``,
        ``clips_per_second`` (clips written per wall-clock second of synthesis), ``seconds`` (the whole call),
        ``audio_hours``, ``splits`` (``{lang: {split: clips}}``), ``train_voices``, ``test_voices``, ...
    """
    started = time.perf_counter()
    if num_workers < 1:
        raise ValueError(f"num_workers must be >= 1, got {num_workers}")
    langs = parse_languages(languages)
    supported = supported_languages()
    unknown = [lang for lang in langs if lang not in supported]
    if unknown:
        raise ValueError(
            f"languages: no wordfreq list or espeak-ng voice for {', '.join(unknown)}; "
            f"allowed values: {', '.join(supported)}"
        )
    allowed = {f.name for f in fields(SyntheticConfig)} - {"seed", "clips_per_language"}
    extra = sorted(set(settings) - allowed)
    if extra:
        raise TypeError(unknown_settings_message("build_synthetic_corpus", extra, sorted(allowed)))
    config = SyntheticConfig(seed=seed, clips_per_language=clips_per_language, **settings)
    if unlabelled_clips < 0:
        raise ValueError(f"unlabelled_clips must be >= 0, got {unlabelled_clips}")
    pool_langs = langs if unlabelled_languages is None else parse_languages(list(unlabelled_languages))
    stray = [lang for lang in pool_langs if lang not in langs]
    if stray:
        raise ValueError(f"unlabelled_languages: {', '.join(stray)} not among the languages {', '.join(langs)}")
    unlabelled = {lang: unlabelled_clips if lang in pool_langs else 0 for lang in langs}
    with owned_folder(out_dir) as out:  # another run writing it: refused (it would remove that run's *.part clips)
        return _write_corpus(out, config, langs, num_workers, progress, started, unlabelled)


def _write_corpus(
    out: Path, config: SyntheticConfig, langs: list[str], num_workers: int, progress: bool, started: float,
    unlabelled: dict[str, int],
) -> dict[str, Any]:
    """The body of :func:`build_synthetic_corpus`, run while it holds ``out``."""
    clips_per_language = config.clips_per_language
    all_languages = _check_resume(out, config, langs)
    out.mkdir(parents=True, exist_ok=True)
    train_voices, test_voices = config.voice_split()
    (out / CONFIG_FILE).write_text(
        json.dumps(
            {
                "config": config.to_json(),
                "languages": all_languages,
                "train_voices": train_voices,
                "test_voices": test_voices,
            },
            indent=1,
        ),
        encoding="utf-8",
    )

    plans = {lang: plan_language(lang, config, unlabelled.get(lang, 0)) for lang in langs}
    durations: dict[str, dict[str, float]] = {lang: {} for lang in langs}
    todo: list[tuple[ClipSpec, str, int | None]] = []
    for lang, specs in plans.items():
        clips_dir = out / lang / "clips"
        clips_dir.mkdir(parents=True, exist_ok=True)
        for partial in clips_dir.glob("*.part"):  # left by an interrupted build
            partial.unlink()
        for spec in specs:
            seconds = _existing_duration(clips_dir / spec.file_name)
            if seconds is None:
                todo.append((spec, str(clips_dir), config.sample_rate))
            else:
                durations[lang][spec.file_name] = seconds
    kept = sum(len(d) for d in durations.values())

    synth_start = time.perf_counter()
    with tqdm(total=len(todo), desc="synthesising", unit="clip", disable=not progress or not todo) as bar:
        if num_workers == 1 or len(todo) <= 1:
            results = map(_render_task, todo)
            for lang, name, seconds in results:
                durations[lang][name] = seconds
                bar.update()
        else:
            method = "fork" if "fork" in mp.get_all_start_methods() else "spawn"
            with mp.get_context(method).Pool(num_workers) as pool:
                chunk = max(1, min(16, len(todo) // (num_workers * 8)))
                for lang, name, seconds in pool.imap_unordered(_render_task, todo, chunksize=chunk):
                    durations[lang][name] = seconds
                    bar.update()
    synth_seconds = time.perf_counter() - synth_start

    for lang, specs in plans.items():
        _write_language_tsvs(out / lang, specs, durations[lang])
    total_seconds = sum(sum(d.values()) for d in durations.values())
    return {
        "out_dir": str(out),
        "languages": langs,
        "clips_per_language": clips_per_language,
        "clips_total": sum(len(s) for s in plans.values()),
        "clips_written": len(todo),
        "clips_kept": kept,
        "num_workers": num_workers,
        "synthesis_seconds": synth_seconds,
        "clips_per_second": len(todo) / synth_seconds if todo and synth_seconds > 0 else 0.0,
        "seconds": time.perf_counter() - started,
        "audio_hours": total_seconds / 3600.0,
        "splits": {lang: dict(Counter(s.split for s in specs)) for lang, specs in plans.items()},
        "train_voices": train_voices,
        "test_voices": test_voices,
        "unlabelled_clips": {lang: n for lang, n in unlabelled.items() if n},
    }
