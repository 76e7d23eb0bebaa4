"""Model outputs: every loss term reported on its own so a trainer can log it."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from transformers.utils import ModelOutput


@dataclass
class AdaptSpeechOutput(ModelOutput):
    """Output of the adaptspeech models.

    Args:
        loss: the total training loss (scalar), when labels are given.
        loss_ctc: CTC loss (scalar), CTC heads.
        loss_att: attention-decoder cross-entropy (scalar), heads with an attention decoder.
        loss_fusion_reg: ``reg_weight * sum_layers sum_ij (I - W_V)_ij^2`` (scalar), when the fusion is active.
        loss_fusion_guide: ``guide_weight * sum_layers guide loss`` (scalar), when the guide loss is on.
        logits: CTC logits [B, T, V].
        attention_logits: attention-decoder logits [B, L+1, V].
        frame_lengths: valid encoder frames per utterance [B].
        encoder_hidden_states: last encoder hidden states [B, T, D].
        hidden_states: per-layer hidden states when asked for.
        fusion_weights: per fused layer, the SimAdapter attention over the languages [B, T, N].
        loss_lid: language-ID cross-entropy (scalar), when ``lid_targets`` are given.
        lid_logits: language-ID logits [B, L] over ``config.lid_languages``, when ``lid_targets`` are given.
        loss_distill: ``attention.chunk_distillation * KL(p_full || p_chunk)`` (scalar), in the chunked training
            batches of in-place distillation (:func:`~adaptspeech.heads.ctc.chunk_distillation_kl`).
    """

    loss: torch.Tensor | None = None
    loss_ctc: torch.Tensor | None = None
    loss_att: torch.Tensor | None = None
    loss_fusion_reg: torch.Tensor | None = None
    loss_fusion_guide: torch.Tensor | None = None
    logits: torch.Tensor | None = None
    attention_logits: torch.Tensor | None = None
    frame_lengths: torch.Tensor | None = None
    encoder_hidden_states: torch.Tensor | None = None
    hidden_states: tuple[torch.Tensor, ...] | None = None
    fusion_weights: tuple[torch.Tensor, ...] | None = None
    loss_lid: torch.Tensor | None = None
    lid_logits: torch.Tensor | None = None
    loss_distill: torch.Tensor | None = None
