"""Tiny MMS-shaped checkpoints built and saved by transformers itself (``Wav2Vec2ForCTC`` with stable layer norm and
``adapter_attn_dim``), MMS adapter files named the way MMS names them (``_get_adapters()``), and the reference
logits transformers gives for a language."""

from __future__ import annotations

from pathlib import Path

import torch
from safetensors.torch import save_file
from transformers import Wav2Vec2Config, Wav2Vec2ForCTC

from adaptspeech.testing import TINY_BACKBONES

ADAPTER_DIM = 4
HIDDEN = TINY_BACKBONES["wav2vec2"]["hidden_size"]
#: the built-in language of the tiny checkpoint, and its vocabulary size
BUILTIN, BUILTIN_VOCAB = "eng", 10


def mms_config(**overrides) -> Wav2Vec2Config:
    settings = dict(TINY_BACKBONES["wav2vec2"])
    settings.update(do_stable_layer_norm=True, adapter_attn_dim=ADAPTER_DIM, vocab_size=BUILTIN_VOCAB)
    settings.update(overrides)
    return Wav2Vec2Config(**settings)


def randomise_adapters(model: Wav2Vec2ForCTC, seed: int) -> None:
    """Random values in every MMS adapter weight and the lm_head (LayerNorms around 1, biases around 0)."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, param in model._get_adapters().items():
            noise = torch.randn(param.shape, generator=gen)
            param.copy_((1.0 + 0.2 * noise) if name.endswith("norm.weight") else 0.3 * noise)


def save_mms_checkpoint(folder: Path, seed: int = 0, **overrides) -> Path:
    """A tiny MMS checkpoint (random encoder, random built-in adapter and lm_head) saved by transformers."""
    torch.manual_seed(seed)
    model = Wav2Vec2ForCTC(mms_config(**overrides)).eval()
    randomise_adapters(model, seed + 100)
    model.save_pretrained(folder)
    return folder


def write_mms_adapter(folder: Path, language: str, vocab_size: int, seed: int, **overrides) -> Path:
    """``folder/adapter.<language>.safetensors`` as MMS writes it: the ``_get_adapters()`` keys of a model whose
    lm_head has ``vocab_size`` outputs, random values."""
    torch.manual_seed(seed)
    model = Wav2Vec2ForCTC(mms_config(vocab_size=vocab_size, **overrides))
    randomise_adapters(model, seed)
    path = folder / f"adapter.{language}.safetensors"
    save_file({k: v.detach().contiguous() for k, v in model._get_adapters().items()}, str(path))
    return path


def transformers_logits(folder: Path, language: str | None, inputs: dict[str, torch.Tensor]) -> torch.Tensor:
    """What transformers gives: ``Wav2Vec2ForCTC.from_pretrained(folder)``, ``load_adapter(language)`` unless None
    (the built-in adapter), logits on ``inputs``."""
    model = Wav2Vec2ForCTC.from_pretrained(folder).eval()
    if language is not None:
        model.load_adapter(language)
    with torch.no_grad():
        return model(inputs["input_values"], attention_mask=inputs["attention_mask"]).logits


def mms_inputs(batch: int = 2, seed: int = 0) -> dict[str, torch.Tensor]:
    """Waveforms [B, 4000] with the last utterance padded by a quarter."""
    gen = torch.Generator().manual_seed(seed)
    values = torch.randn(batch, 4000, generator=gen)
    mask = torch.ones(batch, 4000, dtype=torch.long)
    mask[-1, 3000:] = 0
    values[-1, 3000:] = 0.0
    return {"input_values": values, "attention_mask": mask}
