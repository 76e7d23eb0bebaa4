"""Word and utterance confidence (adaptspeech/decoding/confidence.py, LMDecoder.decode_scored) and its measures
(adaptspeech/metrics/confidence.py): frame measures against loop references, the words of a hand-made best path with
their confidences, N-best posteriors, the LM decoder's scored words, ``transcribe(confidence=True)`` and
``adaptspeech transcribe --confidence``; word correctness, ROC AUC against a pairwise count, the reliability table."""

from __future__ import annotations

import itertools
import json
import math

import numpy as np
import pytest
import torch
from helpers.cli import one_error_line, run_main
from helpers.model_folders import audio, model_folder

from adaptspeech.data.processor import build_processor
from adaptspeech.data.text import build_vocab
from adaptspeech.decoding import ctc_greedy_decode
from adaptspeech.decoding.confidence import (
    ScoredWord,
    best_path_words,
    frame_confidence,
    nbest_word_posteriors,
    utterance_confidence,
)
from adaptspeech.metrics.confidence import expected_calibration_error, reliability_bins, roc_auc, word_correctness


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory):
    return build_processor(build_vocab(["ab cd"]), tmp_path_factory.mktemp("tok")).tokenizer


def _log_probs(frames: list[dict[int, float]], vocab_size: int) -> torch.Tensor:
    """``[T, V]`` log-probabilities: each frame's listed labels get their probability, the rest share what is left."""
    rows = []
    for frame in frames:
        rest = (1.0 - sum(frame.values())) / (vocab_size - len(frame))
        rows.append([frame.get(v, rest) for v in range(vocab_size)])
    return torch.tensor(rows, dtype=torch.float64).log()


def test_frame_measures_match_loop_references():
    torch.manual_seed(0)
    log_probs = torch.randn(7, 9).double().log_softmax(-1)
    probs = log_probs.exp().numpy()
    np.testing.assert_allclose(frame_confidence(log_probs, "max_prob").numpy(), probs.max(-1), rtol=1e-6)
    a, vocab = 1 / 3, 9
    expected = []
    for p in probs:  # Tsallis entropy, exponentially normalised (Laptev & Ginsburg 2022), written out per frame
        h = (1 - sum(x**a for x in p)) / (a - 1)
        h_max = (1 - vocab ** (1 - a)) / (a - 1)
        expected.append((math.exp(-h) - math.exp(-h_max)) / (1 - math.exp(-h_max)))
    # float32 inside frame_confidence against float64 here: a few ulps of float32
    np.testing.assert_allclose(frame_confidence(log_probs, "entropy").numpy(), expected, rtol=1e-5, atol=1e-6)
    one_hot = torch.full((1, 9), -1e9).double()
    one_hot[0, 3] = 0.0
    assert float(frame_confidence(one_hot, "entropy")) == pytest.approx(1.0)
    assert float(frame_confidence(torch.full((1, 9), -math.log(9)), "entropy")) == pytest.approx(0.0, abs=1e-6)
    with pytest.raises(ValueError, match="allowed values: max_prob, entropy"):
        frame_confidence(log_probs, "margin")


def test_best_path_words_and_their_confidences(tokenizer):
    ids = tokenizer.get_vocab()
    a, b, c, d, bar, blank, unk = (ids[x] for x in ("a", "b", "c", "d", "|", "[PAD]", "[UNK]"))
    v = len(ids)
    frames = [{a: 0.9}, {a: 0.7}, {blank: 0.8}, {b: 0.6}, {bar: 0.95}, {c: 0.5}, {unk: 0.9}, {d: 0.99},
              {blank: 0.9}]
    log_probs = _log_probs(frames, v)
    words = best_path_words(log_probs, tokenizer)
    assert [w.text for w in words] == ["ab", "cd"]
    assert words[0].confidence == pytest.approx(min((0.9 + 0.7) / 2, 0.6))
    assert words[1].confidence == pytest.approx(min(0.5, 0.99))  # [UNK] is left out of the text and the score
    assert (words[0].start, words[0].end, words[1].start, words[1].end) == (0, 4, 5, 8)
    greedy = ctc_greedy_decode(log_probs[None].float(), blank_id=blank)[0]
    text = tokenizer.decode(greedy, group_tokens=False, skip_special_tokens=True)
    assert " ".join(text.split()) == " ".join(w.text for w in words)
    assert utterance_confidence(words) == pytest.approx((0.6 + 0.5) / 2)
    silence = _log_probs([{blank: 0.7}, {blank: 0.9}], v)
    assert best_path_words(silence, tokenizer) == [] and utterance_confidence([], silence) == pytest.approx(0.8)


def test_nbest_posteriors_sum_the_beams_holding_the_word():
    beams = [
        ([("ab", (0, 4)), ("cd", (5, 8))], 0.0),
        ([("ab", (0, 4)), ("ce", (5, 8))], -1.0),
        ([("ab", (10, 14)), ("cd", (4, 9))], -2.0),  # its "ab" lies elsewhere
    ]
    weights = np.exp([0.0, -1.0, -2.0]) / np.exp([0.0, -1.0, -2.0]).sum()
    assert nbest_word_posteriors(beams) == pytest.approx([weights[0] + weights[1], weights[0] + weights[2]])
    assert nbest_word_posteriors([([("x", (0, 2))], -5.0)]) == [1.0] and nbest_word_posteriors([]) == []


