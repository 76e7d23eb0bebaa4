"""n-gram LM: kaldingram's ARPA scored by KenLM equals the Kneser-Ney equations computed here by brute force; LM
decoding at alpha = beta = 0 equals beam search without an LM; the LM saved with a model is what the pipeline and
``transcribe --lm`` apply; ``lm tune`` on a tiny split."""

from __future__ import annotations

import math
import os
from collections import Counter, defaultdict
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from inference_helpers import audio, model_folder
from transformers import AutoProcessor, pipeline

from adaptspeech.cli import main
from adaptspeech.decoding import ctc_prefix_beam_search
from adaptspeech.lm.build import build_arpa
from adaptspeech.lm.decoder import LMDecoder, build_decoder
from adaptspeech.lm.processor import save_processor_with_lm

kenlm = pytest.importorskip("kenlm")
pytest.importorskip("pyctcdecode")

ROOT_SKIP = pytest.mark.skipif(
    os.geteuid() == 0, reason="root writes into read-only folders; the variant under a file runs as root too"
)
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


# ---- bad input and faults of `lm build`, `lm tune`, `evaluate --lm`, `transcribe --lm` ----------------------------

CORPUS = ["abc def", "ghi jab", "abc def", "lot of letters", "ghi jab", "def ghi"]
DEV_TEXTS = ["abc def", "ghi jab", "lot of letters"]


def run_cli(argv: list, capsys: pytest.CaptureFixture) -> tuple[int, str, str]:
    """``(exit status, stdout, stderr)`` of ``adaptspeech ARGV`` in this process (usage errors included)."""
    capsys.readouterr()
    try:
        code = main([str(a) for a in argv])
    except SystemExit as exit_:
        code = exit_.code
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def one_error_line(err: str) -> str:
    """The one ``adaptspeech: error:`` line of ``err`` (pyctcdecode's logged notes aside); no traceback."""
    lines = [line for line in err.splitlines() if line.startswith("adaptspeech")]
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


def snapshot(folder: Path) -> dict[str, bytes]:
    """Every file under ``folder`` (hidden ones too), relative path -> bytes."""
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.fixture
def lm_setup(tmp_path: Path) -> SimpleNamespace:
    """A tiny CTC model folder, a prepared ``dev`` split of three utterances and an LM built by ``lm build``."""
    folder = model_folder(tmp_path / "model")
    waves = [audio(1.0 + 0.25 * i, seed=40 + i) for i in range(len(DEV_TEXTS))]
    prepared = _prepared_dev(tmp_path / "prepared", folder, waves, DEV_TEXTS)
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n".join(CORPUS) + "\n", encoding="utf-8")
    build_arpa(corpus, tmp_path / "lm", order=2, progress=False)
    return SimpleNamespace(root=tmp_path, model=folder, prepared=prepared, lm=tmp_path / "lm", corpus=corpus,
                           waves=waves)


def tune_argv(setup: SimpleNamespace, *extra: str) -> list:
    return ["lm", "tune", "--model", setup.model, "--data", setup.prepared, "--lm", setup.lm, "--beam-size", "4",
            "--device", "cpu", *extra]


def test_lm_build_of_text_that_is_not_utf8_names_the_file_and_line(tmp_path: Path, capsys) -> None:
    text = tmp_path / "corpus.txt"
    text.write_bytes("a b c\na b c\npři tom\n".encode("cp1250"))
    code, out, err = run_cli(["lm", "build", "--text", text, "--order", "2", "--out", tmp_path / "lm"], capsys)
    assert (code, out) == (1, "")
    assert one_error_line(err).startswith(f"adaptspeech: error: {text}:3: not UTF-8 text")
    assert not (tmp_path / "lm").exists()


