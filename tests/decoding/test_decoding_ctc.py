"""CTC greedy, CTC prefix beam search and the incremental CTC prefix scorer against brute force."""

from __future__ import annotations

import functools
import itertools
import math

import numpy as np
import pytest
import torch

from adaptspeech.decoding import CTCPrefixScorer, ctc_greedy_decode, ctc_prefix_beam_search

BLANK = 0


def collapse(path: tuple[int, ...], blank: int = BLANK) -> tuple[int, ...]:
    out = []
    previous = None
    for token in path:
        if token != previous and token != blank:
            out.append(token)
        previous = token
    return tuple(out)


def brute_force(log_probs: torch.Tensor) -> dict[tuple[int, ...], float]:
    """log p(y | x) of every label sequence, summing all V^T alignments explicitly."""
    frames, vocab = log_probs.shape
    table = log_probs.double().tolist()
    totals: dict[tuple[int, ...], float] = {}
    for path in itertools.product(range(vocab), repeat=frames):
        logp = sum(table[t][k] for t, k in enumerate(path))
        labels = collapse(path)
        before = totals.get(labels, -math.inf)
        high, low = max(before, logp), min(before, logp)
        totals[labels] = high + math.log1p(math.exp(low - high)) if low > -math.inf else high
    return totals


def brute_force_prefix(log_probs: torch.Tensor, prefix: tuple[int, ...]) -> float:
    """log of the probability that the collapsed output starts with ``prefix``."""
    matching = [v for y, v in brute_force(log_probs).items() if y[: len(prefix)] == prefix]
    return float(torch.logsumexp(torch.tensor(matching, dtype=torch.float64), 0)) if matching else -math.inf


def naive_prefix_score(x: torch.Tensor, g: tuple[int, ...], c: int) -> float:
    """Watanabe et al. (2017), Algorithm 2, with explicit loops over t, in probability space."""
    p = x.double().exp()
    frames = p.shape[0]

    def forward(prefix: tuple[int, ...]) -> tuple[list[float], list[float]]:
        # r^n_t, r^b_t of ``prefix`` for t = 1..T (index t-1), by the textbook CTC forward recursion
        r_n, r_b = [0.0] * frames, [0.0] * frames
        if not prefix:
            acc = 1.0
            for t in range(frames):
                acc *= float(p[t, BLANK])
                r_b[t] = acc
            return r_n, r_b
        parent_n, parent_b = forward(prefix[:-1])
        last = prefix[-1]
        r_n[0] = float(p[0, last]) if len(prefix) == 1 else 0.0
        for t in range(1, frames):
            phi = parent_b[t - 1] + (0.0 if len(prefix) > 1 and prefix[-2] == last else parent_n[t - 1])
            r_n[t] = (r_n[t - 1] + phi) * float(p[t, last])
            r_b[t] = (r_b[t - 1] + r_n[t - 1]) * float(p[t, BLANK])
        return r_n, r_b

    g_n, g_b = forward(g)
    psi = float(p[0, c]) if not g else 0.0
    for t in range(1, frames):
        phi = g_b[t - 1] + (0.0 if g and g[-1] == c else g_n[t - 1])
        psi += phi * float(p[t, c])
    return math.log(psi) if psi > 0 else -math.inf


def random_log_probs(*shape: int, seed: int, sharpness: float = 1.5) -> torch.Tensor:
    # float64: the prefix probability assumes every frame sums to 1, which float32 only does to ~1e-7
    generator = torch.Generator().manual_seed(seed)
    return torch.log_softmax(sharpness * torch.randn(*shape, generator=generator, dtype=torch.float64), dim=-1)


def test_ctc_greedy_matches_a_loop_and_respects_lengths():
    log_probs = random_log_probs(3, 9, 5, seed=0)
    lengths = torch.tensor([9, 4, 1])
    expected = []
    for b in range(3):
        best = [int(log_probs[b, t].argmax()) for t in range(int(lengths[b]))]
        expected.append(list(collapse(tuple(best))))
    assert ctc_greedy_decode(log_probs, lengths) == expected


def test_ctc_greedy_merges_repeats_but_not_across_blanks():
    path = [1, 1, 0, 1, 2, 2, 0, 0, 3]
    log_probs = torch.full((1, len(path), 4), -10.0)
    log_probs[0, torch.arange(len(path)), torch.tensor(path)] = 0.0
    assert ctc_greedy_decode(log_probs) == [[1, 1, 2, 3]]


