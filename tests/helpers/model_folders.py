"""Tiny model folders (model + processor, as `adaptspeech train` writes them) and test audio for the inference tests."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import soundfile as sf
import torch

from adaptspeech import AdaptSpeechForCTC, AdaptSpeechForJointCTCAttention
from adaptspeech.data.feature_types import FEATURE_TYPES
from adaptspeech.data.processor import build_processor
from adaptspeech.data.text import build_vocab
from adaptspeech.testing import tiny_config

TEXTS = ["abc def", "ghi jab", "lot of letters"]
LAS = {"listener_layers": 0, "decoder_hidden": 32, "embedding_dim": 16, "attention_dim": 16}
N_MELS = 16


def model_folder(
    folder: Path,
    backbone: str = "fbank_conformer",
    head: str = "ctc",
    languages: tuple[str, ...] = ("ro", "cs"),
    per_language_vocab: bool = False,
    seed: int = 0,
    **overrides: Any,
) -> Path:
    """Write a random tiny model with its processor into ``folder``; returns ``folder``."""
    vocab = build_vocab(TEXTS)
    feature_type = {"fbank_conformer": "fbank", "wav2vec2_bert": "stacked_fbank"}.get(backbone, "waveform")
    build_processor({lang: vocab for lang in languages} if per_language_vocab else vocab, folder,
                    feature_type=feature_type, n_mels=80 if backbone == "wav2vec2_bert" else N_MELS)
    config = tiny_config(backbone, vocab_size=len(vocab), adapter_languages=list(languages), head=head,
                         las=LAS if head != "ctc" else None, **overrides)
    torch.manual_seed(seed)
    cls = AdaptSpeechForCTC if head == "ctc" else AdaptSpeechForJointCTCAttention
    model = cls(config).eval()
    with torch.no_grad():  # random adapters and heads that are not near-identity / near-uniform
        for name, parameter in model.named_parameters():
            if "adapter" in name or "ctc_head" in name:
                parameter.normal_(0.0, 0.5)
    model.save_pretrained(folder)
    return folder


def audio(seconds: float = 1.5, seed: int = 0) -> np.ndarray:
    """A deterministic noisy chirp at 16 kHz, float32 ``[S]``."""
    rng = np.random.default_rng(seed)
    t = np.arange(int(seconds * 16000)) / 16000
    wave = 0.3 * np.sin(2 * np.pi * (200 + 300 * t) * t) + 0.05 * rng.standard_normal(t.shape)
    return wave.astype(np.float32)


def synthetic_recording(folder: Path, clips: int = 7, gap_s: float = 0.5) -> Path:
    """``folder/long.wav``: ``clips`` synthetic (espeak-ng) Romanian clips joined by ``gap_s`` of digital silence, with
    the same silence before the first and after the last (seven clips: about 18 s)."""
    from adaptspeech.data.audio import load_audio
    from adaptspeech.data.synthetic import build_synthetic_corpus

    build_synthetic_corpus(folder / "corpus", ["ro"], clips, seed=0, num_workers=1, progress=False)
    waves = [load_audio(path, 16000) for path in sorted((folder / "corpus" / "ro" / "clips").glob("*.mp3"))]
    gap = np.zeros(round(gap_s * 16000), dtype=np.float32)
    sf.write(folder / "long.wav", np.concatenate([part for wave in waves for part in (gap, wave)] + [gap]), 16000)
    return folder / "long.wav"


def onnx_splits_as_pytorch(root: Path, waveform: np.ndarray, chunk_length_s: float, stride_length_s: float) -> str:
    """Check that ``OnnxRecognizer`` on the export ``root/onnx`` splits the long ``waveform`` at pauses (it does not
    fit one call) and gives the text the PyTorch path gives with the model ``root/model`` (language ro); returns
    that text, which holds one word at least per pause-separated clip."""
    from adaptspeech.cli.common import _load_model
    from adaptspeech.inference.transcriber import transcribe
    from adaptspeech.runtime import OnnxRecognizer

    split = {"chunk_length_s": chunk_length_s, "stride_length_s": stride_length_s}
    model, processor = _load_model(str(root / "model"))
    model.set_target_language("ro")
    expected = transcribe(model, processor, [waveform], split_by="pauses", **split)[0].text
    assert len(expected.split()) >= 7, "one word at least per clip (a pause is a word boundary)"
    recognizer = OnnxRecognizer(root / "onnx", precision="fp32", **split)
    assert not recognizer.fits_one_call(waveform)
    assert recognizer.transcribe([waveform])[0].text == expected
    return expected


def span_audio(wave: np.ndarray, start: int, end: int, feature_type: str) -> np.ndarray:
    """The samples that model input units ``[start, end)`` of ``feature_type`` read (``prepare`` of them gives
    exactly those units)."""
    first, last = FEATURE_TYPES.get(feature_type)().unit_samples(start, end)
    return wave[first:last]


def labelling_model(folder: Path, processor_dir: Path, languages: tuple[str, ...] = ("ro",), seed: int = 0) -> Path:
    """A random tiny fbank model over the vocabulary of a prepared folder's processor (80 mel bins), saved with that
    processor into ``folder``: its CTC head writes characters of the vocabulary (random, not blank), so that
    pseudo-labels are not empty."""
    from transformers import Wav2Vec2Processor

    processor = Wav2Vec2Processor.from_pretrained(processor_dir)
    processor.save_pretrained(folder)
    config = tiny_config("fbank_conformer", vocab_size=len(processor.tokenizer), adapter_languages=list(languages),
                         backbone_overrides={"num_mel_bins": int(getattr(processor.feature_extractor, "n_mels", 80))})
    torch.manual_seed(seed)
    model = AdaptSpeechForCTC(config).eval()
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if "adapter" in name or "ctc_head" in name:
                parameter.normal_(0.0, 0.5)
    model.save_pretrained(folder)
    return folder
