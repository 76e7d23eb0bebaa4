"""transformers' ASR pipeline on adaptspeech CTC models (fbank and raw waveform), against decoding the model's own
logits: plain, batched, chunked (exact up to the stitching rule), word / character timestamps, target_lang."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from helpers.model_folders import audio, model_folder
from transformers import AutoFeatureExtractor, AutoProcessor, pipeline

from adaptspeech import AdaptSpeechFeatureExtractor, AdaptSpeechForCTC
from adaptspeech.data.features import extract_features
from adaptspeech.decoding import ctc_greedy_decode
from adaptspeech.inference.long_form.stitching import label_text, specials_as_blank

TASK = "automatic-speech-recognition"


@pytest.fixture(scope="module", params=["fbank_conformer", "wav2vec2", "wav2vec2_bert"])
def folder(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return model_folder(tmp_path_factory.mktemp(request.param), backbone=request.param)


def reference_frames(folder: Path, wave: np.ndarray, language: str | None = None) -> tuple[list[int], str]:
    """Best-path frame labels and text, computed without the pipeline: ``prepare``'s features, the model's forward,
    the project's greedy decoder, the tokenizer without its CTC grouping."""
    processor = AutoProcessor.from_pretrained(folder)
    model = AdaptSpeechForCTC.from_pretrained(folder).eval()
    if language is not None:
        model.set_target_language(language)
    key, features = extract_features(wave, processor.feature_extractor)
    with torch.no_grad():
        logits = model(**{key: torch.from_numpy(features)[None]}).logits
    ids = ctc_greedy_decode(logits)[0]
    return logits.argmax(-1)[0].tolist(), label_text(processor.tokenizer, ids)


def test_fbank_folder_saves_the_adaptspeech_feature_extractor(tmp_path: Path) -> None:
    folder = model_folder(tmp_path)
    extractor = AutoFeatureExtractor.from_pretrained(folder)
    assert isinstance(extractor, AdaptSpeechFeatureExtractor)
    assert extractor.model_input_names[0] == "input_features"
    assert AutoProcessor.from_pretrained(folder).feature_extractor.to_dict() == extractor.to_dict()


def test_feature_extractor_equals_prepare_features_and_pads_a_batch(tmp_path: Path) -> None:
    extractor = AutoFeatureExtractor.from_pretrained(model_folder(tmp_path))
    long, short = audio(1.0, seed=1), audio(0.5, seed=2)
    batch = extractor([long, short], sampling_rate=16000, return_tensors="pt")
    for row, wave in enumerate((long, short)):
        _, expected = extract_features(wave, extractor)
        frames = expected.shape[0]
        np.testing.assert_array_equal(batch["input_features"][row, :frames].numpy(), expected)
        assert batch["attention_mask"][row].sum() == frames
        assert (batch["input_features"][row, frames:] == 0).all()
    with pytest.raises(ValueError, match="8000 Hz"):
        extractor(long, sampling_rate=8000)


def test_pipeline_equals_the_models_greedy_decode(folder: Path) -> None:
    asr = pipeline(TASK, model=str(folder))
    waves = [audio(1.5, seed=3), audio(0.7, seed=4)]
    expected = [reference_frames(folder, w)[1] for w in waves]
    assert expected[0] != expected[1] and len(expected[0]) > 3  # the checks below compare something
    assert [asr(w)["text"] for w in waves] == expected


def test_fbank_utterance_padded_in_a_batch_decodes_as_alone(tmp_path: Path) -> None:
    folder = model_folder(tmp_path)
    asr = pipeline(TASK, model=str(folder))
    waves = [audio(1.5, seed=3), audio(0.7, seed=4)]
    assert [out["text"] for out in asr(waves, batch_size=2)] == [reference_frames(folder, w)[1] for w in waves]


def test_batched_pipeline_reads_padded_frames_as_blanks(folder: Path) -> None:
    """The stock pipeline decodes the logits of padded frames as text; for adaptspeech models they are blanks, so a
    padded utterance reads as the model's greedy decode of its real frames in that batch."""
    asr = pipeline(TASK, model=str(folder))
    waves = [audio(1.5, seed=3), audio(0.7, seed=4)]
    batch = asr.feature_extractor(waves, sampling_rate=16000, padding=True, return_tensors="pt")
    with torch.no_grad():
        out = asr.model(**batch)
    ids = ctc_greedy_decode(out.logits, out.frame_lengths)
    expected = [label_text(asr.tokenizer, row) for row in ids]
    assert out.frame_lengths[1] < out.logits.shape[1]  # the short one is padded
    assert [o["text"] for o in asr(waves, batch_size=2)] == expected


