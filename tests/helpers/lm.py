"""Helpers of the n-gram LM tests: the LM text and dev references, peaky CTC log-probabilities, a prepared ``dev``
folder of a model's features, and the ``lm tune`` command line of an LM setup."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import torch
from transformers import AutoProcessor

CORPUS = ["abc def", "ghi jab", "abc def", "lot of letters", "ghi jab", "def ghi"]
DEV_TEXTS = ["abc def", "ghi jab", "lot of letters"]


def peaky_log_probs(frames: int, vocab: int, seed: int) -> torch.Tensor:
    """Random CTC log-probabilities ``[frames, vocab]`` sharpened by 4 (a few labels dominate each frame)."""
    gen = torch.Generator().manual_seed(seed)
    return (torch.randn(frames, vocab, generator=gen) * 4).log_softmax(-1)


def prepared_dev(folder: Path, model_dir: Path, waves: list, texts: list[str]) -> Path:
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


def tune_argv(setup: SimpleNamespace, *extra: str) -> list:
    """``lm tune`` of the model, prepared ``dev`` and LM of ``setup`` (beam 4, CPU), then ``extra``."""
    return ["lm", "tune", "--model", setup.model, "--data", setup.prepared, "--lm", setup.lm, "--beam-size", "4",
            "--device", "cpu", *extra]
