"""What a synthetic corpus holds, decided from the seed alone: the word lists, the sentences, and each clip's voice,
rate, pitch, peak and noise (:func:`plan_language`); :mod:`adaptspeech.data.synthetic` renders the plan with espeak-ng
and writes the corpus.

Sentences are 3 to 10 words drawn from wordfreq's list of a language (frequency-weighted); espeak-ng speaks them with
a voice variant (the "speaker", written as ``client_id``), a speaking rate and a pitch, optionally with noise.

The test split measures generalisation, not memory: its voices are never used in train or dev, and its
sentences are built only from held-out words (one word in every ``1 / heldout_fraction`` of each word
list's ranks), which never occur in train or dev sentences.
"""

from __future__ import annotations

import json
import unicodedata
import zlib
from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from .espeak import PITCH_RANGE, RATE_RANGE, espeak_languages, voice_variants
from .text import normalize_text

DEFAULT_VOICES: tuple[str, ...] = (
    "m1",
    "m2",
    "m3",
    "m4",
    "m5",
    "m6",
    "m7",
    "f1",
    "f2",
    "f3",
    "f4",
    "f5",
    "klatt",
    "klatt2",
    "klatt3",
    "Andy",
    "Annie",
    "belinda",
    "david",
    "edward",
    "linda",
    "max",
    "michel",
    "steph",
)
"""espeak-ng voice variants used as speakers (the robotic and novelty variants are left out)."""

SINGLE_LETTER_WORDS: dict[str, frozenset[str]] = {
    "ro": frozenset("aoei"),
    "cs": frozenset("avszkoiu"),
    "sk": frozenset("avzsokiu"),
    "sl": frozenset("vzsoak"),
    "pl": frozenset("wizoau"),
    "it": frozenset("eaèio"),
    "es": frozenset("yaoeu"),
    "pt": frozenset("aoeéà"),
    "nl": frozenset("u"),
    "de": frozenset(),
}
"""One-letter words kept per language (real words); other one-letter entries of wordfreq's lists are
mostly letter names or abbreviation debris that espeak-ng would spell. Languages not listed keep none."""

_ESPEAK_VOICE = {"zh": "cmn", "nb": "nb", "fil": "tl"}  # wordfreq code -> espeak-ng voice where they differ
SPLITS = ("train", "dev", "test")
UNLABELLED_SPLIT = "other"
"""The split of the unlabelled clips: Common Voice's ``other.tsv`` (clips without a validated transcript), written
with empty sentences."""
_UNLABELLED_STREAM = 2


