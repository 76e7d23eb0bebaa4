"""One-pass joint CTC/attention beam search (Watanabe et al., 2017; ESPnet's hybrid decoding).

Each hypothesis is ranked by ``lambda * log psi_ctc(h) + (1 - lambda) * log P_att(h)``, where psi_ctc is the
CTC prefix score (:mod:`~adaptspeech.decoding.ctc_prefix_score`) and ``lambda`` is ``ctc_weight``, set
at decode time. As in ESPnet, the attention decoder proposes ``pre_beam_size`` candidates per hypothesis
and only those get CTC prefix scores; at ``ctc_weight == 1`` the decoder is not run and every label is a
candidate; at ``ctc_weight == 0`` the CTC scorer is not run, so the search is exactly
:func:`~adaptspeech.decoding.attention_beam.attention_beam_search`.
"""

from __future__ import annotations

import torch

from ..heads.las import LASDecoder
from .attention_beam import AttentionScorer
from .beam_search import Scorer, batch_beam_search
from .ctc_prefix_score import CTCPrefixScorer
from .hypothesis import Hypothesis
from .inputs import check_log_probs, encoder_frames
from .lengths import max_output_lengths


@torch.no_grad()
def joint_beam_search(
    decoder: LASDecoder | None,
    encoder_hidden_states: torch.Tensor | None,
    encoder_padding_mask: torch.Tensor | None,
    ctc_log_probs: torch.Tensor,
    ctc_lengths: torch.Tensor | None = None,
    ctc_weight: float = 0.3,
    beam_size: int = 8,
    length_penalty: float = 1.0,
    pre_beam_size: int | None = None,
    max_length: int | None = None,
    max_length_ratio: float = 1.0,
    end_detection: bool = False,
    nbest: int = 1,
    blank_id: int = 0,
    sos_id: int | None = None,
    eos_id: int | None = None,
) -> list[list[Hypothesis]]:
    """Joint CTC/attention beam search.

    Args:
        decoder: the LAS head (``eval()`` mode); may be None only with ``ctc_weight == 1``.
        encoder_hidden_states: ``[B, T, D]`` input of the LAS head (None with ``ctc_weight == 1``).
        encoder_padding_mask: ``[B, T]`` True on real frames; None = all real.
        ctc_log_probs: ``[B, T_ctc, V]`` log-softmax of the CTC head (same vocabulary as the decoder).
        ctc_lengths: ``[B]`` real CTC frames; None = from ``encoder_padding_mask`` if its T matches,
            else T_ctc.
        ctc_weight: lambda in [0, 1].
        beam_size, length_penalty, max_length, max_length_ratio, end_detection, nbest: as in
            :func:`~adaptspeech.decoding.attention_beam.attention_beam_search` (the ratio counts CTC frames
            when there is no decoder).
        pre_beam_size: candidates per hypothesis proposed by the decoder; None = ``int(1.5 * beam_size)``.
        blank_id: the CTC blank (never emitted).
        sos_id, eos_id: default to the decoder's; required without a decoder (``sos_id`` defaults to
            ``eos_id``).

    Returns:
        Per utterance, up to ``nbest`` hypotheses best first, with ``scores["ctc"]`` (log psi of the
        hypothesis + ``</s>``, i.e. ``log p_ctc(y | x)``) and ``scores["attention"]``.
    """
    if not 0.0 <= ctc_weight <= 1.0:
        raise ValueError(f"ctc_weight={ctc_weight}; allowed values: numbers in [0, 1]")
    use_attention = ctc_weight < 1.0
    if use_attention and (decoder is None or encoder_hidden_states is None):
        raise ValueError(f"ctc_weight={ctc_weight} < 1 needs the decoder and encoder_hidden_states")
    vocab_size = ctc_log_probs.shape[-1]
    if decoder is not None:
        config = decoder.config
        if config.vocab_size != vocab_size:
            raise ValueError(f"ctc_log_probs has {vocab_size} classes but LASConfig.vocab_size is "
                             f"{config.vocab_size}; joint decoding needs one shared vocabulary")
        sos_id = config.sos_id if sos_id is None else sos_id
        eos_id = config.eos_id if eos_id is None else eos_id
    if eos_id is None:
        raise ValueError("joint_beam_search without a decoder needs eos_id")
    sos_id = eos_id if sos_id is None else sos_id

    frames = None
    mask = None
    if encoder_hidden_states is not None and decoder is not None:
        mask, frames = encoder_frames(encoder_hidden_states, encoder_padding_mask)
        if ctc_lengths is None and ctc_log_probs.shape[1] == encoder_hidden_states.shape[1]:
            ctc_lengths = frames
    ctc_lengths = check_log_probs(ctc_log_probs, ctc_lengths, "ctc_log_probs")
    device = ctc_log_probs.device
    scorers: dict[str, Scorer] = {}
    weights: dict[str, float] = {}
    if use_attention:
        scorers["attention"] = AttentionScorer(decoder, encoder_hidden_states, mask)
        weights["attention"] = 1.0 - ctc_weight
    if ctc_weight > 0.0:
        scorers["ctc"] = CTCPrefixScorer(ctc_log_probs, ctc_lengths, blank_id=blank_id, eos_id=eos_id)
        weights["ctc"] = ctc_weight
    cap = decoder.config.max_target_length if decoder is not None else None
    limits = max_output_lengths(frames if frames is not None else ctc_lengths.to(device), max_length,
                                max_length_ratio, cap)
    return batch_beam_search(
        scorers, weights, batch_size=ctc_log_probs.shape[0], vocab_size=vocab_size, sos_id=sos_id,
        eos_id=eos_id, max_lengths=limits, beam_size=beam_size, length_penalty=length_penalty,
        pre_beam_size=pre_beam_size, end_detection=end_detection, nbest=nbest, device=device,
    )
