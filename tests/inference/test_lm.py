"""n-gram LM: kaldingram's ARPA scored by KenLM equals the Kneser-Ney equations computed here by brute force; LM
decoding at alpha = beta = 0 equals beam search without an LM; the LM saved with a model is what the pipeline and
``transcribe --lm`` apply; ``lm tune`` on a tiny split."""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from pathlib import Path

import pytest
import torch
from inference_helpers import audio, model_folder
from transformers import AutoProcessor, pipeline

from adaptspeech.cli import main
from adaptspeech.decoding import ctc_prefix_beam_search
from adaptspeech.lm.build import build_arpa
from adaptspeech.lm.decoder import LMDecoder, build_decoder, save_processor_with_lm

kenlm = pytest.importorskip("kenlm")
pytest.importorskip("pyctcdecode")

TEXT = ["a b c", "a b c", "a b d", "b c a", "c a b", "a b c d", "d c b a", "b c d"]


def kn_log10(sentences: list[list[str]], order: int, sentence: list[str]) -> float:
    """log10 p(<s> sentence </s>) of the back-off Kneser-Ney model SRILM's ``-ukndiscount -kn-modify-counts-at-end``
    defines (kaldingram's documentation), from the equations:

    - D_n = n1 / (n1 + 2 n2) over the order's raw counts (unigrams: D = 0);
    - highest order f(hw) = max(c(hw) - D, 0) / c(h); lower orders use the number of distinct words before hw,
      n(*hw), in place of c (raw counts for histories only ever seen at the sentence start, i.e. after <s>);
    - bow(h) = (1 - sum_{w seen after h} f(hw)) / (1 - sum_{same w} f(h[1:] w));
    - p(w | h) = f(hw) if hw was seen, else bow(h) p(w | h[1:]).
    """
    raw = [defaultdict(Counter) for _ in range(order)]  # raw[n][history][word], len(history) == n
    before = [defaultdict(lambda: defaultdict(set)) for _ in range(order)]
    for words in sentences:
        padded = ["<s>", *words, "</s>"]
        for i in range(len(padded)):
            for n in range(1, order + 1):
                if i + n > len(padded):
                    break
                history, word = tuple(padded[i : i + n - 1]), padded[i + n - 1]
                raw[n - 1][history][word] += 1
                if i > 0 and n < order:
                    before[n - 1][history][word].add(padded[i - 1])
    discount = [0.0]
    for n in range(1, order):
        counts = Counter(c for words in raw[n].values() for c in words.values())
        discount.append(max(0.1, counts[1]) / (counts[1] + 2 * counts[2]))
    f: list[dict[tuple[str, ...], dict[str, float]]] = [{} for _ in range(order)]
    for n in range(order):
        for history, words in raw[n].items():
            modified = {w: len(before[n][history][w]) for w in words}
            use_raw = n == order - 1 or sum(modified.values()) == 0
            counts = words if use_raw else modified
            total = sum(counts.values())
            f[n][history] = {w: max(c - discount[n], 0) / total for w, c in counts.items()}

    def prob(history: tuple[str, ...], word: str) -> float:
        n = len(history)
        if word in f[n].get(history, {}):
            return f[n][history][word]
        if n == 0:
            raise KeyError(word)
        seen = f[n].get(history)
        bow = 1.0
        if seen is not None:
            lower = f[n - 1][history[1:]]
            bow = (1 - sum(seen.values())) / (1 - sum(lower[w] for w in seen))
        return bow * prob(history[1:], word)

    padded = ["<s>", *sentence, "</s>"]
    total = 0.0
    for i in range(1, len(padded)):
        history = tuple(padded[max(0, i - order + 1) : i])
        while history and history not in f[len(history)]:
            history = history[1:]  # a history never seen has no back-off weight (1)
        total += math.log10(prob(history, padded[i]))
    return total


@pytest.mark.parametrize("sentence", ["a b c", "c a b d", "d d a", "b a"])
def test_built_lm_scores_as_the_kneser_ney_equations(tmp_path: Path, sentence: str) -> None:
    text = tmp_path / "corpus.txt"
    text.write_text("\n".join(TEXT) + "\n", encoding="utf-8")
    assert main(["lm", "build", "--text", str(text), "--order", "3", "--out", str(tmp_path / "lm")]) == 0
    model = kenlm.Model(str(tmp_path / "lm" / "lm.arpa"))
    expected = kn_log10([s.split() for s in TEXT], 3, sentence.split())
    assert model.score(sentence, bos=True, eos=True) == pytest.approx(expected, abs=1e-5)