def test_a_second_lm_build_into_the_same_out_is_refused(lm_setup: SimpleNamespace, capsys) -> None:
    """While another ``lm build`` holds ``--out`` (this test's own process stands for it), a second one is refused
    in one line naming the process, prints no "wrote", and the LM there stays as it was, byte for byte."""
    import json
    import os
    import socket

    from adaptspeech.training.run_lock import LOCK_FILE

    before = snapshot(lm_setup.lm)
    lock = lm_setup.lm / LOCK_FILE
    lock.write_text(json.dumps({"pid": os.getpid(), "host": socket.gethostname(), "started": "2026-01-01 10:00:00"}))
    other = lm_setup.root / "other.txt"
    other.write_text("x y z\nx y z\nx y\n", encoding="utf-8")
    argv = ["lm", "build", "--text", other, "--order", "2", "--out", lm_setup.lm]
    code, out, err = run_cli(argv, capsys)
    assert (code, out) == (1, "")
    assert one_error_line(err) == (
        f"adaptspeech: error: --out {lm_setup.lm} is in use by another run (process {os.getpid()}, started "
        f"2026-01-01 10:00:00); wait for it to finish or pick another --out (if that run is over, delete {lock})"
    )
    lock.unlink()
    assert snapshot(lm_setup.lm) == before
    code, out, _ = run_cli(argv, capsys)
    assert code == 0 and out.startswith("wrote ") and not lock.exists()
    assert (lm_setup.lm / "unigrams.txt").read_text() == "x\ny\nz\n"


def test_a_full_disk_during_lm_build_keeps_the_earlier_lm(lm_setup: SimpleNamespace, capsys, monkeypatch) -> None:
    """The disk fills up while ``lm build`` writes ``lm.arpa`` over an earlier LM: one line, and the earlier
    ``lm.arpa`` and ``unigrams.txt`` stay byte for byte, with no partial file left beside them."""
    import errno
    import os

    import kaldingram.train

    before = snapshot(lm_setup.lm)

    def disk_full(self, fout) -> None:
        fout.write("\\data\\\n")
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(kaldingram.train.NgramCounts, "print_as_arpa", disk_full)
    other = lm_setup.root / "other.txt"
    other.write_text("x y z\nx y z\nx y\n", encoding="utf-8")
    code, out, err = run_cli(["lm", "build", "--text", other, "--order", "2", "--out", lm_setup.lm], capsys)
    assert (code, out) == (1, "")
    assert "No space left on device" in one_error_line(err)
    assert snapshot(lm_setup.lm) == before


@pytest.mark.parametrize(
    ("command", "option", "value", "message"),
    [
        ("tune", "--alphas", "", "argument --alphas: expected comma-separated numbers, got ''"),
        ("tune", "--betas", " , ", "argument --betas: expected comma-separated numbers, got ' , '"),
        ("tune", "--alphas", "nan", "argument --alphas: expected finite numbers, got 'nan'"),
        ("tune", "--betas", "0,inf", "argument --betas: expected finite numbers, got '0,inf'"),
        ("evaluate", "--alpha", "nan", "argument --alpha: expected a finite number, got 'nan'"),
        ("evaluate", "--beta", "-inf", "argument --beta: expected a finite number, got '-inf'"),
        ("transcribe", "--alpha", "nan", "argument --alpha: expected a finite number, got 'nan'"),
        ("transcribe", "--hotword-weight", "nan", "argument --hotword-weight: expected a finite number, got 'nan'"),
    ],
)
def test_an_empty_or_non_finite_lm_weight_is_one_line_naming_the_option(command, option, value, message,
                                                                       lm_setup, capsys) -> None:  # fmt: skip
    """(``--alphas ''`` ended in an IndexError after the whole grid, ``nan`` in "max() arg is an empty sequence".)"""
    import soundfile as sf

    clip = lm_setup.root / "clip.wav"
    sf.write(clip, lm_setup.waves[0], 16000)
    argv = {
        "tune": tune_argv(lm_setup),
        "evaluate": ["evaluate", "--model", lm_setup.model, "--data", lm_setup.prepared, "--split", "dev", "--lm",
                     lm_setup.lm, "--no-progress", "--device", "cpu"],
        "transcribe": ["transcribe", "--model", lm_setup.model, clip, "--lm", lm_setup.lm, "--no-progress",
                       "--device", "cpu"],
    }[command]
    option_and_value = [f"{option}={value}"] if value.startswith("-") else [option, value]  # not a negative number
    code, out, err = run_cli([*argv, *option_and_value], capsys)
    assert (code, out) == (2, "")
    assert err.count("\n") == 1 and message in err, err


