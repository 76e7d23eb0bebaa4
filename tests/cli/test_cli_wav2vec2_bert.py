"""``adaptspeech transcribe`` (PyTorch), ``evaluate`` and long recordings on a tiny w2v-BERT 2.0 model folder
(``wav2vec2_bert``, SeamlessM4T's stacked filterbank): the texts are those of the model's logits on transformers'
features (found: ``transcribe`` normalised the stacked units over the recording, population variance per column,
where transformers normalises the mel bins before stacking with ddof=1: other texts than the model's)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
import torch
from helpers.cli import load_prepared_split, run_main
from helpers.model_folders import audio, model_folder

from adaptspeech.cli import main
from adaptspeech.cli.common import _load_model
from adaptspeech.decoding import decode
from adaptspeech.inference.long_form.stitching import label_text
from adaptspeech.metrics import compute_error_rates
from adaptspeech.runtime.audio import load_audio
from adaptspeech.runtime.command import unescape_field

SECONDS = (1.3, 0.7, 2.1)


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny random w2v-BERT model with ro / cs adapters and its processor, and three wav clips."""
    root = tmp_path_factory.mktemp("w2v_bert")
    model_folder(root / "model", backbone="wav2vec2_bert")
    for i, seconds in enumerate(SECONDS):
        sf.write(root / f"clip{i}.wav", audio(seconds, seed=i), 16000, subtype="FLOAT")
    return root


def _texts(stdout: str) -> list[str]:
    return [unescape_field(line.split("\t")[1]) for line in stdout.splitlines()]


@torch.no_grad()
def _model_texts(folder: Path, waveforms: list[np.ndarray], language: str | None = "ro") -> list[str]:
    """Best-path text of the model's logits on transformers' own features of each clip (the processor's
    ``SeamlessM4TFeatureExtractor``), one clip at a time, with ``language``'s adapter active (None: as saved)."""
    model, processor = _load_model(str(folder))
    if language is not None:
        model.set_target_language(language)
    texts = []
    for waveform in waveforms:
        batch = processor.feature_extractor(waveform, sampling_rate=16000, return_tensors="pt")
        log_probs = model(**batch).logits.log_softmax(-1)
        ids = decode("ctc_greedy", ctc_log_probs=log_probs, blank_id=model.config.pad_token_id)[0]
        texts.append(label_text(processor.tokenizer, ids))
    return texts


def test_transcribe_gives_the_text_of_the_models_logits_on_transformers_features(folder, capsys):
    wavs = [folder / f"clip{i}.wav" for i in range(len(SECONDS))]
    expected = _model_texts(folder / "model", [audio(s, seed=i) for i, s in enumerate(SECONDS)])
    assert all(expected), "the random model decodes to text"
    code, out, err = run_main(["transcribe", "--model", folder / "model", "--language", "ro", *wavs, "--no-progress"],
                              capsys)
    assert code == 0, err
    assert _texts(out) == expected