def test_lm_decoder_scored_words_without_an_lm(tokenizer):
    pytest.importorskip("pyctcdecode")
    from adaptspeech.lm.decoder import LMDecoder, build_decoder

    decoder = LMDecoder(build_decoder(tokenizer, None, alpha=0.0, beta=0.0), beam_width=8)
    ids = tokenizer.get_vocab()
    sure = _log_probs([{ids["a"]: 0.98}, {ids["b"]: 0.98}, {ids["|"]: 0.98}, {ids["c"]: 0.98}, {ids["[PAD]"]: 0.98}],
                      len(ids)).float()
    text, words = decoder.decode_scored(sure)
    assert text == decoder.decode(sure)[0] == "ab c" and [w.text for w in words] == ["ab", "c"]
    assert all(0.9 < w.confidence <= 1.0 for w in words)
    unsure = _log_probs([{ids["a"]: 0.4, ids["c"]: 0.35}, {ids["b"]: 0.5}, {ids["|"]: 0.9}, {ids["d"]: 0.3},
                         {ids["[PAD]"]: 0.5}], len(ids)).float()
    _, unsure_words = decoder.decode_scored(unsure)
    assert max(w.confidence for w in unsure_words) < min(w.confidence for w in words)


def test_transcribe_with_confidence_keeps_the_text(tmp_path):
    from transformers import Wav2Vec2Processor

    from adaptspeech import AdaptSpeechForCTC
    from adaptspeech.inference.transcriber import transcribe

    folder = model_folder(tmp_path / "model", languages=("ro",))
    model, processor = AdaptSpeechForCTC.from_pretrained(folder), Wav2Vec2Processor.from_pretrained(folder)
    waves = [audio(1.5, seed) for seed in range(3)]
    plain = transcribe(model, processor, waves)
    scored = transcribe(model, processor, waves, confidence=True, timestamps="word")
    for a, b in zip(plain, scored, strict=True):
        assert a.text == b.text == " ".join(w["text"] for w in b.extra["words"])
        assert 0.0 <= b.extra["confidence"] <= 1.0
        assert b.chunks == [{k: w[k] for k in ("text", "start", "end")} for w in b.extra["words"]]
    with pytest.raises(ValueError, match="confidence needs the best CTC path"):
        transcribe(model, processor, waves[:1], method="ctc_beam", confidence=True)


def test_transcribe_command_prints_word_confidences(tmp_path, capsys):
    import soundfile as sf

    folder = model_folder(tmp_path / "model", languages=("ro",))
    clip = tmp_path / "clip.wav"
    sf.write(clip, audio(1.5), 16000)
    code, out, _ = run_main(["transcribe", "--model", folder, clip, "--confidence", "--no-progress"], capsys)
    line = json.loads(out)
    assert code == 0 and line["text"] == " ".join(w["text"] for w in line["words"])
    assert set(line) == {"path", "text", "seconds", "confidence", "words"}
    code, _, err = run_main(["transcribe", "--model", folder, clip, "--confidence", "--method", "ctc_beam"], capsys)
    assert code == 1 and one_error_line(err) == ("adaptspeech: error: confidence needs the best CTC path (method "
                                                 "ctc_greedy) or an LM, not method 'ctc_beam'")


def test_word_correctness_follows_the_wer_alignment():
    assert word_correctness("the cat sat on", "the cat sat") == [True, True, True, False]
    assert word_correctness("a dog sat", "the cat sat") == [False, False, True]
    assert word_correctness("", "a b") == [] and word_correctness("a b", "") == [False, False]


def test_roc_auc_is_the_pairwise_ranking_probability():
    rng = np.random.default_rng(0)
    scores = np.round(rng.random(60), 1)  # ties on purpose
    labels = rng.random(60) < scores
    pairs = [(1.0 if s > t else 0.5 if s == t else 0.0) for (s, ls), (t, lt) in
             itertools.product(zip(scores, labels), repeat=2) if ls and not lt]
    assert roc_auc(scores, labels) == pytest.approx(np.mean(pairs), abs=1e-12)  # the same count, two ways
    assert roc_auc([0.1, 0.9], [False, True]) == 1.0 and math.isnan(roc_auc([0.5], [True]))


def test_reliability_table_and_calibration_error():
    scores = [0.05, 0.15, 0.95, 0.95, 1.0]
    labels = [False, True, True, False, True]
    bins = reliability_bins(scores, labels, num_bins=10)
    assert [b.count for b in bins] == [1, 1, 0, 0, 0, 0, 0, 0, 0, 3]
    assert bins[9].accuracy == pytest.approx(2 / 3) and bins[9].mean_confidence == pytest.approx((0.95 * 2 + 1) / 3)
    expected = (0.05 + 0.85 + 3 * abs(2 / 3 - (2.9 / 3))) / 5
    assert expected_calibration_error(bins) == pytest.approx(expected)
    assert isinstance(ScoredWord("a", 0.5, 0, 1).to_dict(0.04)["start"], float)
