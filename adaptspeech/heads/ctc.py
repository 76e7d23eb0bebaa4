"""CTC head: dropout -> Linear(d, V) over encoder frames, with HF's CTC loss conventions."""

from __future__ import annotations

import torch
from torch import nn

CTC_REDUCTIONS = ("mean", "sum")


class CTCHead(nn.Module):
    """Frame-level character classifier trained with CTC.

    Args:
        hidden_size (`int`): encoder width ``d``.
        vocab_size (`int`): output vocabulary ``V`` including the blank.
        blank_id (`int`, defaults to 0): the blank symbol (transformers uses the tokenizer's pad id).
        dropout (`float`, defaults to 0.0): dropout before the projection.
        reduction (`str`, defaults to ``"mean"``): ``"mean"`` (per-utterance loss divided by target length, then
            averaged, as ``torch.nn.functional.ctc_loss``) or ``"sum"``.
        zero_infinity (`bool`, defaults to `True`): zero infinite losses of impossible alignments.
    """

    def __init__(
        self,
        hidden_size: int,
        vocab_size: int,
        blank_id: int = 0,
        dropout: float = 0.0,
        reduction: str = "mean",
        zero_infinity: bool = True,
    ) -> None:
        super().__init__()
        if reduction not in CTC_REDUCTIONS:
            raise ValueError(f"ctc_loss_reduction {reduction!r} unknown; allowed values: {', '.join(CTC_REDUCTIONS)}")
        if not 0 <= blank_id < vocab_size:
            raise ValueError(f"CTC blank id {blank_id} is outside the vocabulary of size {vocab_size}")
        self.blank_id = blank_id
        self.reduction = reduction
        self.zero_infinity = zero_infinity
        self.dropout = nn.Dropout(dropout)
        self.lm_head = nn.Linear(hidden_size, vocab_size)

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        """[B, T, D] -> logits [B, T, V]."""
        return self.lm_head(self.dropout(hidden_states))

    def loss(self, logits: torch.Tensor, frame_lengths: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        """CTC loss.

        Args:
            logits: [B, T, V].
            frame_lengths: valid frames per utterance [B].
            labels: [B, L] padded with -100 (any negative value).

        Raises:
            ValueError: if a label id is outside the vocabulary.
        """
        vocab_size = logits.shape[-1]
        if labels.max() >= vocab_size:
            raise ValueError(f"label id {int(labels.max())} is outside the CTC vocabulary of size {vocab_size}")
        label_mask = labels >= 0
        target_lengths = label_mask.sum(-1)
        flat_targets = labels.masked_select(label_mask)
        log_probs = nn.functional.log_softmax(logits, dim=-1, dtype=torch.float32).transpose(0, 1)
        with torch.backends.cudnn.flags(enabled=False):
            return nn.functional.ctc_loss(
                log_probs,
                flat_targets,
                frame_lengths,
                target_lengths,
                blank=self.blank_id,
                reduction=self.reduction,
                zero_infinity=self.zero_infinity,
            )