def _reference_chunks(frames: list[int], tokenizer: object, ratio: int, level: str) -> list[tuple[str, float, float]]:
    """Character or word spans from frame labels: a character starts at the first frame of its run and ends after
    its last; a word spans its characters (the delimiter ``|`` separates words)."""
    blank, delimiter = tokenizer.pad_token_id, tokenizer.convert_tokens_to_ids("|")
    frames = specials_as_blank(frames, tokenizer)  # <s>, </s>, [UNK] are not text
    chars: list[tuple[str, int, int]] = []
    for t, token in enumerate(frames):
        if token == blank:
            continue
        if t > 0 and frames[t - 1] == token:
            chars[-1] = (chars[-1][0], chars[-1][1], t + 1)
        else:
            chars.append((tokenizer.convert_ids_to_tokens(token), t, t + 1))
    spans = chars
    if level == "word":
        spans, current = [], []
        for char in [*chars, ("|", 0, 0)]:
            if char[0] == "|" or tokenizer.convert_tokens_to_ids(char[0]) == delimiter:
                if current:
                    spans.append(("".join(c[0] for c in current), current[0][1], current[-1][2]))
                current = []
            else:
                current.append(char)
    else:
        spans = [(" " if c[0] == "|" else c[0], c[1], c[2]) for c in chars]
    return [(text, start * ratio / 16000, end * ratio / 16000) for text, start, end in spans]


@pytest.mark.parametrize("level", ["word", "char"])
def test_pipeline_timestamps_equal_the_frame_spans(folder: Path, level: str) -> None:
    wave = audio(1.5, seed=5)
    frames, text = reference_frames(folder, wave)
    asr = pipeline(TASK, model=str(folder))
    out = asr(wave, return_timestamps=level)
    ratio = asr.model.config.inputs_to_logits_ratio
    expected = _reference_chunks(frames, asr.tokenizer, ratio, level)
    got = [(c["text"], *c["timestamp"]) for c in out["chunks"]]
    assert out["text"] == text
    assert [g[0] for g in got] == [e[0] for e in expected]
    np.testing.assert_allclose([g[1:] for g in got], [e[1:] for e in expected], atol=1e-9)


def test_inputs_to_logits_ratio_is_input_samples_per_output_frame(tmp_path: Path) -> None:
    fbank = AdaptSpeechForCTC.from_pretrained(model_folder(tmp_path / "f"))
    assert fbank.config.inputs_to_logits_ratio == 640  # 10 ms hop x two stride-2 convolutions
    wav = AdaptSpeechForCTC.from_pretrained(model_folder(tmp_path / "w", backbone="wav2vec2"))
    assert wav.config.inputs_to_logits_ratio == 10  # the tiny backbone's strides 5 x 2
    wave = torch.from_numpy(audio(1.0))
    with torch.no_grad():
        assert fbank(input_features=torch.from_numpy(extract_features(wave.numpy(), AutoFeatureExtractor
                     .from_pretrained(tmp_path / "f"))[1])[None]).logits.shape[1] == 16000 // 640
        assert wav(input_values=wave[None]).logits.shape[1] == 1599  # ((16000 - 10) // 5 + 1 - 3) // 2 + 1


def test_pipeline_chunking_equals_unchunked_output_for_a_local_model(tmp_path: Path) -> None:
    """Exact up to the stitching rule: chunks start on the model's output-frame grid (multiples of 640 samples), each
    contributes its frames between the strides, so with an encoder whose receptive field (here the two convolutions,
    +-1 output frame; no attention layer) fits in the stride, and without per-chunk normalisation, the stitched frames
    are the unchunked ones."""
    folder = model_folder(tmp_path, backbone_overrides={"num_hidden_layers": 0})
    extractor = AutoFeatureExtractor.from_pretrained(folder)
    extractor.do_normalize = False
    asr = pipeline(TASK, model=str(folder), feature_extractor=extractor)
    wave = audio(3.0, seed=6)  # 75 output frames
    whole = asr(wave, return_timestamps="char")
    chunked = asr(wave, chunk_length_s=1.0, stride_length_s=0.2, return_timestamps="char", batch_size=2)
    assert len(whole["chunks"]) > 5
    assert chunked == whole


def test_target_lang_switches_adapter_head_and_vocabulary(tmp_path: Path) -> None:
    folder = model_folder(tmp_path, per_language_vocab=True)
    wave = audio(1.5, seed=7)
    texts = {}
    for language in ("ro", "cs"):
        asr = pipeline(TASK, model=str(folder), model_kwargs={"target_lang": language})
        assert asr.model.config.active_languages == [language]
        assert asr.tokenizer.target_lang == language
        texts[language] = asr(wave)["text"]
        assert texts[language] == reference_frames(folder, wave, language)[1]
    assert texts["ro"] != texts["cs"]  # the adapters differ