# ---- evaluate ------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def prepared(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A synthetic ro corpus prepared twice (stacked_fbank features, and waveforms), and a tiny random w2v-BERT model
    saved with the stacked_fbank processor (its vocabulary)."""
    from transformers import AutoProcessor

    from adaptspeech import AdaptSpeechForCTC
    from adaptspeech.testing import tiny_config

    root = tmp_path_factory.mktemp("w2v_bert_eval")
    assert main(["prepare", "synthetic", "--out", str(root / "corpus"), "--languages", "ro",
                 "--clips-per-language", "20", "--workers", "1", "--no-progress"]) == 0
    for feature_type in ("stacked_fbank", "waveform"):
        assert main(["prepare", "common-voice", "--root", str(root / "corpus"), "--languages", "ro", "--out",
                     str(root / feature_type), "--splits", "train,test", "--feature-type", feature_type]) == 0
    processor = AutoProcessor.from_pretrained(root / "stacked_fbank" / "processor")
    torch.manual_seed(0)
    model = AdaptSpeechForCTC(tiny_config("wav2vec2_bert", vocab_size=len(processor.tokenizer),
                                          adapter_languages=["ro"]))
    with torch.no_grad():  # a head that is not near-uniform: the random model writes characters
        for name, parameter in model.named_parameters():
            if "ctc_head" in name:
                parameter.normal_(0.0, 0.5)
    model.save_pretrained(root / "model")
    processor.save_pretrained(root / "model")
    return {"root": root, "model": root / "model", "stacked_fbank": root / "stacked_fbank",
            "waveform": root / "waveform"}


@pytest.mark.parametrize("feature_type", ["stacked_fbank", "waveform"])
def test_evaluate_scores_the_models_texts_on_transformers_features(prepared, feature_type, tmp_path, capsys):
    """The split prepared as stacked_fbank features, or as waveforms (featurised when collated): the same rates, those
    of the model's texts on transformers' features of each decoded clip."""
    output = tmp_path / "results.json"
    argv = ["evaluate", "--model", prepared["model"], "--data", prepared[feature_type], "--output", output,
            "--no-progress"]
    code, out, err = run_main(argv, capsys)
    assert code == 0, err
    result = json.loads(output.read_text())
    rows, _ = load_prepared_split(prepared["stacked_fbank"], "test")
    clips = [load_audio(prepared["root"] / "corpus" / "ro" / "clips" / path, 16000) for path in rows["path"]]
    hypotheses = _model_texts(prepared["model"], clips, language=None)  # evaluate's model: as saved
    assert any(hypotheses), "the random model writes characters"
    expected = compute_error_rates(hypotheses, list(rows["text"]), list(rows["language"]))
    assert result["per_language"]["ro"]["num_utterances"] == len(rows) >= 2
    for key in ("char_edits", "word_edits"):
        assert result["per_language"]["ro"][key] == expected["per_language"]["ro"][key]
    assert result["overall"]["cer"] == pytest.approx(expected["overall"]["cer"])
    assert f"ro\tCER {100 * expected['overall']['cer']:.2f}%" in out


# ---- long recordings ------------------------------------------------------------------------------------------


CLIP_SECONDS = (3.1, 2.4, 3.7)
GAP = 8000
"""0.5 s of digital silence before, between and after the clips of the long recording."""


@pytest.fixture(scope="module")
def long_recording(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[np.ndarray]]:
    """Three noisy chirps joined by digital silence (about 11 s, a float wav), and the chirps."""
    clips = [audio(seconds, seed=10 + i) for i, seconds in enumerate(CLIP_SECONDS)]
    gap = np.zeros(GAP, np.float32)
    path = tmp_path_factory.mktemp("long") / "long.wav"
    sf.write(path, np.concatenate([part for clip in clips for part in (gap, clip)] + [gap]), 16000, subtype="FLOAT")
    return path, clips


def test_a_long_recording_split_at_pauses_reads_each_clip_as_transformers_does(folder, long_recording, capsys):
    """Longer than one call of 8 s: split at the pauses, each clip is read from its own samples and normalised as
    transformers normalises it, so the text is the clips' own texts joined by a word boundary."""
    path, clips = long_recording
    expected = " ".join(_model_texts(folder / "model", clips))
    code, out, err = run_main(["transcribe", "--model", folder / "model", "--language", "ro", "--split-by", "pauses",
                               "--chunk-length", "8", "--stride-length", "2", path, "--no-progress"], capsys)
    assert code == 0, err
    assert _texts(out) == [expected]


def test_a_long_recording_split_in_chunks_has_text_and_word_times_inside_it(folder, long_recording, capsys):
    path, clips = long_recording
    code, out, err = run_main(["transcribe", "--model", folder / "model", "--language", "ro", "--split-by", "chunks",
                               "--chunk-length", "8", "--stride-length", "2", "--timestamps", "word",
                               path, "--no-progress"], capsys)
    assert code == 0, err
    result = json.loads(out)
    seconds = (sum(len(clip) for clip in clips) + GAP * (len(clips) + 1)) / 16000
    assert result["seconds"] == pytest.approx(seconds, abs=1e-3) and result["text"]
    times = [(chunk["start"], chunk["end"]) for chunk in result["chunks"]]
    assert times and all(0 <= start < end <= seconds for start, end in times)
    assert "".join(chunk["text"] for chunk in result["chunks"]) == result["text"].replace(" ", "")
