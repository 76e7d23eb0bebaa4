"""The confidence methods of adaptspeech/decoding/confidence.py: the Gibbs / Tsallis / Rényi frame confidences of
Laptev & Ginsburg 2022 against a direct numpy computation, the word aggregations, the method names, the N-best
temperature and its fit on dev."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from adaptspeech.data.processor import build_processor
from adaptspeech.data.text import build_vocab
from adaptspeech.decoding.confidence import (
    ConfidenceMethod,
    aggregate,
    best_path_words,
    fit_nbest_temperature,
    frame_confidence,
    nbest_word_confidences,
    nbest_word_posteriors,
)


def _numpy_confidence(probs: np.ndarray, kind: str, normalisation: str, alpha: float) -> np.ndarray:
    """The reference: each frame's entropy and the uniform posterior's, written out in numpy (float64)."""
    vocab = probs.shape[-1]
    if kind == "gibbs":
        h, h_max = -(probs * np.log(probs)).sum(-1), np.log(vocab)
    elif kind == "tsallis":
        h, h_max = (1 - (probs**alpha).sum(-1)) / (alpha - 1), (1 - vocab ** (1 - alpha)) / (alpha - 1)
    else:
        h, h_max = np.log((probs**alpha).sum(-1)) / (1 - alpha), np.log(vocab)
    if normalisation == "lin":
        return 1 - h / h_max
    return (np.exp(-h) - np.exp(-h_max)) / (1 - np.exp(-h_max))


@pytest.mark.parametrize("kind", ["gibbs", "tsallis", "renyi"])
@pytest.mark.parametrize("normalisation", ["lin", "exp"])
@pytest.mark.parametrize("alpha", [0.25, 1 / 3, 0.5, 2.0])
def test_entropy_confidences_match_numpy(kind, normalisation, alpha):
    torch.manual_seed(1)
    log_probs = (3 * torch.randn(11, 13)).double().log_softmax(-1)
    expected = _numpy_confidence(log_probs.exp().numpy(), kind, normalisation, alpha)
    got = frame_confidence(log_probs, f"{kind}_{normalisation}", alpha).numpy()
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6)
    assert ((got >= 0) & (got <= 1)).all()
    one_hot = torch.full((1, 13), -1e9).double()
    one_hot[0, 4] = 0.0
    assert float(frame_confidence(one_hot, f"{kind}_{normalisation}", alpha)) == pytest.approx(1.0, abs=1e-6)
    uniform = torch.full((1, 13), -math.log(13)).double()
    assert float(frame_confidence(uniform, f"{kind}_{normalisation}", alpha)) == pytest.approx(0.0, abs=1e-6)


def test_alpha_one_is_gibbs_and_entropy_is_tsallis_exp_of_a_third():
    log_probs = torch.randn(5, 7).double().log_softmax(-1)
    gibbs = frame_confidence(log_probs, "gibbs_exp").numpy()
    np.testing.assert_allclose(frame_confidence(log_probs, "tsallis_exp", 1.0).numpy(), gibbs, rtol=1e-6)
    np.testing.assert_allclose(frame_confidence(log_probs, "renyi_exp", 1.0).numpy(), gibbs, rtol=1e-6)
    np.testing.assert_allclose(frame_confidence(log_probs, "entropy", 0.9).numpy(),
                               frame_confidence(log_probs, "tsallis_exp", 1 / 3).numpy(), rtol=1e-6)


def test_aggregations_and_bad_values():
    assert aggregate([0.5, 0.8, 0.2], "min") == pytest.approx(0.2)
    assert aggregate([0.5, 0.8, 0.2], "mean") == pytest.approx(0.5)
    assert aggregate([0.5, 0.8, 0.2], "product") == pytest.approx(0.08)
    with pytest.raises(ValueError, match="word aggregation 'max'; allowed values: min, mean, product"):
        aggregate([1.0], "max")
    with pytest.raises(ValueError, match="confidence alpha 0"):
        frame_confidence(torch.zeros(1, 3), "renyi_exp", 0)
    with pytest.raises(ValueError, match="N-best temperature -1"):
        ConfidenceMethod(nbest_temperature=-1)
    with pytest.raises(ValueError, match="alpha 'x' is not a number"):
        ConfidenceMethod.parse("tsallis_exp@x/min")


def test_method_names_round_trip():
    for text in ("max_prob/min", "tsallis_exp@0.25/product", "renyi_lin@0.5/mean", "gibbs_exp/min"):
        assert ConfidenceMethod.parse(text).name == text
    assert ConfidenceMethod.parse("max_prob") == ConfidenceMethod()


def test_best_path_words_aggregate_their_tokens(tmp_path):
    tokenizer = build_processor(build_vocab(["ab cd"]), tmp_path).tokenizer
    ids = {c: tokenizer.convert_tokens_to_ids(c) for c in "abcd|"}
    vocab = len(tokenizer)
    frames = []
    for label, p in (("a", 0.9), ("b", 0.6), ("|", 0.99), ("c", 0.7)):
        row = np.full(vocab, (1 - p) / (vocab - 1))
        row[ids[label]] = p
        frames.append(row)
    log_probs = torch.tensor(np.log(frames))
    words = {agg: best_path_words(log_probs, tokenizer, method=ConfidenceMethod(aggregation=agg))
             for agg in ("min", "mean", "product")}
    assert [w.text for w in words["min"]] == ["ab", "c"]
    assert [w.confidence for w in words["min"]] == pytest.approx([0.6, 0.7])
    assert [w.confidence for w in words["mean"]] == pytest.approx([0.75, 0.7])
    assert [w.confidence for w in words["product"]] == pytest.approx([0.54, 0.7])


def test_nbest_temperature_flattens_the_posterior_and_is_fitted_by_log_loss():
    beams = [([("a", (0, 2)), ("b", (3, 5))], -1.0), ([("a", (0, 2)), ("x", (3, 5))], -3.0)]
    for t in (0.5, 1.0, 4.0):
        w = np.exp(np.array([-1.0, -3.0]) / t)
        w /= w.sum()
        assert nbest_word_posteriors(beams, temperature=t) == pytest.approx([1.0, w[0]])
    frames = np.ones(6)
    assert nbest_word_confidences(beams, frames, 2.0) == pytest.approx(nbest_word_posteriors(beams, temperature=2.0))
    # "b" is wrong half the time: the fitted temperature is the one whose posterior of "b" is nearest 0.5
    nbests = [beams] * 4
    correct = [[True, True], [True, False], [True, True], [True, False]]
    grid = [0.5, 1.0, 2.0, 8.0, 100.0]
    temperature, losses = fit_nbest_temperature(nbests, [frames] * 4, correct, grid)
    assert temperature == 100.0 and losses == sorted(losses, reverse=True)
    temperature, _ = fit_nbest_temperature(nbests, [frames] * 4, [[True, True]] * 4, grid)
    assert temperature == 0.5  # every word right: the sharpest posterior
    with pytest.raises(ValueError, match="utterance 0: 1 correctness flags for the 2 words"):
        fit_nbest_temperature([beams], [frames], [[True]])