def test_negative_lm_weights_are_values_not_options(lm_setup: SimpleNamespace, capsys) -> None:
    """``--beta -1e9`` and ``--alphas -5,1e9`` (argparse took them for options: "expected one argument")."""
    import json

    code, out, err = run_cli([*tune_argv(lm_setup), "--alphas", "-5,1e9", "--betas", "-1e9,-.5"], capsys)
    assert code == 0, err
    assert sorted(line.split("\t")[:2] for line in out.splitlines()[1:5]) == sorted(
        [["-5", "-1e+09"], ["-5", "-0.5"], ["1e+09", "-1e+09"], ["1e+09", "-0.5"]])
    results = lm_setup.root / "results.json"
    argv = ["evaluate", "--model", lm_setup.model, "--data", lm_setup.prepared, "--split", "dev", "--lm", lm_setup.lm,
            "--alpha", "-2", "--beta", "-1e9", "--no-progress", "--device", "cpu", "--output", results]
    code, _, err = run_cli(argv, capsys)
    assert code == 0, err
    options = json.loads(results.read_text())["options"]
    assert (options["alpha"], options["beta"]) == (-2.0, -1e9)


def test_evaluate_with_an_lm_labels_its_summary_ctc_lm(lm_setup: SimpleNamespace, capsys) -> None:
    """The printed summary names the decoder the JSON names (it said ``(ctc_greedy)``)."""
    import json

    results = lm_setup.root / "results.json"
    argv = ["evaluate", "--model", lm_setup.model, "--data", lm_setup.prepared, "--split", "dev", "--lm", lm_setup.lm,
            "--no-progress", "--device", "cpu", "--output", results]
    code, out, err = run_cli(argv, capsys)
    assert code == 0, err
    assert json.loads(results.read_text())["method"] == "ctc_lm"
    overall = next(line for line in out.splitlines() if line.startswith("overall\t"))
    assert overall.endswith("3 utt (ctc_lm)")
    code, out, _ = run_cli([a for a in argv if a not in ("--lm", lm_setup.lm)], capsys)
    assert code == 0
    assert next(line for line in out.splitlines() if line.startswith("overall\t")).endswith("3 utt (ctc_greedy)")


def test_a_full_disk_while_saving_the_tuned_lm_keeps_the_earlier_one(lm_setup: SimpleNamespace, capsys,
                                                                    monkeypatch) -> None:  # fmt: skip
    """The disk fills up while ``lm tune --save`` copies ``lm.arpa`` (a few bytes reach it): one line, the model
    folder holds its earlier LM byte for byte and nothing else; with space again the save succeeds."""
    import errno
    import os
    import shutil

    from adaptspeech.lm.processor import AdaptSpeechProcessorWithLM

    assert run_cli([*tune_argv(lm_setup), "--alphas", "0.5", "--betas", "1", "--save"], capsys)[0] == 0
    before = snapshot(lm_setup.model)
    assert "language_model/lm.arpa" in before and "alphabet.json" in before
    real_copy = shutil.copy2

    def disk_full(src, dst, *args, **kwargs):
        with open(src, "rb") as source, open(dst, "wb") as target:
            target.write(source.read(100))
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(dst))

    monkeypatch.setattr(shutil, "copy2", disk_full)
    code, out, err = run_cli([*tune_argv(lm_setup), "--alphas", "2", "--betas", "0", "--save"], capsys)
    assert code == 1 and "saved" not in out
    assert one_error_line(err) == (
        f"adaptspeech: error: saving the LM into {lm_setup.model} failed (No space left on device); "
        f"{lm_setup.model} was left as it was"
    )
    assert snapshot(lm_setup.model) == before
    saved = AdaptSpeechProcessorWithLM.from_pretrained(lm_setup.model)
    assert (LMDecoder(saved.decoder).alpha, LMDecoder(saved.decoder).beta) == (0.5, 1.0)

    monkeypatch.setattr(shutil, "copy2", real_copy)  # space freed
    code, out, err = run_cli([*tune_argv(lm_setup), "--alphas", "2", "--betas", "0", "--save"], capsys)
    assert code == 0, err
    saved = AdaptSpeechProcessorWithLM.from_pretrained(lm_setup.model)
    assert (LMDecoder(saved.decoder).alpha, LMDecoder(saved.decoder).beta) == (2.0, 0.0)
    assert not [p.name for p in lm_setup.model.iterdir() if p.name.startswith(".")]


