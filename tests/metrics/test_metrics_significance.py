"""Paired bootstrap over utterances: per-utterance edits add up to the corpus counts, the vectorised resampling
equals a plain loop over the same draws, and the interval behaves on systems with a known ordering."""

import numpy as np
import pytest

from adaptspeech.metrics.scoring import count_edits
from adaptspeech.metrics.significance import paired_bootstrap, utterance_edits

REFS = ["ahoj svet", "dobre rano", "", "   ", "kde je stanica"]
HYPS = ["ahoj svet", "dobry rano", "nieco", "", "kde stanica"]


@pytest.mark.parametrize("unit", ["char", "word"])
def test_utterance_edits_add_up_to_the_corpus_counts(unit):
    edits, ref_units = utterance_edits(HYPS, REFS, unit)
    corpus = count_edits(HYPS, REFS, unit)
    assert edits.sum() == corpus.edits and ref_units.sum() == corpus.ref_units
    if unit == "char":
        # by hand: 0 | o->y 1 | 5 insertions into an empty reference | space-only reference vs empty: 0 | "je " 3
        assert edits.tolist() == [0, 1, 5, 0, 3]
        assert ref_units.tolist() == [9, 10, 0, 0, 14]


def _naive(a, b, n, num_samples, confidence, seed):
    draws = np.random.default_rng(seed).integers(0, len(a), size=(num_samples, len(a)))
    deltas = []
    for row in draws:
        ea = sum(a[i] for i in row)
        eb = sum(b[i] for i in row)
        units = max(sum(n[i] for i in row), 1)
        deltas.append((ea - eb) / units)
    tail = (1 - confidence) / 2
    low, high = np.quantile(deltas, [tail, 1 - tail])
    return low, high, sum(d >= 0 for d in deltas) / num_samples


def test_equals_a_plain_loop_over_the_same_draws():
    rng = np.random.default_rng(7)
    n = rng.integers(5, 40, size=30)
    a = rng.integers(0, 6, size=30)
    b = rng.integers(0, 6, size=30)
    result = paired_bootstrap(a, b, n, num_samples=300, confidence=0.9, seed=3)
    low, high, p = _naive(a.tolist(), b.tolist(), n.tolist(), 300, 0.9, 3)
    assert result.low == pytest.approx(low, abs=1e-12) and result.high == pytest.approx(high, abs=1e-12)
    assert result.p_not_better == pytest.approx(p)
    assert result.rate_a == pytest.approx(a.sum() / n.sum()) and result.rate_b == pytest.approx(b.sum() / n.sum())
    assert result.delta == pytest.approx(result.rate_a - result.rate_b)
    assert result.low <= result.delta <= result.high
    assert paired_bootstrap(a, b, n, num_samples=300, confidence=0.9, seed=3) == result  # same seed, same draws


def test_identical_systems_and_a_uniformly_better_one():
    n = np.full(20, 10)
    same = paired_bootstrap(np.arange(20) % 4, np.arange(20) % 4, n)
    assert same.delta == same.low == same.high == 0.0 and same.p_not_better == 1.0
    better = paired_bootstrap(np.zeros(20), np.ones(20), n)  # A has one error fewer on every utterance
    assert better.high == pytest.approx(-0.1) and better.low == pytest.approx(-0.1)
    assert better.p_not_better == 0.0
    assert "not better in 0% of 1000 resamples" in better.describe()


def test_one_wrong_utterance_gives_a_wide_interval():
    # A is better only through a single utterance: the interval must reach zero (a draw without it ties)
    n = np.full(50, 20)
    a = np.zeros(50)
    b = np.zeros(50)
    b[0] = 10
    result = paired_bootstrap(a, b, n, num_samples=2000)
    assert result.delta == pytest.approx(-10 / 1000)
    assert result.high == 0.0 and result.p_not_better > 0.3  # P(utterance 0 never drawn) = (49/50)^50 ~ 0.36


def test_bad_input_is_refused():
    with pytest.raises(ValueError, match="equal in length"):
        paired_bootstrap([1, 2], [1], [3, 3])
    with pytest.raises(ValueError, match="at least one"):
        paired_bootstrap([], [], [])
    with pytest.raises(ValueError, match="confidence"):
        paired_bootstrap([1], [1], [1], confidence=1.5)
    with pytest.raises(ValueError, match="predictions"):
        utterance_edits(["a"], ["a", "b"])