def test_from_pretrained_target_lang_with_a_shared_vocabulary(tmp_path: Path) -> None:
    folder = model_folder(tmp_path)
    model = AdaptSpeechForCTC.from_pretrained(folder, target_lang="cs")
    assert model.config.active_languages == ["cs"]
    with pytest.raises(KeyError, match="no adapter for language"):
        AdaptSpeechForCTC.from_pretrained(folder, target_lang="xx")


def test_file_paths_bytes_and_other_rates_are_read_without_ffmpeg_or_torchaudio(folder: Path, tmp_path: Path,
                                                                              monkeypatch) -> None:
    """docs/inference.md's ``asr("clip.wav")`` needed ffmpeg and an 8-kHz array needed torchaudio, neither installed:
    adaptspeech models read files with soundfile + soxr (as ``transcribe``) and resample arrays with soxr."""
    import soundfile as sf
    import soxr
    import transformers.pipelines.automatic_speech_recognition as stock

    def no_ffmpeg(*args, **kwargs):
        raise AssertionError("ffmpeg_read called")

    monkeypatch.setattr(stock, "ffmpeg_read", no_ffmpeg)
    asr = pipeline(TASK, model=str(folder), device="cpu")
    wave, other = audio(1.0, seed=1), audio(0.8, seed=3)
    expected, expected_other = asr(wave)["text"], asr(other)["text"]
    sf.write(tmp_path / "clip.wav", wave, 16000, subtype="FLOAT")  # the same samples as the array
    sf.write(tmp_path / "other.wav", other, 16000, subtype="FLOAT")
    assert asr(str(tmp_path / "clip.wav")) == {"text": expected}
    assert asr((tmp_path / "clip.wav").read_bytes()) == {"text": expected}
    assert asr([str(tmp_path / "clip.wav"), str(tmp_path / "other.wav")]) == [{"text": expected},
                                                                               {"text": expected_other}]
    paths = [str(tmp_path / "clip.wav"), str(tmp_path / "other.wav")]
    assert asr(paths, batch_size=2) == asr([wave, other], batch_size=2)
    stereo = np.stack([wave, wave])  # [channels, S], as transformers reads arrays
    assert asr({"raw": stereo, "sampling_rate": 16000}) == {"text": expected}
    at_8k = soxr.resample(wave, 16000, 8000, quality="HQ").astype(np.float32)
    again = soxr.resample(at_8k, 8000, 16000, quality="HQ").astype(np.float32)
    assert asr({"raw": at_8k, "sampling_rate": 8000}) == asr(again)
    sf.write(tmp_path / "clip_8k.wav", at_8k, 8000, subtype="FLOAT")
    assert asr(str(tmp_path / "clip_8k.wav")) == asr(again)
    from adaptspeech.data import BadClipError

    with pytest.raises(BadClipError, match=r"missing\.wav: missing \(no such file\)"):
        asr(str(tmp_path / "missing.wav"))
    sf.write(tmp_path / "silence.wav", np.zeros(16000, np.float32), 16000)
    assert asr(str(tmp_path / "silence.wav")) == {"text": "", "skipped": "digital silence only"}


def test_pipeline_text_drops_special_tokens_as_transcribe_does(tmp_path: Path) -> None:
    """A random head writes ``<s>``, ``</s>`` and ``[UNK]`` among its characters: ``transcribe`` drops them, and so
    does the pipeline (plain and with timestamps); before, its text kept them."""
    from adaptspeech.data.text import SPECIAL_TOKENS
    from adaptspeech.inference.transcriber import transcribe

    folder = model_folder(tmp_path / "m", languages=("ro",))
    asr = pipeline(TASK, model=str(folder))
    processor = AutoProcessor.from_pretrained(folder)
    model = AdaptSpeechForCTC.from_pretrained(folder).eval()
    waves = [audio(1.5, seed=seed) for seed in range(6)]
    raw = [processor.tokenizer.decode(reference_frames(folder, wave)[0]) for wave in waves]
    assert any(token in text for text in raw for token in SPECIAL_TOKENS[1:4])  # the check below compares something
    expected = [result.text for result in transcribe(model, processor, waves)]
    assert [asr(wave)["text"] for wave in waves] == expected
    for wave, text in zip(waves, expected, strict=True):
        out = asr(wave, return_timestamps="word")
        assert out["text"] == text and " ".join(chunk["text"] for chunk in out["chunks"]) == text
