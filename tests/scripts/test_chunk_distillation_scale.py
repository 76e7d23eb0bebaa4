"""scripts/chunk_distillation_scale.py: the CTC loss and the distillation KL per frame at each chunk size, zero KL at
full context, on a tiny dynamic-chunk model."""

from __future__ import annotations

import sys

import torch
from helpers.paths import REPO

from adaptspeech import AdaptSpeechForCTC
from adaptspeech.heads.ctc import chunk_distillation_kl
from adaptspeech.testing.tiny_models import tiny_config, tiny_inputs

sys.path.insert(0, str(REPO / "scripts"))

import chunk_distillation_scale


def test_full_context_has_no_kl_and_chunks_match_the_helper() -> None:
    config = tiny_config("fbank_conformer", attention={"kind": "rel_pos", "dynamic_chunks": True},
                         backbone_overrides={"conv_lookahead": "chunk"})
    torch.manual_seed(0)
    model = AdaptSpeechForCTC(config).eval()
    inputs = tiny_inputs(config, batch=2, seconds=0.8)
    inputs["labels"] = torch.tensor([[1, 2, 3], [4, 5, -100]])
    rows = [0, 1]  # the collate below returns the whole batch for any rows

    figures = chunk_distillation_scale.scale(model, rows, lambda batch: inputs, [0, 2], batch_size=2)

    assert figures[0]["kl_per_frame"] == 0.0
    with torch.no_grad():
        full = model(**inputs)
        with chunk_distillation_scale.chunk_attention(2):
            chunked = model(**inputs)
    mask = torch.arange(full.logits.shape[1])[None, :] < full.frame_lengths[:, None]
    assert figures[2]["ctc"] == float(chunked.loss_ctc)
    assert figures[2]["kl_per_frame"] == float(chunk_distillation_kl(full.logits, chunked.logits, mask)) > 0
