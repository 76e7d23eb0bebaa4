"""Low-resource subsets (budgets, determinism, speaker-disjointness) and temperature-based language mixing."""

from __future__ import annotations

import itertools
from collections import Counter

import numpy as np
import pytest
from datasets import Dataset

from adaptspeech.data import (
    SubsetSize,
    TemperatureSampler,
    language_sampling_probabilities,
    low_resource_subset,
    speaker_disjoint_split,
    speakers,
    temperature_mix,
)
from adaptspeech.data.subsets import mixture_indices, nested_subsets, selection_order, subset_indices


def _pool(seed: int = 0) -> Dataset:
    """Two languages; ``ro``: 12 speakers x 5 clips of 2-8 s plus 6 clips without a speaker id; ``cs``: 30 clips."""
    rng = np.random.default_rng(seed)
    rows = {"language": [], "client_id": [], "duration": [], "path": []}
    for s in range(12):
        for k in range(5):
            rows["language"].append("ro")
            rows["client_id"].append(f"ro-spk{s}")
            rows["duration"].append(float(rng.uniform(2, 8)))
            rows["path"].append(f"ro_{s}_{k}.mp3")
    for k in range(6):
        rows["language"].append("ro")
        rows["client_id"].append("")
        rows["duration"].append(3.0)
        rows["path"].append(f"ro_anon_{k}.mp3")
    for k in range(30):
        rows["language"].append("cs")
        rows["client_id"].append(f"cs-spk{k % 3}")
        rows["duration"].append(4.0)
        rows["path"].append(f"cs_{k}.mp3")
    return Dataset.from_dict(rows)


@pytest.mark.parametrize(
    ("text", "expected"),
    [("30min", (30, "minutes")), ("1.5h", (1.5, "hours")), ("500utt", (500, "utterances")), ("2 Hours", (2, "hours")),
     (40, (40, "utterances"))],
)  # fmt: skip
def test_sizes_parse(text, expected):
    size = SubsetSize.parse(text)
    assert (size.amount, size.unit) == expected


@pytest.mark.parametrize("text", ["30", "ten minutes", "5 parsecs", "0min", "2.5utt"])
def test_bad_sizes_are_refused(text):
    with pytest.raises(ValueError):
        SubsetSize.parse(text)


def test_utterance_budget_per_language_deterministic_and_whole_speakers():
    pool = _pool()
    subset = low_resource_subset(pool, "12utt", seed=3)
    assert Counter(subset["language"]) == {"ro": 12, "cs": 12}
    assert subset["path"] == low_resource_subset(pool, "12utt", seed=3)["path"]
    assert subset["path"] != low_resource_subset(pool, "12utt", seed=4)["path"]
    ro = subset.filter(lambda lang: lang == "ro", input_columns="language")
    per_speaker = Counter(c or p for c, p in zip(ro["client_id"], ro["path"]))
    # whole speakers in turn: at most one speaker (the last one taken) is cut
    full = {"": 1, **{f"ro-spk{s}": 5 for s in range(12)}}
    cut = [s for s, n in per_speaker.items() if n != full.get(s, 1)]
    assert len(cut) <= 1


def test_duration_budget_is_an_upper_bound_filled_to_within_one_clip():
    pool = _pool()
    subset = low_resource_subset(pool, "1min", seed=0)
    for lang in ("ro", "cs"):
        durations = [d for d, x in zip(subset["duration"], subset["language"]) if x == lang]
        longest = max(d for d, x in zip(pool["duration"], pool["language"]) if x == lang)
        assert sum(durations) <= 60.0  # "1min" means at most one minute
        assert 60.0 - sum(durations) < longest  # stopped only because the next clip would not fit


def test_duration_budget_stops_before_the_clip_that_would_overshoot():
    # one speaker, clips of 4 s: a 15 s budget takes exactly three of them (12 s), never a fourth (16 s)
    assert len(subset_indices(["ro"] * 5, ["spk"] * 5, [4.0] * 5, SubsetSize(0.25, "minutes"))) == 3
    # a budget met exactly is met, not overshot: 16 s of 4 s clips is four clips
    assert len(subset_indices(["ro"] * 5, ["spk"] * 5, [4.0] * 5, SubsetSize(16 / 60, "minutes"))) == 4


def test_excluded_speakers_never_appear_and_splits_are_speaker_disjoint():
    pool = _pool()
    held = {"ro-spk0", "ro-spk1", "cs-spk0"}
    subset = low_resource_subset(pool, "20utt", seed=1, exclude_speakers=held)
    assert not speakers(subset) & held
    parts = speaker_disjoint_split(pool, {"train": "25utt", "dev": "5utt", "test": "5utt"}, seed=0)
    spk = {name: speakers(part) for name, part in parts.items()}
    assert not spk["train"] & spk["dev"] and not spk["train"] & spk["test"] and not spk["dev"] & spk["test"]
    assert all(len(part) > 0 for part in parts.values())


def test_subsets_of_the_synthetic_corpus_exclude_the_test_voices(loaded_corpus):
    train, test = loaded_corpus["train"], loaded_corpus["test"]
    subset = low_resource_subset(train, "5utt", seed=0, exclude_speakers=speakers(test))
    assert Counter(subset["language"]) == {"ro": 5, "cs": 5}
    assert not speakers(subset) & speakers(test)
    assert subset["path"] == low_resource_subset(train, "5utt", seed=0, exclude_speakers=speakers(test))["path"]