@dataclass(frozen=True)
class SyntheticConfig:
    """Settings of a synthetic corpus (all but the languages and the worker count must match to resume).

    Args:
        seed (`int`): everything random derives from it.
        clips_per_language (`int`): clips of each language over the three splits.
        split_fractions (`tuple[float, float, float]`, defaults to ``(0.8, 0.1, 0.1)``): train, dev, test.
        voices (`tuple[str, ...]`): espeak-ng voice variants, the speakers.
        num_test_voices (`int`, defaults to 4): voices kept for the test split only (drawn by the seed).
        top_words (`int`, defaults to 10000): size of each language's word list before cleaning.
        heldout_fraction (`float`, defaults to 0.1): share of each word list, below ``heldout_min_rank``,
            kept for test sentences.
        heldout_min_rank (`int`, defaults to 100): the most frequent words (function words) are never held
            out, so that train sentences keep them and test sentences are not dominated by one of them.
        words_per_sentence (`tuple[int, int]`, defaults to ``(3, 10)``): inclusive range.
        frequency_exponent (`float`, defaults to 1.0): words are drawn with probability ``∝ frequency^exponent``.
        rate_range, pitch_range: inclusive ranges of espeak-ng's words per minute and base pitch.
        noise_snr_db (`tuple[float, float]`, *optional*): add white noise at an SNR drawn from this range.
        sample_rate (`int`, *optional*, defaults to 16000): resample espeak-ng's 22050 Hz audio to this rate
            before writing (``None``: keep 22050 Hz). 16 kHz makes smaller files, a faster build (MP3 encoding
            is most of the cost) and no resampling when the corpus is loaded for a 16 kHz model.
        min_char_words, min_char_mass: a character survives cleaning if at least ``min_char_words`` words
            hold it or the words holding it carry at least ``min_char_mass`` of the list's frequency.
    """

    seed: int = 0
    clips_per_language: int = 1000
    split_fractions: tuple[float, float, float] = (0.8, 0.1, 0.1)
    voices: tuple[str, ...] = DEFAULT_VOICES
    num_test_voices: int = 4
    top_words: int = 10000
    heldout_fraction: float = 0.1
    heldout_min_rank: int = 100
    words_per_sentence: tuple[int, int] = (3, 10)
    frequency_exponent: float = 1.0
    rate_range: tuple[int, int] = (130, 200)
    pitch_range: tuple[int, int] = (30, 70)
    noise_snr_db: tuple[float, float] | None = None
    sample_rate: int | None = 16000
    min_char_words: int = 20
    min_char_mass: float = 1e-3
    peak_range: tuple[float, float] = (0.3, 0.9)

    def __post_init__(self) -> None:
        if self.clips_per_language < 3:
            raise ValueError(f"clips_per_language must be >= 3 (one per split), got {self.clips_per_language}")
        if (
            len(self.split_fractions) != 3
            or min(self.split_fractions) <= 0
            or abs(sum(self.split_fractions) - 1) > 1e-6
        ):
            raise ValueError(
                f"split_fractions: three positive shares (train, dev, test) summing to 1, got {self.split_fractions}"
            )
        unknown = sorted(set(self.voices) - set(voice_variants()))
        if unknown:
            raise ValueError(
                f"voices: unknown espeak-ng variant(s) {', '.join(unknown)}; "
                f"allowed values: {', '.join(voice_variants())}"
            )
        if len(set(self.voices)) != len(self.voices):
            raise ValueError("voices: each voice variant may appear once")
        if not 1 <= self.num_test_voices < len(self.voices):
            raise ValueError(
                f"num_test_voices must be in [1, {len(self.voices) - 1}] for {len(self.voices)} voices, "
                f"got {self.num_test_voices}"
            )
        if not 0 < self.heldout_fraction <= 0.5:
            raise ValueError(f"heldout_fraction must be in (0, 0.5], got {self.heldout_fraction}")
        if not 0 <= self.heldout_min_rank < self.top_words // 2:
            raise ValueError(f"heldout_min_rank must be in [0, top_words / 2), got {self.heldout_min_rank}")
        lo, hi = self.words_per_sentence
        if not 1 <= lo <= hi:
            raise ValueError(
                f"words_per_sentence must be (min, max) with 1 <= min <= max, got {self.words_per_sentence}"
            )
        for name, (low, high), (a, b) in (
            ("rate_range", self.rate_range, RATE_RANGE),
            ("pitch_range", self.pitch_range, PITCH_RANGE),
        ):
            if not a <= low <= high <= b:
                raise ValueError(f"{name} must lie within [{a}, {b}] with min <= max, got {(low, high)}")
        if self.noise_snr_db is not None and self.noise_snr_db[0] > self.noise_snr_db[1]:
            raise ValueError(f"noise_snr_db must be (min, max), got {self.noise_snr_db}")
        if not 0 < self.peak_range[0] <= self.peak_range[1] <= 1:
            raise ValueError(f"peak_range must lie within (0, 1], got {self.peak_range}")

    def split_sizes(self) -> dict[str, int]:
        """Clips per split of each language: dev and test rounded from their shares, train the rest."""
        n = self.clips_per_language
        dev = max(1, round(n * self.split_fractions[1]))
        test = max(1, round(n * self.split_fractions[2]))
        return {"train": n - dev - test, "dev": dev, "test": test}

    def voice_split(self) -> tuple[list[str], list[str]]:
        """``(train_and_dev_voices, test_voices)``, drawn from the seed, each sorted."""
        order = np.random.default_rng([self.seed, 1]).permutation(len(self.voices))
        test = sorted(self.voices[i] for i in order[: self.num_test_voices])
        return sorted(v for v in self.voices if v not in test), test

    def to_json(self) -> dict[str, Any]:
        return json.loads(json.dumps(asdict(self)))


