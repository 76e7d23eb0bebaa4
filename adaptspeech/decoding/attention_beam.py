"""Beam search over the LAS speller (``LASDecoder.step``), batched over utterances.

Length normalisation, end detection and the max-length guard are those of the engine,
:func:`~adaptspeech.decoding.beam_search.batch_beam_search`; with ``beam_size=1`` the result equals
:func:`~adaptspeech.decoding.attention_greedy.attention_greedy_decode`.
"""

from __future__ import annotations

import torch

from ..heads.las import LASDecoder, LASState
from .beam_search import Scorer, batch_beam_search
from .hypothesis import Hypothesis
from .inputs import encoder_frames
from .lengths import max_output_lengths

AttentionScorerState = tuple[LASState, torch.Tensor]


class AttentionScorer(Scorer):
    """Full scorer: the decoder's cumulative log-probability ``sum_i log P(y_i | x, y_<i)``.

    Args:
        decoder: the LAS head.
        encoder_hidden_states: ``[B, T, D]``.
        encoder_padding_mask: ``[B, T]`` True on real frames.
    """

    full = True

    def __init__(self, decoder: LASDecoder, encoder_hidden_states: torch.Tensor,
                 encoder_padding_mask: torch.Tensor) -> None:
        self.decoder = decoder
        self.encoder_hidden_states = encoder_hidden_states
        self.encoder_padding_mask = encoder_padding_mask

    def init_state(self) -> AttentionScorerState:
        state = self.decoder.init_state(self.encoder_hidden_states, self.encoder_padding_mask)
        return state, self.encoder_hidden_states.new_zeros(self.encoder_hidden_states.shape[0])

    def score(self, state: AttentionScorerState, last_tokens: torch.Tensor, candidates: torch.Tensor | None
              ) -> tuple[torch.Tensor, tuple[LASState, torch.Tensor]]:
        decoder_state, total = state
        log_probs, new_state = self.decoder.step(last_tokens, decoder_state)
        extended = total[:, None] + log_probs  # [N, V]
        return extended, (new_state, extended)

    def select(self, state: AttentionScorerState, pending: tuple[LASState, torch.Tensor], rows: torch.Tensor,
               positions: torch.Tensor, tokens: torch.Tensor) -> AttentionScorerState:
        new_state, extended = pending
        return self.decoder.select_state(new_state, rows), extended[rows, positions]


@torch.no_grad()
def attention_beam_search(
    decoder: LASDecoder,
    encoder_hidden_states: torch.Tensor,
    encoder_padding_mask: torch.Tensor | None = None,
    beam_size: int = 8,
    length_penalty: float = 1.0,
    max_length: int | None = None,
    max_length_ratio: float = 1.0,
    end_detection: bool = False,
    nbest: int = 1,
) -> list[list[Hypothesis]]:
    """Attention-only beam search.

    Args:
        decoder: the LAS head (in ``eval()`` mode).
        encoder_hidden_states: ``[B, T, D]``.
        encoder_padding_mask: ``[B, T]`` True on real frames; None = all real.
        beam_size: hypotheses kept per utterance.
        length_penalty: finished hypotheses are ranked by ``log P / (tokens + 1) ** length_penalty``.
        max_length, max_length_ratio: the max-length guard (see
            :func:`~adaptspeech.decoding.lengths.max_output_lengths`), capped by ``max_target_length``.
        end_detection: also stop by ESPnet's end detection.
        nbest: hypotheses returned per utterance.

    Returns:
        Per utterance, up to ``nbest`` hypotheses best first (``scores["attention"]`` = ``log P(y | x)``).
    """
    config = decoder.config
    mask, frames = encoder_frames(encoder_hidden_states, encoder_padding_mask)
    scorer = AttentionScorer(decoder, encoder_hidden_states, mask)
    return batch_beam_search(
        {"attention": scorer}, {"attention": 1.0},
        batch_size=encoder_hidden_states.shape[0], vocab_size=config.vocab_size,
        sos_id=config.sos_id, eos_id=config.eos_id,
        max_lengths=max_output_lengths(frames, max_length, max_length_ratio, config.max_target_length),
        beam_size=beam_size, length_penalty=length_penalty, end_detection=end_detection, nbest=nbest,
        device=encoder_hidden_states.device,
    )