def test_a_text_too_small_for_a_discount_is_refused(tmp_path: Path) -> None:
    text = tmp_path / "corpus.txt"
    text.write_text("a b c\nd e f\n", encoding="utf-8")
    with pytest.raises(ValueError, match="no 2-gram occurs twice"):
        build_arpa(text, tmp_path / "lm", order=3)


def _peaky_log_probs(frames: int, vocab: int, seed: int) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    return (torch.randn(frames, vocab, generator=gen) * 4).log_softmax(-1)


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
        log_probs = _peaky_log_probs(40, len(tokenizer), seed)
        assert with_lm.decode(log_probs) == without.decode(log_probs)  # text and word times
        plain = without.decode(log_probs)[0]
        differs += strong.decode(log_probs)[0] != plain
        ours = ctc_prefix_beam_search(log_probs[None], beam_size=32)[0][0].tokens
        agrees_with_ours += tokenizer.decode(ours, group_tokens=False, skip_special_tokens=True).strip() == plain
    assert differs > 0  # the LM does act when weighted
    assert agrees_with_ours >= 9  # pyctcdecode prunes tokens below log p -5: it may miss a beam ours keeps


def test_saved_lm_is_applied_by_the_pipeline_and_transcribe(tmp_path: Path, capsys) -> None:
    folder = model_folder(tmp_path / "model")
    processor = AutoProcessor.from_pretrained(folder)
    text = tmp_path / "corpus.txt"
    text.write_text("\n".join(["abc def", "ghi jab", "abc def", "lot of letters", "ghi jab"]) + "\n")
    build_arpa(text, tmp_path / "lm", order=2)
    decoder = build_decoder(processor.tokenizer, tmp_path / "lm", alpha=1.0, beta=0.5)
    save_processor_with_lm(processor, decoder, folder)
    asr = pipeline("automatic-speech-recognition", model=str(folder))
    assert asr.type == "ctc_with_lm"
    wave = audio(1.5, seed=9)
    from adaptspeech import AdaptSpeechForCTC
    from adaptspeech.inference.transcriber import transcribe

    model = AdaptSpeechForCTC.from_pretrained(folder)
    expected = transcribe(model, processor, [wave], lm_decoder=LMDecoder(decoder))[0].text
    piped = asr(wave)["text"]  # transformers' text keeps pyctcdecode's unknown / special labels; ours drops them
    for label in ("⁇", "<s>", "</s>"):
        piped = piped.replace(label, "")
    assert " ".join(piped.split()) == expected
    import soundfile as sf

    clip = tmp_path / "clip.wav"
    sf.write(clip, wave, 16000, subtype="FLOAT")
    code = main(["transcribe", "--model", str(folder), str(clip), "--lm", str(tmp_path / "lm"), "--alpha", "1.0",
                 "--beta", "0.5", "--no-progress", "--device", "cpu"])
    out, err = capsys.readouterr()
    assert code == 0, err
    assert out.strip().split("\t", 1)[1] == expected


def _prepared_dev(folder: Path, model_dir: Path, waves: list, texts: list[str]) -> Path:
    """A prepared folder as ``adaptspeech prepare`` writes it (``dataset/`` with a ``dev`` split, ``processor/``,
    the completion marker), its rows the fbank features of ``waves`` with ``texts`` as references."""
    import json

    from datasets import Dataset, DatasetDict

    processor = AutoProcessor.from_pretrained(model_dir)
    rows = []
    for wave, text in zip(waves, texts, strict=True):
        features = processor.feature_extractor(wave, sampling_rate=16000, return_tensors="np")["input_features"][0]
        rows.append({"input_features": features.tolist(), "labels": processor.tokenizer(text).input_ids,
                     "language": "ro", "text": text, "input_length": len(features)})
    DatasetDict({"dev": Dataset.from_list(rows)}).save_to_disk(str(folder / "dataset"))
    processor.save_pretrained(folder / "processor")
    (folder / "prepare_config.json").write_text(json.dumps({}))
    return folder


