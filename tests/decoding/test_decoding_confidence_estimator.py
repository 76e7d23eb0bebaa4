"""The learned word confidence of adaptspeech/decoding/confidence_estimator.py: the per-word features of a hand-made
posterior, the logistic regression's fit (a known model recovered, a separable set separated, the mean prediction
equal to the share correct), the JSON round trip and the one-line refusal of a bad estimator file."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch

from adaptspeech.data.processor import build_processor
from adaptspeech.data.text import build_vocab
from adaptspeech.decoding.confidence import (
    ConfidenceMethod,
    best_path_features,
    best_path_words,
    frame_measures,
    lm_beam_features,
)
from adaptspeech.decoding.confidence_estimator import (
    ESTIMATOR_FILE,
    fit_estimator,
    load_estimator,
    log_odds,
    word_features,
)
from adaptspeech.metrics.confidence import roc_auc


def _logit(p: float) -> float:
    return math.log(p / (1 - p))


def _posterior(peaks: list[tuple[int, float]], vocab: int) -> torch.Tensor:
    """``[T, vocab]`` log-probabilities: frame ``t`` puts ``p`` on label ``i`` and the rest evenly elsewhere."""
    rows = []
    for index, p in peaks:
        row = np.full(vocab, (1 - p) / (vocab - 1))
        row[index] = p
        rows.append(row)
    return torch.tensor(np.log(rows))


def test_word_features_of_a_hand_made_posterior():
    log_probs = _posterior([(1, 0.9), (2, 0.6), (0, 0.99), (3, 0.7), (3, 0.8), (0, 0.95)], vocab=4)
    measures = frame_measures(log_probs)
    np.testing.assert_allclose(measures["maxprob"], [0.9, 0.6, 0.99, 0.7, 0.8, 0.95], rtol=1e-6)
    words = [("ab", (0, 2)), ("cde", (3, 5))]
    got = word_features(measures, words, agreement=[True, False], nbest_posteriors=[1.0, 0.25],
                        lm_scores=[(-1.5, False), (-4.0, True)])
    assert got["maxprob_min"] == pytest.approx([_logit(0.6), _logit(0.7)], rel=1e-6)
    assert got["maxprob_mean"] == pytest.approx([_logit(0.75), _logit(0.75)], rel=1e-6)
    entropy = measures["entropy"]
    assert got["entropy_min"] == pytest.approx([_logit(entropy[:2].min()), _logit(entropy[3:5].min())], rel=1e-6)
    assert got["entropy_mean"] == pytest.approx([_logit(entropy[:2].mean()), _logit(entropy[3:5].mean())], rel=1e-6)
    assert got["agreement"].tolist() == [1.0, 0.0]
    assert got["nbest_posterior"] == pytest.approx([_logit(1 - 1e-4), _logit(0.25)], rel=1e-6)  # clipped at 1
    assert got["lm_logprob"].tolist() == [-1.5, -4.0] and got["lm_oov"].tolist() == [0.0, 1.0]
    assert got["chars"].tolist() == [2.0, 3.0]
    assert got["log_frames"] == pytest.approx([math.log(3), math.log(3)])
    assert got["first"].tolist() == [1.0, 0.0] and got["last"].tolist() == [0.0, 1.0]
    # the LM beam's: the N-best posterior of each best-beam word (beam 2 holds "ab" only) and the agreement given
    beams = [(words, -1.0), ([("ab", (0, 2)), ("x", (3, 5))], -1.0)]
    lm = lm_beam_features(log_probs, beams, [True, False], [(-1.5, False), (-4.0, True)])
    assert lm["nbest_posterior"] == pytest.approx([_logit(1 - 1e-4), 0.0], abs=1e-9)
    assert set(lm) == set(got)
    with pytest.raises(ValueError, match="1 agreement for 2 words"):
        word_features(measures, words, agreement=[True])


def test_the_fit_recovers_a_known_logistic_model():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(20000, 2)) * [1.0, 3.0] + [0.0, 1.0]
    truth = 1 / (1 + np.exp(-(2.0 * x[:, 0] - 0.5 * x[:, 1] + 0.5)))
    y = rng.random(20000) < truth
    features = {"agreement": x[:, 0], "chars": x[:, 1]}
    estimator = fit_estimator(features, y, "lm_beam", names=["agreement", "chars"], l2=0.0)
    raw_weights = np.array(estimator.weights) / np.array(estimator.scale)
    raw_bias = estimator.bias - float(np.sum(raw_weights * np.array(estimator.mean)))
    assert raw_weights == pytest.approx([2.0, -0.5], abs=0.1) and raw_bias == pytest.approx(0.5, abs=0.1)
    # the bias is not penalised: the mean prediction is the share correct (calibrated in the large), at any L2
    for l2 in (0.0, 10.0):
        fitted = fit_estimator(features, y, "lm_beam", names=["agreement", "chars"], l2=l2)
        assert float(fitted.predict(features).mean()) == pytest.approx(float(y.mean()), abs=1e-9)


def test_the_fit_separates_a_separable_toy_set():
    features = {"nbest_posterior": np.array([-2.0, -1.0, -0.5, 0.5, 1.0, 2.0]), "chars": np.array([3.0] * 6)}
    correct = [False, False, False, True, True, True]
    estimator = fit_estimator(features, correct, "lm_beam", l2=1.0)
    assert estimator.features == ("nbest_posterior", "chars")  # the defaults the words have, in their order
    scores = estimator.predict(features)
    assert ((scores > 0.5) == np.array(correct)).all() and roc_auc(scores, correct) == 1.0
    assert estimator.weights[1] == 0.0  # a constant feature gets no weight
    with pytest.raises(ValueError, match="cannot fit a word confidence on 6 words of which 6 are correct"):
        fit_estimator(features, [True] * 6, "lm_beam")
    with pytest.raises(ValueError, match="features maxprob_min: not among the words' features"):
        fit_estimator(features, correct, "lm_beam", names=["maxprob_min"])
    with pytest.raises(ValueError, match="features agreement: the best_path estimator reads"):
        fit_estimator({"agreement": np.zeros(6)}, correct, "best_path", names=["agreement"])


def _best_path_setup(tmp_path):
    tokenizer = build_processor(build_vocab(["ab cd"]), tmp_path).tokenizer
    ids = {c: tokenizer.convert_tokens_to_ids(c) for c in "abcd|"}
    rows = [(ids["a"], 0.9), (ids["b"], 0.6), (ids["|"], 0.99), (ids["c"], 0.7), (ids["|"], 0.95), (ids["d"], 0.55)]
    return tokenizer, _posterior(rows, len(tokenizer))


def test_a_saved_estimator_scores_words_as_the_fitted_one(tmp_path):
    tokenizer, log_probs = _best_path_setup(tmp_path)
    words = best_path_words(log_probs, tokenizer)
    features = best_path_features(log_probs, words)
    estimator = fit_estimator(features, [True, False, True], "best_path", l2=1.0)
    path = estimator.save(tmp_path / "model")  # a folder: its confidence_estimator.json
    assert path == tmp_path / "model" / ESTIMATOR_FILE
    loaded = load_estimator(tmp_path / "model")
    assert loaded.predict(features).tolist() == estimator.predict(features).tolist()
    method = ConfidenceMethod.parse("learned").beside_model(tmp_path / "model")
    assert method.name == f"learned:{path}" and ConfidenceMethod.parse(method.name) == method
    scored = best_path_words(log_probs, tokenizer, method=method)
    assert [w.text for w in scored] == ["ab", "c", "d"]
    assert [w.confidence for w in scored] == estimator.predict(features).tolist()
    # the frame measure alone still scores the words without the estimator
    assert [w.confidence for w in best_path_words(log_probs, tokenizer, method=method.acoustic)] == pytest.approx(
        [0.6, 0.7, 0.55])
    with pytest.raises(ValueError, match=f"confidence estimator {path}: fitted on best_path words, these are "
                                         "lm_beam words; it scores words decoded with the best path"):
        method.estimator_model("lm_beam")
    with pytest.raises(ValueError, match="no estimator file; give learned:FILE"):
        best_path_words(log_probs, tokenizer, method=ConfidenceMethod.parse("learned"))


def _valid() -> dict:
    return {"format": "adaptspeech word confidence estimator", "version": 1, "decoder": "lm_beam",
            "features": ["agreement", "chars"], "mean": [0.5, 4.0], "scale": [0.5, 2.0], "weights": [1.0, 0.2],
            "bias": 1.5}


@pytest.mark.parametrize(("change", "message"), [
    (None, "not a readable JSON file"),
    ({"format": "something else"}, "not an adaptspeech word confidence estimator"),
    ({"version": 2}, "version 2; this adaptspeech reads version 1"),
    ({"decoder": "attention"}, "decoder 'attention'; allowed values: lm_beam, best_path"),
    ({"features": ["agreement", "margin"]}, "features \\['agreement', 'margin'\\]: a non-empty list"),
    ({"weights": [1.0, float("nan")]}, "'weights' must be 2 finite numbers"),
    ({"mean": [0.5]}, "'mean' must be 2 finite numbers"),
    ({"scale": [0.5, 0.0]}, "'scale' must be > 0"),
    ({"bias": "high"}, "bias 'high' is not a finite number"),
])
def test_a_bad_estimator_file_is_one_line_naming_it(tmp_path, change, message):
    path = tmp_path / "estimator.json"
    if change is None:
        path.write_text('{"format": ', encoding="utf-8")
    else:
        path.write_text(json.dumps({**_valid(), **change}), encoding="utf-8")
    with pytest.raises(ValueError, match=f"^confidence estimator {path}: {message}") as error:
        ConfidenceMethod.parse(f"learned:{path}")
    assert "\n" not in str(error.value)
    missing = tmp_path / "none.json"
    with pytest.raises(ValueError, match=f"^confidence estimator {missing}: no such file"):
        load_estimator(missing)


def test_a_valid_estimator_file_predicts_its_formula(tmp_path):
    path = tmp_path / "estimator.json"
    path.write_text(json.dumps(_valid()), encoding="utf-8")
    estimator = load_estimator(path)
    got = estimator.predict({"agreement": np.array([1.0, 0.0]), "chars": np.array([4.0, 8.0])})
    expected = 1 / (1 + np.exp(-np.array([1.0 * 1 + 0 + 1.5, -1.0 + 0.2 * 2 + 1.5])))
    np.testing.assert_allclose(got, expected, rtol=1e-12)
    assert log_odds([0.5, 1.0])[0] == 0.0
    with pytest.raises(ValueError, match="reads chars, which these words lack \\(an LM beam estimator needs --lm\\)"):
        estimator.predict({"agreement": np.array([1.0])})