def test_a_save_that_fails_while_renaming_puts_the_earlier_lm_back(lm_setup: SimpleNamespace, monkeypatch) -> None:
    """The new files are complete and a rename into place fails (the last one, ``processor_config.json``): the
    files already swapped in are taken out again and the earlier ones put back, byte for byte."""
    import os

    import adaptspeech.lm.processor as lm_processor_module
    from adaptspeech.lm.processor import AdaptSpeechProcessorWithLM

    processor = AutoProcessor.from_pretrained(lm_setup.model)
    save_processor_with_lm(processor, build_decoder(processor.tokenizer, lm_setup.lm, 1.0, 0.5), lm_setup.model)
    before = snapshot(lm_setup.model)
    real_replace = os.replace

    def failing_replace(src, dst):
        if ".lm_save.partial" in str(src) and str(dst).endswith("processor_config.json"):
            raise OSError(5, "Input/output error", str(dst))
        return real_replace(src, dst)

    monkeypatch.setattr(lm_processor_module.os, "replace", failing_replace)
    with pytest.raises(OSError, match="Input/output error"):
        save_processor_with_lm(processor, build_decoder(processor.tokenizer, lm_setup.lm, 3.0, 0.0), lm_setup.model)
    monkeypatch.setattr(lm_processor_module.os, "replace", real_replace)
    assert snapshot(lm_setup.model) == before
    saved = LMDecoder(AdaptSpeechProcessorWithLM.from_pretrained(lm_setup.model).decoder)
    assert (saved.alpha, saved.beta) == (1.0, 0.5)


@pytest.mark.parametrize(
    ("damaged", "cut", "message"),
    [
        ("language_model/lm.arpa", 0.5, "language_model/lm.arpa: not a complete ARPA file"),
        ("language_model/lm.arpa", -7, "language_model/lm.arpa: not a complete ARPA file"),
        ("language_model/attrs.json", 0.5, "language_model/attrs.json: unreadable"),
        ("alphabet.json", 0.5, "alphabet.json: unreadable"),
    ],
)
def test_a_truncated_lm_in_a_model_folder_is_refused_naming_the_file(damaged, cut, message, lm_setup, capsys) -> None:
    """A cut-short file of the LM saved in a model folder (a copy that ran out of space) is refused wherever the
    folder's LM is loaded: ``transcribe --lm MODEL``, ``AdaptSpeechProcessorWithLM``, the decoder loader; the
    pipeline (transformers reads the folder through pyctcdecode and KenLM) refuses a truncated ``lm.arpa`` naming
    it too."""
    import soundfile as sf

    from adaptspeech.lm.files import load_processor_decoder
    from adaptspeech.lm.processor import AdaptSpeechProcessorWithLM

    processor = AutoProcessor.from_pretrained(lm_setup.model)
    save_processor_with_lm(processor, build_decoder(processor.tokenizer, lm_setup.lm, 1.0, 0.5), lm_setup.model)
    target = lm_setup.model / damaged
    data = target.read_bytes()
    target.write_bytes(data[: int(len(data) * cut)] if isinstance(cut, float) else data[:cut])
    clip = lm_setup.root / "clip.wav"
    sf.write(clip, lm_setup.waves[0], 16000)
    argv = ["transcribe", "--model", lm_setup.model, clip, "--lm", lm_setup.model, "--no-progress", "--device", "cpu"]
    code, out, err = run_cli(argv, capsys)
    assert (code, out) == (1, "")
    assert one_error_line(err).startswith(f"adaptspeech: error: {lm_setup.model}/{message}")
    for load in (AdaptSpeechProcessorWithLM.from_pretrained, load_processor_decoder):
        with pytest.raises((OSError, ValueError), match=f"{lm_setup.model}/{message}"):
            load(lm_setup.model)
    if damaged.endswith("lm.arpa"):
        with pytest.raises(OSError, match=str(target)):
            pipeline("automatic-speech-recognition", model=str(lm_setup.model))


