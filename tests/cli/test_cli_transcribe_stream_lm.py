"""``adaptspeech transcribe --stream --lm DIR`` and ``--rescore``: the final text is the recognizer's with the LM fused
into its beam / with attention rescoring, and what cannot be done is one line."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest
import soundfile as sf
from helpers.cli import one_error_line, run_main
from transformers import Wav2Vec2Processor

from adaptspeech import AdaptSpeechForCTC, AdaptSpeechForJointCTCAttention
from adaptspeech.inference.streaming.recognizer import StreamingRecognizer
from adaptspeech.lm.build import build_arpa
from adaptspeech.testing.tiny_models import save_tiny_model


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    root = tmp_path_factory.mktemp("stream_lm_cli")
    (root / "corpus.txt").write_text("abc def\nghi jkl\nabc jkl\n", encoding="utf-8")
    build_arpa(root / "corpus.txt", root / "lm", order=2, progress=False)
    wave = np.random.default_rng(0).standard_normal(24000).astype(np.float32) * 0.1
    sf.write(root / "a.wav", wave, 16000, subtype="FLOAT")
    return dict(ctc=save_tiny_model(root / "ctc", streaming=True), lm=root / "lm", audio=root / "a.wav", wave=wave,
                ctc_las=save_tiny_model(root / "ctc_las", head="ctc_las", streaming=True))


def final_text(out: str) -> str:
    events = [json.loads(line) for line in out.splitlines()]
    assert events[-1]["final"]
    return events[-1]["text"]


def test_stream_with_lm_and_with_rescoring(setup, capsys) -> None:
    pytest.importorskip("kenlm")
    code, out, _ = run_main(["transcribe", "--stream", "--lm", setup["lm"], "--alpha", "1", "--beta", "2",
                             "--chunk-ms", "320", "--model", setup["ctc"], setup["audio"]], capsys)
    recognizer = StreamingRecognizer(AdaptSpeechForCTC.from_pretrained(setup["ctc"]).eval(),
                                     Wav2Vec2Processor.from_pretrained(setup["ctc"]), chunk_ms=320, method="ctc_beam",
                                     lm=setup["lm"], alpha=1.0, beta=2.0)
    recognizer.accept_waveform(setup["wave"])
    assert code == 0 and final_text(out) == recognizer.finalize()
    code, out, _ = run_main(["transcribe", "--stream", "--rescore", "--beam-size", "4", "--chunk-ms", "320",
                             "--model", setup["ctc_las"], setup["audio"]], capsys)
    recognizer = StreamingRecognizer(AdaptSpeechForJointCTCAttention.from_pretrained(setup["ctc_las"]).eval(),
                                     Wav2Vec2Processor.from_pretrained(setup["ctc_las"]), chunk_ms=320,
                                     method="ctc_beam", beam_size=4, rescore=True, ctc_weight=0.5)
    recognizer.accept_waveform(setup["wave"])
    assert code == 0 and final_text(out) == recognizer.finalize()


def test_what_cannot_be_done_is_one_line(setup, tmp_path, capsys) -> None:
    cases = [
        (["--rescore", "--model", setup["ctc"]],
         r"--model .*: attention rescoring needs an attention \(LAS\) decoder; this model has head='ctc'"),
        (["--lm", tmp_path / "nowhere", "--model", setup["ctc"]], r"--lm .*nowhere: no lm\.arpa there"),
        (["--lm", setup["lm"], "--method", "ctc_greedy", "--model", setup["ctc"]],
         "--method ctc_greedy: --lm needs the prefix beam search"),
        (["--ctc-weight", "0.3", "--model", setup["ctc_las"]],
         r"ctc_weight \(--ctc-weight\) weighs the attention rescoring: give rescore=True \(--rescore\) too"),
        (["--rescore", "--ctc-weight", "1.5", "--model", setup["ctc_las"]],
         r"ctc_weight=1\.5; allowed values: numbers in \[0, 1\]"),
        (["--alpha", "1", "--model", setup["ctc"]], r"alpha / beta \(--alpha / --beta\) weigh an n-gram LM: give lm= "
         r"\(--lm\) too"),
        (["--hotwords", "abc", "--lm", setup["lm"], "--model", setup["ctc"]], "--hotwords cannot be combined with"),
    ]
    for options, message in cases:
        code, _, err = run_main(["transcribe", "--stream", *options, setup["audio"]], capsys)
        assert code == 1
        assert re.search(message, one_error_line(err))
    code, _, err = run_main(["transcribe", "--rescore", "--model", setup["ctc_las"], setup["audio"]], capsys)
    assert code != 0 and "--rescore: used with --stream only" in one_error_line(err)
