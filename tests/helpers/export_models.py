"""The models the ONNX graph tests export: one language's adapter or the SimAdapter fusion, made to matter."""

from __future__ import annotations

import torch

from adaptspeech.modeling import AdaptSpeechForCTC


def routed_for_export(model: AdaptSpeechForCTC, fusion: bool) -> AdaptSpeechForCTC:
    """Give ``model``'s adapters (and, with ``fusion``, a ro + cs fusion for ro) non-zero weights, so that a wrong
    routing shows in the logits, and route it: the fusion, or ro's adapter alone. Returns ``model``."""
    for block in model.adapter_blocks.values():
        for param in block.parameters():
            torch.nn.init.normal_(param, std=0.1)
    if fusion:
        model.add_fusion(["ro", "cs"], target_language="ro")
        for param in (p for n, p in model.named_parameters() if "fusion" in n):
            torch.nn.init.normal_(param, std=0.1)
    else:
        model.set_target_language("ro")
    return model
