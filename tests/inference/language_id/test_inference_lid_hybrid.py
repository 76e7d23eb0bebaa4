"""Hybrid language scoring: the calibration fit recovers known weights, the hybrid picks the language whose adapter
(and LM) explains a clip when the acoustic head cannot tell, the candidates' passes start from the language-ID pass's
encoder prefix, and the calibration file is refused in one line where it cannot work."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch
from helpers.lid import tone_clip, two_language_corpus
from transformers import AutoProcessor

from adaptspeech import AdaptSpeechForCTC
from adaptspeech.data.prepared_data import load_prepared
from adaptspeech.inference.language_id.hybrid import (
    CALIBRATION_NAME,
    CalibrationError,
    HybridScorer,
    LanguageLMs,
    LIDCalibration,
    best_path_scores,
    build_char_lm,
    candidates_features,
    char_tokens,
    fit_weights,
    install_language_lms,
    lm_log_prob_per_char,
    lm_matrix,
    text_scores,
)
from adaptspeech.inference.language_id.identifiers import HeadIdentifier
from adaptspeech.inference.language_id.routing import transcribe_auto
from adaptspeech.lid_evaluation import evaluate_dataset_auto, fit_lid_calibration
from adaptspeech.testing import tiny_config

CONFIDENT_TOKEN = 5


def test_the_calibration_fit_recovers_known_weights_on_synthetic_features() -> None:
    rng = np.random.default_rng(0)
    true = np.array([0.7, 2.0, -1.2])
    candidates, truth = [], []
    for _ in range(4000):
        features = rng.normal(size=(3, 3))
        logits = features @ true
        p = np.exp(logits - logits.max())
        candidates.append(features)
        truth.append(int(rng.choice(3, p=p / p.sum())))
    fitted = fit_weights(candidates, truth, l2=0.0)
    np.testing.assert_allclose(fitted, true, atol=0.12)
    with pytest.raises(ValueError, match="needs utterances whose true language is among at least 2 candidates"):
        fit_weights(candidates[:3], [None, None, None])


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory):
    return two_language_corpus(tmp_path_factory.mktemp("hybrid_corpus"), clips=2)


def _model(corpus, explains: str) -> tuple[AdaptSpeechForCTC, object]:
    """A tiny wav2vec2 over ro, cs whose language-ID head cannot tell them (all logits 0: ro, the first, wins) and
    whose ``explains`` language's CTC head is sure of one token while the other's is uniform."""
    processor = AutoProcessor.from_pretrained(corpus / "processor")
    torch.manual_seed(0)
    config = tiny_config("wav2vec2", vocab_size=len(processor.tokenizer), adapter_languages=["ro", "cs"],
                         active_languages=["ro"])
    model = AdaptSpeechForCTC(config).eval()
    model.add_lid_head(["ro", "cs"], pooling="mean_std", layer=0)
    with torch.no_grad():
        model.lid_head.classifier.weight.zero_()
        model.lid_head.classifier.bias.zero_()
        for language in ("ro", "cs"):
            model.add_language_head(language, len(processor.tokenizer))
            head = model.ctc_head.language_heads[language]
            head.weight.zero_()
            head.bias.zero_()
            if language == explains:
                head.bias[CONFIDENT_TOKEN] = 20.0
    return model.eval(), processor


def _calibration(**weights: float) -> LIDCalibration:
    return LIDCalibration(weights or {"lid_log_prob": 1.0, "ctc_per_frame": 1.0}, 2, ("ro", "cs"))


def test_best_path_scores_read_the_routed_head_s_hypothesis_and_its_likelihood(corpus) -> None:
    from adaptspeech.data.collator import model_collator
    from adaptspeech.inference.language_id.routing import routed_to

    model, processor = _model(corpus, explains="cs")
    batch = model_collator(model, processor, ctc_labels=False)([{"input_values": tone_clip("ro", 3)}])
    with routed_to(model, "cs"):
        texts, per_frame = best_path_scores(model, batch, processor.tokenizer)
    assert texts == [processor.tokenizer.convert_ids_to_tokens(CONFIDENT_TOKEN)]
    assert per_frame[0] > -1e-3  # sure of every frame: log-likelihood ~ 0
    with routed_to(model, "ro"):
        texts, per_frame = best_path_scores(model, batch, processor.tokenizer)
    assert texts == [""]  # uniform: the first id (the blank) wins every frame
    assert float(per_frame[0]) == pytest.approx(-math.log(len(processor.tokenizer)), rel=1e-5)


@pytest.mark.parametrize("explains", ["cs", "ro"])
def test_the_hybrid_picks_the_language_whose_adapter_explains_the_clip(corpus, explains: str) -> None:
    model, processor = _model(corpus, explains)
    identifier = HeadIdentifier(model, processor)
    clip = tone_clip("ro", 3)
    acoustic = transcribe_auto(model, processor, [clip], identifier, top_k=1)[0]
    assert acoustic.extra["language"] == "ro" and acoustic.extra["language_probability"] == pytest.approx(0.5)
    hybrid = transcribe_auto(model, processor, [clip], identifier, top_k=2,
                             hybrid=HybridScorer(_calibration()))[0]
    assert hybrid.extra["language"] == explains
    candidates = {c["language"]: c for c in hybrid.extra["language_candidates"]}
    assert candidates[explains]["ctc_per_frame"] > -1e-3
    assert candidates[explains]["score"] == pytest.approx(math.log(0.5) + candidates[explains]["ctc_per_frame"],
                                                          abs=1e-5)
    assert hybrid.text == processor.tokenizer.convert_ids_to_tokens(CONFIDENT_TOKEN)  # decoded by the chosen one


def test_the_candidates_passes_start_from_the_language_id_pass_s_front_end(corpus) -> None:
    model, processor = _model(corpus, "cs")
    identifier = HeadIdentifier(model, processor)
    calls: list[int] = []
    handle = model.backbone.feature_extractor.register_forward_hook(lambda *_: calls.append(1))
    try:
        transcribe_auto(model, processor, [tone_clip("ro", 7)], identifier, top_k=2,
                        hybrid=HybridScorer(_calibration()))
    finally:
        handle.remove()
    assert len(calls) == 1  # language-ID pass, two candidate passes and the decoding: one front end


def test_a_prepared_split_is_routed_by_the_hybrid_and_its_calibration_is_fitted(corpus, tmp_path) -> None:
    model, processor = _model(corpus, "cs")
    rows = load_prepared(corpus)[0]["test"]
    identifier = HeadIdentifier(model, processor)
    result = evaluate_dataset_auto(model, rows, processor, identifier, top_k=2, progress=False,
                                   hybrid=HybridScorer(_calibration()), return_hypotheses=True)
    assert result["routed_languages"] == ["cs"] * len(rows)  # cs's head explains every clip
    assert result["routing"]["scoring"] == "hybrid" and result["routing"]["systems"] == {"adapter": len(rows)}
    acoustic = evaluate_dataset_auto(model, rows, processor, identifier, top_k=1, progress=False,
                                     return_hypotheses=True)
    assert acoustic["routed_languages"] == ["ro"] * len(rows)
    calibration = fit_lid_calibration(model, rows, processor, identifier, top_k=2)
    assert calibration.features == ("lid_log_prob", "ctc_per_frame")
    assert calibration.fitted_on["rows"] == len(rows) and calibration.fitted_on["truth_among_candidates"] == len(rows)
    calibration.save(tmp_path)
    assert LIDCalibration.load(tmp_path) == calibration
    with pytest.raises(ValueError, match="fitting the hybrid score needs at least 2 candidate languages"):
        fit_lid_calibration(model, rows, processor, identifier, top_k=1)


def _lm(folder, lines: list[str]):
    from adaptspeech.lm.build import build_arpa

    text = folder / "text.txt"
    folder.mkdir(parents=True, exist_ok=True)
    text.write_text("\n".join(lines * 3) + "\n", encoding="utf-8")
    build_arpa(text, folder / "lm", order=2, progress=False)
    return folder / "lm"


def test_the_lm_score_tells_the_language_whose_text_it_is(corpus, tmp_path) -> None:
    import kenlm

    token = AutoProcessor.from_pretrained(corpus / "processor").tokenizer.convert_ids_to_tokens(CONFIDENT_TOKEN)
    cs = _lm(tmp_path / "cs", [f"{token} {token}", f"{token} ab", "ab ba"])
    ro = _lm(tmp_path / "ro", ["ba ab", "cab abc", "abc cab ba"])
    model, processor = _model(corpus, "cs")
    with torch.no_grad():  # both languages' heads say the same text: only the LMs can tell
        model.ctc_head.language_heads["ro"].load_state_dict(model.ctc_head.language_heads["cs"].state_dict())
    model.save_pretrained(tmp_path / "model")
    install_language_lms(tmp_path / "model", {"ro": ro, "cs": cs})
    lms = LanguageLMs.from_folder(tmp_path / "model", ["ro", "cs"])
    arpa = kenlm.Model(str(tmp_path / "model" / "language_models" / "cs" / "lm.arpa"))
    assert lms.per_char("cs", token) == pytest.approx(math.log(10) * arpa.score(token) / (len(token) + 1))
    assert lm_log_prob_per_char(arpa, token) > lm_log_prob_per_char(kenlm.Model(str(ro / "lm.arpa")), token)
    calibration = _calibration(lid_log_prob=1.0, ctc_per_frame=1.0, lm_per_char=1.0)
    calibration.save(tmp_path / "model")
    scorer = HybridScorer.from_folder(tmp_path / "model", ["ro", "cs"])
    choice = transcribe_auto(model, processor, [tone_clip("cs", 3)], HeadIdentifier(model, processor), top_k=2,
                             hybrid=scorer)[0]
    assert choice.extra["language"] == "cs"  # its LM knows the word (without the LM, ro, the first, would win)
    assert len({c["ctc_per_frame"] for c in choice.extra["language_candidates"]}) == 1
    assert LanguageLMs.from_folder(tmp_path, ["ro", "cs"]) is None


CS_TEXT = ["ab aab bab", "baab ab", "aab bba ab", "bab baab"]
RO_TEXT = ["cd dcc cdd", "dc ccd", "cdc dd cd", "ddc cd"]


def test_a_character_lm_tells_the_spelling_of_words_it_has_never_seen(tmp_path) -> None:
    assert char_tokens(" ab  c ") == "a b | c"
    word = {"cs": _lm(tmp_path / "w" / "cs", CS_TEXT), "ro": _lm(tmp_path / "w" / "ro", RO_TEXT)}
    char = {lang: build_char_lm(text * 3, tmp_path / "c" / lang, order=3)
            for lang, text in (("cs", CS_TEXT), ("ro", RO_TEXT))}
    assert (char["cs"] / "unit.txt").read_text() == "char\n" and not (char["cs"] / "char_text.txt").exists()
    install_language_lms(tmp_path / "model_c", char)
    install_language_lms(tmp_path / "model_w", word)
    by_char = LanguageLMs.from_folder(tmp_path / "model_c", ["ro", "cs"])
    by_word = LanguageLMs.from_folder(tmp_path / "model_w", ["ro", "cs"])
    assert by_char.units == {"ro": "char", "cs": "char"} and by_word.units == {"ro": "word", "cs": "word"}
    # "abba" and "cddc" occur in no text: the word LMs score both as the same unknown word ...
    word_margin = {w: by_word.per_char("cs", w) - by_word.per_char("ro", w) for w in ("abba", "cddc")}
    assert word_margin["abba"] == pytest.approx(word_margin["cddc"])
    # ... the character LMs know whose spelling each is
    assert by_char.per_char("cs", "abba") > by_char.per_char("ro", "abba") + 1.0
    assert by_char.per_char("ro", "cddc") > by_char.per_char("cs", "cddc") + 1.0
    arpa = by_char.models["cs"]
    assert by_char.per_char("cs", "ab ba") == pytest.approx(math.log(10) * arpa.score("a b | b a") / 6)
    install_language_lms(tmp_path / "model_c", word)  # a word LM replaces the character LM, unit and all
    assert LanguageLMs.from_folder(tmp_path / "model_c", ["ro", "cs"]).units == {"ro": "word", "cs": "word"}


def test_an_lm_unit_file_naming_no_unit_is_refused_in_one_line(tmp_path) -> None:
    lm = build_char_lm(CS_TEXT * 3, tmp_path / "cs", order=3)
    (lm / "unit.txt").write_text("phoneme\n")
    with pytest.raises(ValueError, match=r"cs/unit.txt: the LM's unit must be one of word, char, got 'phoneme'$"):
        install_language_lms(tmp_path / "model", {"cs": lm})
    assert not (tmp_path / "model").exists()  # nothing copied


def test_a_calibration_that_cannot_work_is_refused_in_one_line(tmp_path) -> None:
    with pytest.raises(CalibrationError, match=rf"{CALIBRATION_NAME}: missing; hybrid language scoring needs weights "
                                               r"fitted on a dev split: run `adaptspeech evaluate"):
        LIDCalibration.load(tmp_path)
    path = tmp_path / CALIBRATION_NAME
    path.write_text('{"format": "adaptspeech-lid-calibration", "weights": {"lid_log_prob": 1.0')
    with pytest.raises(CalibrationError, match=rf"{CALIBRATION_NAME}: unreadable \(.*\); fit it again$"):
        LIDCalibration.load(tmp_path)
    good = _calibration().to_dict()
    for change, message in (({"weights": {"acoustics": 1.0}}, "weights must map some of lid_log_prob"),
                            ({"weights": {"lid_log_prob": float("nan")}}, "weights must map"),
                            ({"top_k": 1}, "top_k must be an integer of at least 2, got 1"),
                            ({"format": "other"}, "not a language-ID calibration")):
        path.write_text(json.dumps({**good, **change}))
        with pytest.raises(CalibrationError, match=message) as err:
            LIDCalibration.load(tmp_path)
        assert "\n" not in str(err.value) and str(path) in str(err.value)
    path.write_text(json.dumps(good))
    with pytest.raises(CalibrationError, match=r"fitted for languages \['ro', 'cs'\], the language-ID head has "
                                               r"\['ro', 'pl'\]; fit it again"):
        HybridScorer.from_folder(tmp_path, ["ro", "pl"])
    path.write_text(json.dumps({**good, "weights": {"lid_log_prob": 1.0, "lm_per_char": 0.5}}))
    with pytest.raises(CalibrationError, match=r"language_models: no LM for ro, cs, which lid_calibration\.json "
                                               r"weighs \(lm_per_char\)"):
        HybridScorer.from_folder(tmp_path, ["ro", "cs"])


def test_the_shared_hypothesis_matrix_is_every_candidate_s_lm_over_every_hypothesis(tmp_path) -> None:
    char = {lang: build_char_lm(text * 3, tmp_path / lang, order=3)
            for lang, text in (("cs", CS_TEXT), ("ro", RO_TEXT))}
    install_language_lms(tmp_path / "model", char)
    lms = LanguageLMs.from_folder(tmp_path / "model", ["ro", "cs"])
    arpa = {lang: lms.models[lang] for lang in ("cs", "ro")}

    def by_hand(language: str, tokens: str, chars: int) -> float:
        return math.log(10) * arpa[language].score(tokens, bos=True, eos=True) / (chars + 1)

    # candidates cs, ro; cs's system wrote "ab ba", ro's "cdd" (the base: "ab")
    hand = np.array([[by_hand("cs", "a b | b a", 5), by_hand("ro", "a b | b a", 5)],
                     [by_hand("cs", "c d d", 3), by_hand("ro", "c d d", 3)]])
    matrix = lm_matrix(lms, ["cs", "ro"], ["ab ba", "cdd"])
    np.testing.assert_allclose(matrix, hand, rtol=1e-12)
    assert hand[0, 0] > hand[0, 1] and hand[1, 1] > hand[1, 0]  # each LM prefers its own spelling
    np.testing.assert_allclose(text_scores(lms, ["cs", "ro"], ["ab ba", "cdd"], "own"), [hand[0, 0], hand[1, 1]])
    np.testing.assert_allclose(text_scores(lms, ["cs", "ro"], ["ab ba", "cdd"], "shared"),
                               [(hand[0, 0] + hand[1, 0]) / 2, (hand[0, 1] + hand[1, 1]) / 2])
    np.testing.assert_allclose(text_scores(lms, ["cs", "ro"], ["ab ba", "cdd"], "base", base_text="ab"),
                               [by_hand("cs", "a b", 2), by_hand("ro", "a b", 2)])
    features = candidates_features([-0.1, -2.0], [-0.5, -0.7], ["ab ba", "cdd"], ["cs", "ro"], lms, "shared")
    assert features == [{"lid_log_prob": -0.1, "ctc_per_frame": -0.5, "lm_per_char": pytest.approx(
                            (hand[0, 0] + hand[1, 0]) / 2)},
                        {"lid_log_prob": -2.0, "ctc_per_frame": -0.7, "lm_per_char": pytest.approx(
                            (hand[0, 1] + hand[1, 1]) / 2)}]
    with pytest.raises(ValueError, match=r"^text_score must be one of own, shared, base, got 'mine'$"):
        text_scores(lms, ["cs", "ro"], ["ab ba", "cdd"], "mine")
    with pytest.raises(ValueError, match=r"^text_score 'base' needs the hypothesis of the encoder without adapters"):
        text_scores(lms, ["cs", "ro"], ["ab ba", "cdd"], "base")


def test_the_text_score_is_saved_with_the_calibration_and_a_bad_one_is_refused_in_one_line(tmp_path) -> None:
    calibration = LIDCalibration({"lid_log_prob": 1.0, "lm_per_char": 2.0}, 2, ("ro", "cs"), text_score="base")
    calibration.save(tmp_path)
    assert json.loads((tmp_path / CALIBRATION_NAME).read_text())["text_score"] == "base"
    assert LIDCalibration.load(tmp_path) == calibration
    old = {k: v for k, v in calibration.to_dict().items() if k != "text_score"}  # written before the setting
    (tmp_path / CALIBRATION_NAME).write_text(json.dumps(old))
    assert LIDCalibration.load(tmp_path).text_score == "own"
    (tmp_path / CALIBRATION_NAME).write_text(json.dumps({**old, "text_score": "mine"}))
    with pytest.raises(CalibrationError, match=rf"{CALIBRATION_NAME}: text_score must be one of own, shared, base, "
                                               r"got 'mine'$") as err:
        LIDCalibration.load(tmp_path)
    assert "\n" not in str(err.value)
    with pytest.raises(ValueError, match=r"^text_score must be one of own, shared, base, got 'all'$"):
        LIDCalibration({"lid_log_prob": 1.0}, 2, ("ro", "cs"), text_score="all")


@pytest.mark.parametrize("text_score", ["shared", "base"])
def test_a_calibration_with_a_shared_text_score_is_fitted_and_routes(corpus, tmp_path, text_score: str) -> None:
    token = AutoProcessor.from_pretrained(corpus / "processor").tokenizer.convert_ids_to_tokens(CONFIDENT_TOKEN)
    model, processor = _model(corpus, "cs")
    model.save_pretrained(tmp_path / "model")
    install_language_lms(tmp_path / "model", {"cs": _lm(tmp_path / "cs", [f"{token} {token}", f"{token} ab"]),
                                              "ro": _lm(tmp_path / "ro", ["ba ab", "cab abc"])})
    lms = LanguageLMs.from_folder(tmp_path / "model", ["ro", "cs"])
    rows = load_prepared(corpus)[0]["test"]
    identifier = HeadIdentifier(model, processor)
    calibration = fit_lid_calibration(model, rows, processor, identifier, top_k=2, lms=lms, text_score=text_score)
    assert calibration.text_score == text_score and "lm_per_char" in calibration.features
    calibration.save(tmp_path / "model")
    scorer = HybridScorer.from_folder(tmp_path / "model", ["ro", "cs"])
    result = evaluate_dataset_auto(model, rows, processor, identifier, top_k=2, progress=False, hybrid=scorer)
    assert result["routing"]["text_score"] == text_score
    choice = transcribe_auto(model, processor, [tone_clip("ro", 3)], identifier, top_k=2, hybrid=scorer)[0]
    candidates = {c["language"]: c for c in choice.extra["language_candidates"]}
    # both candidates' LMs scored the same hypotheses: "shared", cs's token and ro's "" averaged; "base", one text
    texts = [token, ""] if text_score == "shared" else [None]
    if text_score == "base":
        from adaptspeech.data.collator import model_collator

        batch = model_collator(model, processor, ctc_labels=False)([{"input_values": tone_clip("ro", 3)}])
        with model.without_adapters():
            texts = best_path_scores(model, batch, processor.tokenizer)[0]
    for language in ("ro", "cs"):
        expected = np.mean([lms.per_char(language, text) for text in texts])
        assert candidates[language]["lm_per_char"] == pytest.approx(expected, abs=1e-5)
