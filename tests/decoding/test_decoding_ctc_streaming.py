"""Greedy and prefix beam CTC search carried across chunks equal the offline search on the same posteriors (the same
computation: compared exactly), whatever the chunking, with partial results along the way."""

from __future__ import annotations

import pytest
import torch

from adaptspeech.decoding import ctc_greedy_decode, ctc_prefix_beam_search
from adaptspeech.decoding.ctc_streaming import StreamingCTCGreedy, StreamingCTCPrefixBeam


def posteriors(frames: int, vocab: int, seed: int) -> torch.Tensor:
    """Peaky log-probabilities ``[T, V]`` with blanks and repeats, like a trained CTC model's."""
    gen = torch.Generator().manual_seed(seed)
    logits = torch.randn(frames, vocab, generator=gen)
    logits[:, 0] += 1.5  # blank-dominated
    return logits.log_softmax(-1)


def pieces(frames: int, seed: int) -> list[tuple[int, int]]:
    gen = torch.Generator().manual_seed(seed)
    bounds, start = [], 0
    while start < frames:
        size = int(torch.randint(0, 7, (1,), generator=gen))  # empty pieces too
        bounds.append((start, min(frames, start + size)))
        start += size
    return bounds


@pytest.mark.parametrize("seed", range(6))
def test_streaming_greedy_equals_offline(seed: int) -> None:
    log_probs = posteriors(60, 7, seed)
    search = StreamingCTCGreedy(blank_id=0)
    for start, stop in pieces(60, seed):
        partial = search.accept(log_probs[start:stop])
        assert partial == ctc_greedy_decode(log_probs[None, :stop])[0]  # every partial is the prefix decoded so far
    assert search.partial() == ctc_greedy_decode(log_probs[None])[0]


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize(("beam_size", "token_prune", "beam_prune_logp"), [(4, None, float("-inf")), (8, 3, -6.0)])
def test_streaming_prefix_beam_equals_offline(seed: int, beam_size: int, token_prune, beam_prune_logp) -> None:
    log_probs = posteriors(50, 6, seed)
    settings = dict(beam_size=beam_size, blank_id=0, token_prune=token_prune, beam_prune_logp=beam_prune_logp)
    search = StreamingCTCPrefixBeam(6, **settings)
    for start, stop in pieces(50, seed):
        partial = search.accept(log_probs[start:stop])
        offline = ctc_prefix_beam_search(log_probs[None, :stop], **settings)[0][0]
        assert (partial.tokens, partial.score) == (offline.tokens, offline.score)
    offline = ctc_prefix_beam_search(log_probs[None], nbest=3, **settings)[0]
    assert search.nbest(3) == offline


def test_bad_input_is_refused() -> None:
    search = StreamingCTCPrefixBeam(6)
    with pytest.raises(ValueError, match="has 5 labels per frame; this search has 6"):
        search.accept(torch.zeros(3, 5))
    with pytest.raises(ValueError, match=r"must be \[frames, vocab\] or \[1, frames, vocab\]"):
        StreamingCTCGreedy().accept(torch.zeros(2, 3, 5))
    assert search.partial().tokens == [] and search.accept(torch.zeros(0, 6)).tokens == []
