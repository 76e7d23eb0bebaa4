"""``from_pretrained`` of an adaptspeech model (adaptspeech/inference/model_mixin.py): transformers' own keyword
arguments keep their meaning beside MMS's ``target_lang``."""

from __future__ import annotations

import pytest
import torch
from safetensors.torch import load_file, save_file

from adaptspeech import AdaptSpeechForCTC
from adaptspeech.testing import save_tiny_model

DROPPED = "ctc_head.lm_head.bias"


@pytest.mark.parametrize("target_lang", [None, "cs"])
def test_output_loading_info_returns_the_model_and_the_info(tmp_path, target_lang):
    """As transformers does: ``(model, loading_info)``; before, ``AttributeError: 'tuple' object has no attribute
    'auto_language'``. A folder whose weights lack the head's bias: the info names it as missing."""
    folder = save_tiny_model(tmp_path / "model")
    weights = folder / "model.safetensors"
    tensors = load_file(weights)
    save_file({k: v for k, v in tensors.items() if k != DROPPED}, weights, metadata={"format": "pt"})
    loaded = AdaptSpeechForCTC.from_pretrained(folder, output_loading_info=True, target_lang=target_lang)
    assert isinstance(loaded, tuple) and len(loaded) == 2
    model, info = loaded
    assert isinstance(model, AdaptSpeechForCTC) and not model.auto_language
    assert DROPPED in info["missing_keys"] and not info["unexpected_keys"]
    assert model.config.active_languages == ([] if target_lang is None else [target_lang])
    plain = AdaptSpeechForCTC.from_pretrained(folder, target_lang=target_lang).state_dict()
    assert all(torch.equal(tensor, plain[name]) for name, tensor in model.state_dict().items() if name != DROPPED)