@pytest.mark.parametrize(("frames", "vocab", "seed"), [(4, 3, 0), (5, 3, 1), (4, 4, 2), (6, 3, 3)])
def test_prefix_beam_search_equals_brute_force(frames, vocab, seed):
    log_probs = random_log_probs(1, frames, vocab, seed=seed)
    exact = sorted(brute_force(log_probs[0]).items(), key=lambda item: item[1], reverse=True)
    hyps = ctc_prefix_beam_search(log_probs, beam_size=vocab**frames, token_prune=vocab, nbest=5)[0]
    assert [tuple(h.tokens) for h in hyps] == [y for y, _ in exact[:5]]
    for hyp, (_, logp) in zip(hyps, exact):
        assert hyp.log_prob == pytest.approx(logp, abs=1e-5)
        assert hyp.score == hyp.log_prob


def test_prefix_beam_search_sums_alignments_where_greedy_does_not():
    # Best path is "blank blank" (p = 0.36) but "a" collects 0.6*0.4 + 0.4*0.6 + 0.4*0.4 = 0.64.
    probs = torch.tensor([[[0.6, 0.4], [0.6, 0.4]]])
    log_probs = probs.log()
    assert ctc_greedy_decode(log_probs) == [[]]
    best = ctc_prefix_beam_search(log_probs, beam_size=4)[0][0]
    assert best.tokens == [1]
    assert best.log_prob == pytest.approx(math.log(0.64), abs=1e-6)


def test_prefix_beam_search_ignores_padded_frames():
    log_probs = random_log_probs(2, 7, 4, seed=5)
    lengths = torch.tensor([7, 4])
    batched = ctc_prefix_beam_search(log_probs, lengths, beam_size=4, nbest=3)
    alone = ctc_prefix_beam_search(log_probs[1:, :4], beam_size=4, nbest=3)
    assert [h.tokens for h in batched[1]] == [h.tokens for h in alone[0]]
    assert [h.log_prob for h in batched[1]] == pytest.approx([h.log_prob for h in alone[0]])


def test_prefix_beam_search_rejects_bad_input():
    with pytest.raises(ValueError, match="lengths row 1"):
        ctc_prefix_beam_search(random_log_probs(2, 3, 3, seed=0), torch.tensor([3, 4]))
    with pytest.raises(ValueError, match="blank_id=5"):
        ctc_prefix_beam_search(random_log_probs(1, 3, 3, seed=0), blank_id=5)
    with pytest.raises(ValueError, match="frames, vocab"):
        ctc_prefix_beam_search(torch.zeros(3, 3))
    with pytest.raises(ValueError, match="token_min_logp=1"):
        ctc_prefix_beam_search(random_log_probs(1, 3, 3, seed=0), token_min_logp=1.0)
    with pytest.raises(ValueError, match="beam_prune_logp=nan"):
        ctc_prefix_beam_search(random_log_probs(1, 3, 3, seed=0), beam_prune_logp=math.nan)


def _add_alignments(following: dict[tuple[int, ...], tuple[float, float]], prefix: tuple[int, ...],
                    p_b: float = -math.inf, p_nb: float = -math.inf) -> None:
    b, nb = following.get(prefix, (-math.inf, -math.inf))
    following[prefix] = (float(np.logaddexp(b, p_b)), float(np.logaddexp(nb, p_nb)))


def plain_prefix_beam_search(
    log_probs: torch.Tensor, beam: int, token_prune: int, token_min_logp: float = -math.inf,
    beam_prune_logp: float = -math.inf,
) -> list[tuple[tuple[int, ...], float]]:
    """The search without shortcuts on ``[T, V]``: every beam prefix extended by every tried label (the ``k``
    most likely, blank counted, at or above ``token_min_logp`` or the frame's best), merged, sorted, cut to
    ``beam`` and to ``beam_prune_logp`` below the best; zero-probability prefixes dropped."""
    beams: dict[tuple[int, ...], tuple[float, float]] = {(): (0.0, -math.inf)}
    for frame in log_probs.double().tolist():
        ranked = sorted(range(len(frame)), key=frame.__getitem__, reverse=True)
        tried = [c for c in ranked[:token_prune] if c != BLANK and (frame[c] >= token_min_logp or c == ranked[0])]
        following: dict[tuple[int, ...], tuple[float, float]] = {}
        add = functools.partial(_add_alignments, following)
        for prefix, (p_b, p_nb) in beams.items():
            total = float(np.logaddexp(p_b, p_nb))
            add(prefix, p_b=total + frame[BLANK])
            for c in tried:
                if prefix and prefix[-1] == c:
                    add(prefix, p_nb=p_nb + frame[c])
                    add((*prefix, c), p_nb=p_b + frame[c])
                else:
                    add((*prefix, c), p_nb=total + frame[c])
        scored = sorted(((float(np.logaddexp(*v)), y) for y, v in following.items()), reverse=True)[:beam]
        beams = {y: following[y] for s, y in scored if s > -math.inf and s >= scored[0][0] + beam_prune_logp}
    return sorted(((y, float(np.logaddexp(*v))) for y, v in beams.items()), key=lambda item: item[1], reverse=True)