def test_transcribe_and_evaluate_lm_model_use_the_tuned_weights(lm_setup: SimpleNamespace, capsys) -> None:
    """``--lm MODEL`` (a model folder with the LM of ``lm tune --save``) and ``--lm MODEL/language_model`` decode
    with the saved alpha and beta; ``--alpha`` / ``--beta`` override them one by one."""
    import json

    import soundfile as sf

    from adaptspeech import AdaptSpeechForCTC
    from adaptspeech.inference.transcriber import transcribe

    processor = AutoProcessor.from_pretrained(lm_setup.model)
    save_processor_with_lm(processor, build_decoder(processor.tokenizer, lm_setup.lm, 2.5, -0.5), lm_setup.model)
    results = lm_setup.root / "results.json"

    def weights(lm: Path, *extra: str) -> tuple[float, float]:
        argv = ["evaluate", "--model", lm_setup.model, "--data", lm_setup.prepared, "--split", "dev", "--lm", lm,
                "--no-progress", "--device", "cpu", "--output", results, *extra]
        code, _, err = run_cli(argv, capsys)
        assert code == 0, err
        options = json.loads(results.read_text())["options"]
        return options["alpha"], options["beta"]

    assert weights(lm_setup.model) == (2.5, -0.5)
    assert weights(lm_setup.model / "language_model") == (2.5, -0.5)
    assert weights(lm_setup.model, "--alpha", "0.25") == (0.25, -0.5)
    assert weights(lm_setup.model, "--beta", "3") == (2.5, 3.0)
    assert weights(lm_setup.lm) == (0.5, 1.0)  # an `lm build` folder: the defaults

    clip = lm_setup.root / "clip.wav"
    sf.write(clip, lm_setup.waves[1], 16000, subtype="FLOAT")
    model = AdaptSpeechForCTC.from_pretrained(lm_setup.model)
    tuned = LMDecoder(build_decoder(processor.tokenizer, lm_setup.lm, 2.5, -0.5))
    expected = transcribe(model, processor, [lm_setup.waves[1]], lm_decoder=tuned)[0].text
    code, out, err = run_cli(["transcribe", "--model", lm_setup.model, clip, "--lm", lm_setup.model, "--no-progress",
                              "--device", "cpu"], capsys)  # fmt: skip
    assert code == 0, err
    assert out.rstrip("\n").split("\t", 1)[1] == expected


@pytest.mark.parametrize(
    ("variant", "message"),
    [
        ("output under a file", "argument --output: {root}/file.txt/tune.json: {root}/file.txt is a file"),
        pytest.param("output in a read-only folder", "argument --output: {root}/ro/tune.json: cannot write into "
                     "{root}/ro", marks=ROOT_SKIP),
        pytest.param("save into a read-only model", "--save: cannot write into {root}/model", marks=ROOT_SKIP),
    ],
)
def test_an_unwritable_tune_destination_is_refused_before_the_grid(variant, message, lm_setup, capsys,
                                                                  monkeypatch) -> None:  # fmt: skip
    """``lm tune --output`` / ``--save`` that cannot be written are refused before the encoder and the grid run."""
    import adaptspeech.lm.tune

    root = lm_setup.root
    (root / "file.txt").write_text("x")
    (root / "ro").mkdir()
    calls = []
    monkeypatch.setattr(adaptspeech.lm.tune, "dev_log_probs", lambda *a, **k: calls.append(1))
    extra = {"output under a file": ["--output", root / "file.txt" / "tune.json"],
             "output in a read-only folder": ["--output", root / "ro" / "tune.json"],
             "save into a read-only model": ["--save"]}[variant]
    before = snapshot(lm_setup.model)
    (root / "ro").chmod(0o555)
    if variant.startswith("save"):
        lm_setup.model.chmod(0o555)
    try:
        code, out, err = run_cli([*tune_argv(lm_setup), *extra], capsys)
    finally:
        (root / "ro").chmod(0o755)
        lm_setup.model.chmod(0o755)
    assert code in (1, 2) and out == "" and calls == []
    assert message.format(root=root) in one_error_line(err)
    assert snapshot(lm_setup.model) == before
