"""The LM decoder (adaptspeech.lm.decoder): at alpha = beta = 0 it equals beam search without an LM, its weights
may be set as integers, and its per-word n-gram scores (the learned confidence's) are the ARPA file's."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers.lm import peaky_log_probs
from helpers.model_folders import model_folder
from transformers import AutoProcessor

from adaptspeech.decoding import ctc_prefix_beam_search
from adaptspeech.lm.build import build_arpa
from adaptspeech.lm.decoder import LMDecoder, build_decoder

pytest.importorskip("kenlm")
pytest.importorskip("pyctcdecode")


def test_lm_at_zero_weights_equals_beam_search_without_lm(tmp_path: Path) -> None:
    folder = model_folder(tmp_path / "model")
    tokenizer = AutoProcessor.from_pretrained(folder).tokenizer
    text = tmp_path / "corpus.txt"
    text.write_text("\n".join(["abc def", "ghi jab", "abc def", "lot of letters", "ghi jab"]) + "\n")
    build_arpa(text, tmp_path / "lm", order=2)
    with_lm = LMDecoder(build_decoder(tokenizer, tmp_path / "lm", alpha=0.0, beta=0.0), beam_width=32)
    without = LMDecoder(build_decoder(tokenizer, None), beam_width=32)
    strong = LMDecoder(build_decoder(tokenizer, tmp_path / "lm", alpha=2.0, beta=0.0), beam_width=32)
    differs = agrees_with_ours = 0
    for seed in range(12):
        log_probs = peaky_log_probs(40, len(tokenizer), seed)
        assert with_lm.decode(log_probs) == without.decode(log_probs)  # text and word times
        plain = without.decode(log_probs)[0]
        differs += strong.decode(log_probs)[0] != plain
        ours = ctc_prefix_beam_search(log_probs[None], beam_size=32)[0][0].tokens
        agrees_with_ours += tokenizer.decode(ours, group_tokens=False, skip_special_tokens=True).strip() == plain
    assert differs > 0  # the LM does act when weighted
    assert agrees_with_ours >= 9  # pyctcdecode prunes tokens below log p -5: it may miss a beam ours keeps


def test_set_weights_takes_integers(tmp_path: Path) -> None:
    """pyctcdecode refuses an int alpha / beta; ``set_weights`` (and so ``grid_search``) converts them."""
    from adaptspeech.lm.tune import grid_search

    folder = model_folder(tmp_path / "model")
    tokenizer = AutoProcessor.from_pretrained(folder).tokenizer
    text = tmp_path / "corpus.txt"
    text.write_text("\n".join(["abc def", "ghi jab", "abc def", "ghi jab"]) + "\n")
    build_arpa(text, tmp_path / "lm", order=2)
    decoder = LMDecoder(build_decoder(tokenizer, tmp_path / "lm"), beam_width=4)
    decoder.set_weights(2, 1)
    assert (decoder.alpha, decoder.beta) == (2.0, 1.0)
    grid = grid_search(decoder, [peaky_log_probs(10, len(tokenizer), 0)], ["abc"], [0, 1], [0])
    assert sorted(g["alpha"] for g in grid) == [0.0, 1.0]


def _arpa_bigrams(arpa: Path) -> dict[tuple[str, str], float]:
    """The explicit bigrams of an ARPA file: ``(w1, w2) -> log10 P(w2 | w1)``."""
    out, section = {}, None
    for line in arpa.read_text(encoding="utf-8").splitlines():
        if line.startswith("\\"):
            section = line
        elif section == "\\2-grams:" and line.strip():
            fields = line.split("\t")
            out[tuple(fields[1].split())] = float(fields[0])
    return out


def test_word_lm_scores_are_the_arpa_bigrams_and_flag_unknown_words(tmp_path: Path) -> None:
    folder = model_folder(tmp_path / "model")
    tokenizer = AutoProcessor.from_pretrained(folder).tokenizer
    text = tmp_path / "corpus.txt"
    text.write_text("\n".join(["abc def", "ghi jab", "abc def", "ghi jab"]) + "\n")
    build_arpa(text, tmp_path / "lm", order=2)
    bigrams = _arpa_bigrams(tmp_path / "lm" / "lm.arpa")
    decoder = LMDecoder(build_decoder(tokenizer, tmp_path / "lm"), beam_width=4)
    scores = decoder.word_lm_scores(["abc", "def", "qqq"])
    assert scores[0] == (pytest.approx(bigrams[("<s>", "abc")], abs=1e-5), False)
    assert scores[1] == (pytest.approx(bigrams[("abc", "def")], abs=1e-5), False)
    assert scores[2][1] is True  # out of the LM's vocabulary
    assert decoder.word_lm_scores([]) == []
    assert LMDecoder(build_decoder(tokenizer, None)).word_lm_scores(["abc"]) is None