def test_lm_tune_cli_table_and_saved_processor(tmp_path: Path, capsys) -> None:
    """``lm build`` then ``lm tune --save``: the JSON table holds every grid point, best first, its no-LM point is
    pyctcdecode without an LM and its best point is what transformers' pipeline gives with the saved processor."""
    import itertools
    import json

    from adaptspeech import AdaptSpeechForCTC
    from adaptspeech.inference.transcriber import transcribe
    from adaptspeech.metrics import compute_error_rates

    folder = model_folder(tmp_path / "model")
    texts = ["abc def", "ghi jab", "lot of letters", "abc jab", "def ghi"]
    waves = [audio(1.0 + 0.25 * i, seed=20 + i) for i in range(len(texts))]
    prepared = _prepared_dev(tmp_path / "prepared", folder, waves, texts)
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n".join(["abc def", "ghi jab", "abc def", "lot of letters", "ghi jab", "def ghi"]) + "\n")
    assert main(["lm", "build", "--text", str(corpus), "--order", "2", "--out", str(tmp_path / "lm")]) == 0
    alphas, betas = [0.0, 1.0, 3.0], [0.0, 2.0]
    argv = ["lm", "tune", "--model", str(folder), "--data", str(prepared), "--lm", str(tmp_path / "lm"),
            "--alphas", ",".join(map(str, alphas)), "--betas", ",".join(map(str, betas)), "--beam-size", "8",
            "--save", "--output", str(tmp_path / "tune.json"), "--device", "cpu"]
    assert main(argv) == 0
    printed = capsys.readouterr().out
    table = json.loads((tmp_path / "tune.json").read_text())
    grid = table["grid"]
    assert sorted((g["alpha"], g["beta"]) for g in grid) == sorted(itertools.product(alphas, betas))
    assert [(g["wer"], g["cer"]) for g in grid] == sorted((g["wer"], g["cer"]) for g in grid)
    assert table["best"] == grid[0]
    assert len({(g["wer"], g["cer"]) for g in grid}) > 1  # the weights matter on this split: the order is tested
    assert f"best: alpha {grid[0]['alpha']:g}, beta {grid[0]['beta']:g} (5 utterances of dev)" in printed

    # the alpha = beta = 0 point: pyctcdecode's beam search without an LM, through the transcriber on the audio
    model = AdaptSpeechForCTC.from_pretrained(folder)
    processor = AutoProcessor.from_pretrained(prepared / "processor")
    plain = LMDecoder(build_decoder(processor.tokenizer, None), beam_width=8)
    no_lm = compute_error_rates([r.text for r in transcribe(model, processor, waves, lm_decoder=plain)], texts)
    zero = next(g for g in grid if g["alpha"] == 0 and g["beta"] == 0)
    assert (zero["wer"], zero["cer"]) == pytest.approx((no_lm["overall"]["wer"], no_lm["overall"]["cer"]))

    # --save: the model folder's processor carries the LM at the best weights; the pipeline decodes with it
    from adaptspeech.lm.processor import AdaptSpeechProcessorWithLM

    saved = AdaptSpeechProcessorWithLM.from_pretrained(folder)
    weights = LMDecoder(saved.decoder)
    assert (weights.alpha, weights.beta) == (grid[0]["alpha"], grid[0]["beta"])
    asr = pipeline("automatic-speech-recognition", model=str(folder))
    assert asr.type == "ctc_with_lm"
    piped = []
    for wave in waves:
        text = asr(wave, decoder_kwargs={"beam_width": 8})["text"]
        for label in ("⁇", "<s>", "</s>"):
            text = text.replace(label, "")
        piped.append(" ".join(text.split()))
    rates = compute_error_rates(piped, texts)["overall"]
    assert (rates["wer"], rates["cer"]) == pytest.approx((grid[0]["wer"], grid[0]["cer"]))
    # and `transcribe --lm` with the tuned weights gives the same text as the pipeline
    lm_decoder = LMDecoder(build_decoder(processor.tokenizer, tmp_path / "lm", grid[0]["alpha"], grid[0]["beta"]),
                           beam_width=8)
    assert [r.text for r in transcribe(model, processor, waves, lm_decoder=lm_decoder)] == piped


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
    grid = grid_search(decoder, [_peaky_log_probs(10, len(tokenizer), 0)], ["abc"], [0, 1], [0])
    assert sorted(g["alpha"] for g in grid) == [0.0, 1.0]