PRUNING = [  # (beam, token_prune, token_min_logp, beam_prune_logp)
    (1, None, -math.inf, -math.inf), (2, None, -math.inf, -math.inf), (3, 2, -math.inf, -math.inf),
    (4, 5, -math.inf, -math.inf), (6, 3, -math.inf, -math.inf), (4, 5, -1.5, -math.inf), (5, 5, -3.0, -2.0),
    (6, 5, -math.inf, -1.0), (3, None, -0.5, -4.0),
]


@pytest.mark.parametrize(("beam", "token_prune", "token_min_logp", "beam_prune_logp"), PRUNING)
def test_prefix_beam_search_equals_the_plain_search_where_pruning_bites(beam, token_prune, token_min_logp,
                                                                        beam_prune_logp):
    # the early stop (bound log p(y) + log p_t(c) against the beam-th best) keeps exactly the plain search's beam
    for seed in range(8):
        log_probs = random_log_probs(1, 12, 5, seed=seed, sharpness=(0.7, 2.0, 5.0)[seed % 3])
        expected = plain_prefix_beam_search(log_probs[0], beam, beam if token_prune is None else token_prune,
                                            token_min_logp, beam_prune_logp)
        hyps = ctc_prefix_beam_search(log_probs, beam_size=beam, token_prune=token_prune, nbest=beam,
                                      token_min_logp=token_min_logp, beam_prune_logp=beam_prune_logp)[0]
        assert [tuple(h.tokens) for h in hyps] == [y for y, _ in expected]
        assert [h.log_prob for h in hyps] == pytest.approx([s for _, s in expected], abs=1e-9)


def test_pruning_thresholds_that_cannot_bite_give_the_exact_search():
    frames, vocab = 5, 3
    for seed in range(3):
        log_probs = random_log_probs(1, frames, vocab, seed=seed)
        exact = sorted(brute_force(log_probs[0]).items(), key=lambda item: item[1], reverse=True)
        lowest = float(log_probs.min())
        hyps = ctc_prefix_beam_search(log_probs, beam_size=vocab**frames, token_prune=vocab, nbest=len(exact),
                                      token_min_logp=lowest - 1.0, beam_prune_logp=-1e6)[0]
        assert [tuple(h.tokens) for h in hyps] == [y for y, _ in exact]
        assert [h.log_prob for h in hyps] == pytest.approx([p for _, p in exact], abs=1e-9)


def test_token_min_logp_drops_unlikely_labels_but_keeps_each_frames_best():
    probs = torch.tensor([[0.5, 0.45, 0.05], [0.5, 0.05, 0.45], [0.5, 0.45, 0.05]])
    log_probs = probs.log()[None]
    everything = {tuple(h.tokens) for h in ctc_prefix_beam_search(log_probs, beam_size=27, token_prune=3, nbest=27)[0]}
    pruned = ctc_prefix_beam_search(log_probs, beam_size=27, token_prune=3, nbest=27, token_min_logp=math.log(0.1))[0]
    assert {tuple(h.tokens) for h in pruned} == {(), (1,), (2,), (1, 1), (1, 2), (2, 1), (1, 2, 1)} < everything
    flat = torch.log_softmax(torch.linspace(0.0, 0.1, 200), dim=0)  # every label below log p -5, blank 0 lowest
    best = ctc_prefix_beam_search(flat.expand(1, 1, 200), beam_size=4, token_min_logp=-5.0, nbest=4)[0]
    assert [h.tokens for h in best] == [[199], []]


def test_beam_prune_logp_keeps_prefixes_near_the_best_only():
    log_probs = random_log_probs(1, 10, 4, seed=7, sharpness=3.0)
    full = ctc_prefix_beam_search(log_probs, beam_size=16, nbest=16)[0]
    pruned = ctc_prefix_beam_search(log_probs, beam_size=16, nbest=16, beam_prune_logp=-2.0)[0]
    assert pruned[0].tokens == full[0].tokens
    assert all(h.log_prob >= pruned[0].log_prob - 2.0 for h in pruned)
    assert 1 <= len(pruned) < len(full) == 16


