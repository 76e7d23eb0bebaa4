"""Greedy (argmax) decoding of the LAS speller, batched over utterances."""

from __future__ import annotations

import torch

from ..heads.las import LASDecoder
from .inputs import encoder_frames
from .lengths import max_output_lengths


@torch.no_grad()
def attention_greedy_decode(
    decoder: LASDecoder,
    encoder_hidden_states: torch.Tensor,
    encoder_padding_mask: torch.Tensor | None = None,
    max_length: int | None = None,
    max_length_ratio: float = 1.0,
) -> list[list[int]]:
    """Feed back the argmax until ``</s>`` or the utterance's maximum length.

    Args:
        decoder: the LAS head (put the model in ``eval()`` mode first: dropout would randomise it).
        encoder_hidden_states: ``[B, T, D]``.
        encoder_padding_mask: ``[B, T]`` True on real frames; None = all real.
        max_length, max_length_ratio: see :func:`~adaptspeech.decoding.lengths.max_output_lengths`
            (capped by ``LASConfig.max_target_length``).

    Returns:
        Label ids per utterance (without ``</s>``).
    """
    config = decoder.config
    batch = encoder_hidden_states.shape[0]
    encoder_padding_mask, lengths = encoder_frames(encoder_hidden_states, encoder_padding_mask)
    limits = max_output_lengths(lengths, max_length, max_length_ratio, config.max_target_length).tolist()
    state = decoder.init_state(encoder_hidden_states, encoder_padding_mask)
    prev = torch.full((batch,), config.sos_id, dtype=torch.long, device=encoder_hidden_states.device)
    outputs: list[list[int]] = [[] for _ in range(batch)]
    running = [True] * batch
    for _ in range(max(limits)):
        log_probs, state = decoder.step(prev, state)
        prev = log_probs.argmax(dim=-1)
        for b, token in enumerate(prev.tolist()):
            if not running[b]:
                continue
            if token == config.eos_id:
                running[b] = False
            else:
                outputs[b].append(token)
                running[b] = len(outputs[b]) < limits[b]
        if not any(running):
            break
    return outputs