def test_a_short_language_gives_everything_and_warns(caplog):
    subset = low_resource_subset(_pool(), "40utt", seed=0)
    assert Counter(subset["language"]) == {"ro": 40, "cs": 30}
    assert "language cs has only 30 utterances" in caplog.text


def test_duration_budgets_need_durations():
    pool = _pool().map(lambda r: {"duration": None})
    with pytest.raises(ValueError, match="needs the duration of every clip"):
        low_resource_subset(pool, "10min")


def test_nested_subsets_are_nested_speaker_disjoint_from_dev_and_test_and_equal_single_subsets(caplog):
    pool = _pool()
    dev = pool.filter(lambda spk: spk in ("ro-spk2", "ro-spk3", "cs-spk1"), input_columns="client_id")
    test = pool.filter(lambda spk: spk == "ro-spk4", input_columns="client_id")
    held = speakers(dev) | speakers(test)
    sizes = ["0.5min", "1min", "3min", "10min"]  # 10min is more than ro (46 clips) or cs (20 clips) has left
    subsets = nested_subsets(pool, sizes, seed=5, exclude_speakers=held)
    assert list(subsets) == sizes
    paths = {size: set(part["path"]) for size, part in subsets.items()}
    for small, large in itertools.pairwise(sizes):
        assert paths[small] < paths[large]  # nested, and each budget adds rows
    for size, part in subsets.items():
        assert not speakers(part) & held
        # what a training stage with data.train_subset=<size> trains on
        assert part["path"] == low_resource_subset(pool, size, seed=5, exclude_speakers=held)["path"]
        for lang in ("ro", "cs"):
            assert sum(d for d, x in zip(part["duration"], part["language"]) if x == lang) <= SubsetSize.parse(
                size
            ).budget
    eligible = [p for p, spk in zip(pool["path"], pool["client_id"]) if spk not in held]
    assert sorted(subsets["10min"]["path"]) == sorted(eligible)  # short of the budget: everything, with a warning
    assert "language cs has only" in caplog.text
    # not nested by accident: an independent draw (another seed) of the small budget is not inside the large one
    other = set(low_resource_subset(pool, "1min", seed=6, exclude_speakers=held)["path"])
    assert other != paths["1min"] and not other <= paths["3min"]


def test_selection_order_takes_whole_speakers_in_turn():
    pool = _pool()
    order = selection_order(pool["language"], pool["client_id"], seed=2, exclude_speakers={"ro-spk0"})
    assert sorted(order) == ["cs", "ro"]
    ro_speakers = [pool["client_id"][row] or f"row{row}" for row in order["ro"]]
    assert len(ro_speakers) == 5 * 11 + 6 and "ro-spk0" not in ro_speakers
    runs = [spk for k, spk in enumerate(ro_speakers) if k == 0 or spk != ro_speakers[k - 1]]
    assert len(runs) == len(set(runs)) == 11 + 6  # each speaker's rows in one run
    with pytest.raises(ValueError, match="must differ"):
        nested_subsets(pool, ["1min", "1min"])


def test_sampling_probabilities_follow_the_temperature_rule():
    counts = {"ro": 1000, "cs": 100, "sl": 10}
    for temperature in (0.5, 1.0, 2.0, 5.0):
        probs = language_sampling_probabilities(counts, temperature)
        weights = {}
        for lang, n in counts.items():  # p_l ∝ n_l^(1/T), computed by hand
            weights[lang] = n ** (1.0 / temperature)
        total = 0.0
        for w in weights.values():
            total += w
        for lang in counts:
            assert probs[lang] == pytest.approx(weights[lang] / total)
    assert language_sampling_probabilities(counts, 1.0) == pytest.approx(
        {"ro": 1000 / 1110, "cs": 100 / 1110, "sl": 10 / 1110}
    )
    flat = language_sampling_probabilities(counts, 1e6)
    assert max(flat.values()) - min(flat.values()) < 1e-4
    with pytest.raises(ValueError, match="temperature"):
        language_sampling_probabilities(counts, 0.0)


def test_temperature_one_is_a_permutation_and_higher_temperatures_upsample():
    languages = ["ro"] * 90 + ["cs"] * 10
    natural = mixture_indices(languages, 1.0, None, np.random.default_rng(0))
    assert sorted(natural.tolist()) == list(range(100))
    flat = mixture_indices(languages, 1e6, None, np.random.default_rng(0))
    counts = Counter(languages[i] for i in flat)
    assert counts == {"ro": 50, "cs": 50}  # p ≈ 0.5 each: cs rows drawn 5 times each, evenly
    assert Counter(i for i in flat if languages[i] == "cs") == dict.fromkeys(range(90, 100), 5)


def test_temperature_mix_counts_match_rounded_probabilities():
    pool = _pool()
    mixed = temperature_mix(pool, 2.0, num_samples=101, seed=0)
    probs = language_sampling_probabilities(Counter(pool["language"]), 2.0)
    counts = Counter(mixed["language"])
    assert sum(counts.values()) == 101
    for lang, p in probs.items():
        assert abs(counts[lang] - 101 * p) < 1
    assert mixed["path"] == temperature_mix(pool, 2.0, num_samples=101, seed=0)["path"]


def test_sampler_redraws_each_epoch_deterministically():
    languages = ["ro"] * 20 + ["cs"] * 5
    sampler = TemperatureSampler(languages, temperature=3.0, seed=7)
    first = list(sampler)
    assert len(first) == len(sampler) == 25 and list(sampler) == first
    sampler.set_epoch(1)
    assert list(sampler) != first
    sampler.set_epoch(0)
    assert list(sampler) == first
