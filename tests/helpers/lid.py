"""Two clearly different synthetic languages for the language-ID tests: ``ro`` speaks in low tones (200-500 Hz),
``cs`` in high ones (2-4 kHz); a prepared folder of them (waveform features, as ``adaptspeech prepare`` writes it)
and the stage spec that trains a language-ID head on a tiny wav2vec2 model whose encoder stays frozen."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from adaptspeech.data.prepared_corpus import COMPLETE_MARKER
from adaptspeech.data.processor import build_processor
from adaptspeech.data.text import build_vocab
from adaptspeech.testing import TINY_BACKBONES

LID_LANGUAGES = ("ro", "cs")
#: each language's tone band in Hz
BANDS = {"ro": (200.0, 500.0), "cs": (2000.0, 4000.0)}
TEXTS = ["ab", "ba", "abc", "cab"]
SECONDS = 0.3


def tone_clip(language: str, seed: int, seconds: float = SECONDS) -> np.ndarray:
    """Three tones of ``language``'s band in a row with a little noise, float32 ``[S]`` at 16 kHz."""
    rng = np.random.default_rng(seed)
    low, high = BANDS[language]
    n = int(seconds * 16000)
    t = np.arange(n) / 16000
    freqs = np.repeat(rng.uniform(low, high, 3), -(-n // 3))[:n]
    wave = 0.4 * np.sin(2 * np.pi * freqs * t) + 0.02 * rng.standard_normal(n)
    return wave.astype(np.float32)


def two_language_corpus(folder: Path, clips: int = 16) -> Path:
    """A prepared folder with ``train`` (``clips`` per language), ``dev`` and ``test`` (4 per language, other seeds)
    splits of :func:`tone_clip` rows; returns ``folder``."""
    from datasets import Dataset, DatasetDict

    processor = build_processor(build_vocab(TEXTS), folder / "processor", feature_type="waveform")
    splits = {"train": (clips, 0), "dev": (4, 1000), "test": (4, 2000)}
    dataset = {}
    for split, (count, offset) in splits.items():
        rows = []
        for language in LID_LANGUAGES:
            for i in range(count):
                seed = offset + i + (0 if language == "ro" else 500)
                wave = tone_clip(language, seed)
                text = TEXTS[i % len(TEXTS)]
                values = processor.feature_extractor(wave, sampling_rate=16000).input_values[0]
                rows.append({"input_values": np.asarray(values, np.float32).tolist(),
                             "labels": processor.tokenizer(text).input_ids, "text": text, "language": language,
                             "input_length": len(values), "duration": len(values) / 16000,
                             "client_id": f"{language}{seed}", "path": f"{language}_{seed}.wav"})
        dataset[split] = Dataset.from_list(rows)
    DatasetDict(dataset).save_to_disk(str(folder / "dataset"))
    (folder / COMPLETE_MARKER).write_text(json.dumps({}))
    return folder


def lid_stage(prepared: Path, output_dir: Path, steps: int = 30, **model: Any) -> dict[str, Any]:
    """A stage training only a language-ID head (default settings, or ``model.lid``) on a tiny random wav2vec2
    encoder with an adapter per language, the encoder frozen."""
    return {
        "name": "lid",
        "output_dir": str(output_dir),
        "seed": 0,
        "data": {"prepared_dir": str(prepared), "train_languages": list(LID_LANGUAGES)},
        "model": {
            "init": "config",
            "config": {"backbone_type": "wav2vec2", "backbone_config": dict(TINY_BACKBONES["wav2vec2"]),
                       "adapter_languages": list(LID_LANGUAGES)},
            "trainable": {"backbone": False, "head": False, "lid": True},
            **model,
        },
        "training": {"max_steps": steps, "per_device_train_batch_size": 8, "learning_rate": 0.02, "warmup_steps": 0,
                     "logging_steps": 5, "save_steps": 1000, "use_cpu": True},
        "evaluation": {"batch_size": 8},
    }


def tiny_lid_classifier(folder: Path, labels: list[str], seed: int = 0) -> Path:
    """A random transformers ``Wav2Vec2ForSequenceClassification`` over ``labels`` with its feature extractor, saved
    by transformers in ``folder`` (the MMS-LID layout); returns ``folder``."""
    import torch
    from transformers import Wav2Vec2Config, Wav2Vec2FeatureExtractor, Wav2Vec2ForSequenceClassification

    config = Wav2Vec2Config(**{**TINY_BACKBONES["wav2vec2"], "classifier_proj_size": 8, "num_labels": len(labels),
                               "id2label": dict(enumerate(labels)),
                               "label2id": {label: i for i, label in enumerate(labels)}})
    torch.manual_seed(seed)
    Wav2Vec2ForSequenceClassification(config).save_pretrained(folder)
    Wav2Vec2FeatureExtractor(return_attention_mask=True).save_pretrained(folder)
    return folder


def model_with_lid_head(folder: Path, seed: int = 0) -> Path:
    """A random tiny wav2vec2 model folder (adapters ro, cs, no active language) with a random language-ID head
    over ro, cs; returns ``folder``."""
    import torch

    from adaptspeech import AdaptSpeechForCTC
    from helpers.model_folders import model_folder

    model_folder(folder, backbone="wav2vec2", seed=seed)
    model = AdaptSpeechForCTC.from_pretrained(folder)
    torch.manual_seed(seed)
    model.add_lid_head(list(LID_LANGUAGES), pooling="mean_std")
    model.save_pretrained(folder)
    return folder