@dataclass(frozen=True)
class ClipSpec:
    """Everything needed to render one clip, decided in the main process.

    ``peak`` is the clip's peak amplitude after scaling, ``snr_db`` the noise level (``None``: no noise) and
    ``seed`` the clip's seed for espeak-ng's random numbers and for the noise.
    """

    language: str
    split: str
    file_name: str
    sentence: str
    voice: str
    rate: int
    pitch: int
    peak: float
    snr_db: float | None
    seed: int


def _language_rng(seed: int, language: str, stream: int) -> np.random.Generator:
    return np.random.default_rng([seed, zlib.crc32(language.encode()), stream])


def load_word_list(language: str, config: SyntheticConfig) -> tuple[list[str], np.ndarray]:
    """The cleaned top of wordfreq's list for ``language``, most frequent first, and the frequencies.

    Cleaning keeps words that :func:`~adaptspeech.data.text.normalize_text` leaves unchanged and that are
    made of letters only (no digits, apostrophes or symbols), one-letter words only from
    :data:`SINGLE_LETTER_WORDS`, and drops every word holding a rare character (held by fewer than
    ``min_char_words`` words and by less than ``min_char_mass`` of the frequency: stray symbols, other
    scripts, foreign accents).
    """
    import wordfreq

    singles = SINGLE_LETTER_WORDS.get(language, frozenset())
    words: list[str] = []
    freqs: list[float] = []
    for bucket, bucket_words in enumerate(wordfreq.get_frequency_list(language)):
        for word in bucket_words:
            if len(word) == 1 and word not in singles:
                continue
            if all(unicodedata.category(c)[0] in "LM" for c in word) and normalize_text(word, language) == word:
                words.append(word)
                freqs.append(10.0 ** (-bucket / 100.0))
        if len(words) >= config.top_words:
            break
    words, freqs = words[: config.top_words], freqs[: config.top_words]
    total = sum(freqs)
    char_words: Counter[str] = Counter()
    char_mass: Counter[str] = Counter()
    for word, freq in zip(words, freqs):
        for char in set(word):
            char_words[char] += 1
            char_mass[char] += freq / total
    rare = {c for c in char_words if char_words[c] < config.min_char_words and char_mass[c] < config.min_char_mass}
    kept = [(w, f) for w, f in zip(words, freqs) if not rare.intersection(w)]
    return [w for w, _ in kept], np.array([f for _, f in kept], dtype=np.float64)


def split_word_list(num_words: int, heldout_fraction: float, rng: np.random.Generator, min_rank: int = 0) -> np.ndarray:
    """Boolean mask of held-out words: from rank ``min_rank`` on, one random word in each block of
    ``round(1 / heldout_fraction)`` ranks, so held-out words span the frequency range below the top."""
    block = max(2, round(1 / heldout_fraction))
    mask = np.zeros(num_words, dtype=bool)
    for start in range(min_rank, num_words, block):
        mask[start + rng.integers(min(block, num_words - start))] = True
    return mask


def _sentences(
    words: list[str],
    weights: np.ndarray,
    count: int,
    config: SyntheticConfig,
    rng: np.random.Generator,
    taken: set[str],
) -> list[str]:
    """``count`` sentences of ``words`` (drawn with ``weights``), distinct from each other and ``taken``."""
    lo, hi = config.words_per_sentence
    probs = weights / weights.sum()
    out: list[str] = []
    for _ in range(count):
        for _attempt in range(100):
            length = int(rng.integers(lo, hi + 1))
            sentence = " ".join(words[i] for i in rng.choice(len(words), size=length, p=probs))
            if sentence not in taken:
                break
        taken.add(sentence)
        out.append(sentence)
    return out