@pytest.mark.parametrize(("frames", "vocab"), [(8, 5), (3, 5)])  # the beam of 64 full / not full
def test_prefix_beam_search_never_keeps_impossible_prefixes(frames, vocab):
    log_probs = random_log_probs(1, frames, vocab, seed=3)
    log_probs[0, :, 3] = -math.inf  # a masked label
    log_probs[0, 1, BLANK] = -math.inf  # the empty prefix becomes impossible
    hyps = ctc_prefix_beam_search(log_probs, beam_size=64, token_prune=vocab, nbest=64)[0]
    assert hyps and all(3 not in h.tokens and h.tokens and math.isfinite(h.log_prob) for h in hyps)
    expected = plain_prefix_beam_search(log_probs[0], 64, vocab)
    assert [tuple(h.tokens) for h in hyps] == [y for y, _ in expected]
    assert [h.log_prob for h in hyps] == pytest.approx([s for _, s in expected], abs=1e-9)
    assert ctc_prefix_beam_search(torch.full((1, 2, 3), -math.inf), beam_size=4) == [[]]  # nothing is possible


def _scorer_state(scorer: CTCPrefixScorer, prefix: tuple[int, ...], rows: int = 1):
    """The scorer state of ``prefix`` (row 0 .. rows-1 = utterances), built by scoring and selecting."""
    state = scorer.init_state()
    for token in prefix:
        candidates = torch.full((rows, 1), token)
        _, pending = scorer.score(state, None, candidates)
        index = torch.arange(rows)
        state = scorer.select(state, pending, index, torch.zeros(rows, dtype=torch.long), candidates[:, 0])
    return state


def test_prefix_scorer_matches_algorithm_2_loops_and_brute_force():
    frames, vocab, eos = 5, 4, 3
    log_probs = random_log_probs(1, frames, vocab, seed=7)
    scorer = CTCPrefixScorer(log_probs, blank_id=BLANK, eos_id=eos)
    candidates = torch.tensor([[1, 2, eos, BLANK]])
    for prefix in [(), (1,), (2,), (1, 1), (1, 2), (2, 1, 2)]:
        psi, _ = scorer.score(_scorer_state(scorer, prefix), None, candidates)
        for column, c in enumerate([1, 2]):
            expected = brute_force_prefix(log_probs[0], (*prefix, c))
            assert float(psi[0, column]) == pytest.approx(naive_prefix_score(log_probs[0], prefix, c), abs=1e-9)
            assert float(psi[0, column]) == pytest.approx(expected, abs=1e-9)
        full = brute_force(log_probs[0]).get(prefix, -math.inf)
        assert float(psi[0, 2]) == pytest.approx(full, abs=1e-9)  # </s>: p(g | x)
        assert psi[0, 3] == -math.inf  # blank is never a label


def test_prefix_scorer_rows_of_different_lengths_match_single_utterances():
    frames, vocab, eos = 6, 4, 3
    log_probs = random_log_probs(2, frames, vocab, seed=11)
    lengths = torch.tensor([6, 4])
    batched = CTCPrefixScorer(log_probs, lengths, blank_id=BLANK, eos_id=eos)
    candidates = torch.tensor([[1, 2, eos], [1, 2, eos]])
    psi, _ = batched.score(_scorer_state(batched, (2,), rows=2), None, candidates)
    for row in range(2):
        alone = CTCPrefixScorer(log_probs[row : row + 1, : int(lengths[row])], blank_id=BLANK, eos_id=eos)
        expected, _ = alone.score(_scorer_state(alone, (2,)), None, candidates[:1])
        torch.testing.assert_close(psi[row], expected[0], rtol=0, atol=1e-9)


def test_prefix_scorer_survives_zero_probabilities():
    log_probs = random_log_probs(1, 5, 4, seed=3)
    log_probs[0, :, 2] = -math.inf  # label 2 impossible
    scorer = CTCPrefixScorer(log_probs, blank_id=BLANK, eos_id=3)
    state = _scorer_state(scorer, (1, 2))
    psi, _ = scorer.score(_scorer_state(scorer, (1,)), None, torch.tensor([[1, 2, 3]]))
    assert not torch.isnan(psi).any() and not torch.isnan(state.r_n).any() and not torch.isnan(state.r_b).any()
    assert float(psi[0, 1]) < -1e3  # floored, not NaN
    assert float(psi[0, 0]) == pytest.approx(naive_prefix_score(log_probs[0], (1,), 1), abs=1e-9)


def test_prefix_scorer_rejects_blank_as_eos():
    with pytest.raises(ValueError, match="blank_id and eos_id"):
        CTCPrefixScorer(random_log_probs(1, 3, 3, seed=0), blank_id=0, eos_id=0)
