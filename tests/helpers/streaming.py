"""Helpers of the streaming tests: the encoder fed piece by piece (``encode_chunk``) and its chunk-masked whole forward,
adapters with weights that act, and a CTC head forced to one label while audio streams in (endpointing tests)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from adaptspeech import AdaptSpeechForCTC
from adaptspeech.attention.chunking import chunk_attention
from adaptspeech.testing import tiny_config

#: chunk by chunk and the masked whole forward add the same terms in another order (a cache concatenated to a
#: chunk, attention over fewer keys): float32 rounding, measured at most 4e-6 on these models
TOLERANCE = 1e-5


def streaming_model(backbone: str = "fbank_conformer", kind: str = "rel_pos", conv_lookahead: int | str = 0,
                    **config: object) -> AdaptSpeechForCTC:
    """A tiny model that streams (kernel-5 convolution, ``kind`` attention trained with dynamic chunks), eval mode."""
    overrides = {"conv_lookahead": conv_lookahead, "conv_depthwise_kernel_size": 5}
    if backbone == "wav2vec2_conformer":
        overrides["feat_extract_norm"] = "layer"
    attention = {"kind": kind, "dynamic_chunks": True, **({"context_width": 5} if kind == "ldsa" else {})}
    torch.manual_seed(0)
    model = AdaptSpeechForCTC(tiny_config(backbone, backbone_overrides=overrides, attention=attention, **config))
    return model.eval()


def stream(model: Any, inputs: torch.Tensor, piece: int, chunk_size: int, num_left_chunks: int, **kwargs: Any
           ) -> torch.Tensor:
    """``model.encode_chunk`` fed ``inputs`` ``[B, n, ...]`` ``piece`` input units at a time, then ``final=True``:
    the encoder output ``[B, T, D]`` of the whole stream (each call's output whole chunks until the end)."""
    cache, outputs = None, []
    for start in range(0, inputs.shape[1], piece):
        hidden, cache = model.encode_chunk(
            inputs[:, start : start + piece], cache, chunk_size=chunk_size, num_left_chunks=num_left_chunks, **kwargs
        )
        assert hidden.shape[1] % chunk_size == 0  # whole chunks only, until the end
        outputs.append(hidden)
    hidden, cache = model.encode_chunk(inputs[:, :0], cache, final=True)
    outputs.append(hidden)
    return torch.cat(outputs, dim=1)


def masked_forward(model: Any, inputs: torch.Tensor, chunk_size: int, num_left_chunks: int, **kwargs: Any
                   ) -> torch.Tensor:
    """The whole-utterance encoder output ``[B, T, D]`` under the chunk mask a stream uses."""
    with torch.no_grad(), chunk_attention(chunk_size, num_left_chunks):
        return model(**{model.main_input_name: inputs}, **kwargs).encoder_hidden_states


def randomise_adapters(model: Any) -> None:
    """Adapters start as the identity (zero up-projection): give them weights that change the output."""
    gen = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if "language_adapters" in name:
                param.copy_(torch.randn(param.shape, generator=gen) * 0.3)


def forced_speaker(recognizer: Any, head: torch.nn.Linear, audio: Callable[[float], np.ndarray]
                   ) -> Callable[[int, float], None]:
    """``say(label, seconds)``: ``seconds`` of ``audio`` into ``recognizer`` with the CTC output layer ``head`` (its
    weights zeroed by the caller) forced to ``label`` on every frame."""

    def say(label: int, seconds: float) -> None:
        with torch.no_grad():
            head.bias.fill_(0.0)
            head.bias[label] = 10.0
        recognizer.accept_waveform(audio(seconds))

    return say