def _display(sentence: str, language: str) -> str:
    """Capitalise (when normalisation undoes it) and end with a full stop, as Common Voice text looks."""
    shown = sentence[:1].upper() + sentence[1:]
    return (shown if normalize_text(shown, language) == sentence else sentence) + "."


def plan_language(language: str, config: SyntheticConfig, unlabelled: int = 0) -> list[ClipSpec]:
    """The clips of one language, train then dev then test, from the seed alone; then ``unlabelled`` clips of split
    ``other`` (:data:`UNLABELLED_SPLIT`: new sentences of the training word list, training voices), drawn from a
    random stream of their own so that their number leaves the labelled clips as they are."""
    words, freqs = load_word_list(language, config)
    if len(words) < 2 * config.heldout_min_rank + 20:
        raise ValueError(f"language {language!r}: only {len(words)} usable words in wordfreq's list")
    rng = _language_rng(config.seed, language, 0)
    heldout = split_word_list(len(words), config.heldout_fraction, rng, config.heldout_min_rank)
    weights = freqs**config.frequency_exponent
    train_words = [w for w, h in zip(words, heldout) if not h]
    test_words = [w for w, h in zip(words, heldout) if h]
    sizes = config.split_sizes()
    taken: set[str] = set()
    sentences = {
        "train": _sentences(train_words, weights[~heldout], sizes["train"], config, rng, taken),
        "dev": _sentences(train_words, weights[~heldout], sizes["dev"], config, rng, taken),
        "test": _sentences(test_words, weights[heldout], sizes["test"], config, rng, taken),
    }
    train_voices, test_voices = config.voice_split()
    specs: list[ClipSpec] = []
    index = 0
    for split in SPLITS:
        voices = test_voices if split == "test" else train_voices
        for sentence in sentences[split]:
            u = float(rng.random())  # drawn with or without noise, so that noise leaves the rest of the plan alone
            specs.append(_clip_spec(language, split, f"synthetic_{language}_{index:06d}.mp3", sentence, voices, u,
                                    config, rng))
            index += 1
    if unlabelled > 0:
        pool_rng = _language_rng(config.seed, language, _UNLABELLED_STREAM)
        for i, sentence in enumerate(_sentences(train_words, weights[~heldout], unlabelled, config, pool_rng, taken)):
            specs.append(_clip_spec(language, UNLABELLED_SPLIT, f"synthetic_{language}_u{i:06d}.mp3", sentence,
                                    train_voices, float(pool_rng.random()), config, pool_rng))
    return specs


def _clip_spec(language: str, split: str, file_name: str, sentence: str, voices: Sequence[str], u: float,
               config: SyntheticConfig, rng: np.random.Generator) -> ClipSpec:
    """One clip's rendering settings, drawn from ``rng`` (``u``: the uniform draw of its noise level)."""
    snr = None if config.noise_snr_db is None else config.noise_snr_db[0] + u * float(np.ptp(config.noise_snr_db))
    return ClipSpec(
        language=language,
        split=split,
        file_name=file_name,
        sentence=_display(sentence, language),
        voice=voices[int(rng.integers(len(voices)))],
        rate=int(rng.integers(config.rate_range[0], config.rate_range[1] + 1)),
        pitch=int(rng.integers(config.pitch_range[0], config.pitch_range[1] + 1)),
        peak=float(rng.uniform(*config.peak_range)),
        snr_db=snr,
        seed=int(rng.integers(2**31)),
    )


def supported_languages() -> list[str]:
    """Languages with both a wordfreq list and an espeak-ng voice."""
    import wordfreq

    voices = espeak_languages()
    return sorted(lang for lang in wordfreq.available_languages() if espeak_voice(lang) in voices)


def espeak_voice(language: str) -> str:
    """The espeak-ng voice of a wordfreq language code (the same code unless :data:`_ESPEAK_VOICE` maps it)."""
    return _ESPEAK_VOICE.get(language, language)
