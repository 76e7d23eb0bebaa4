"""LAS attention against Chan et al. 2016 ("Listen, Attend and Spell"): the paper's equations, masking, the variants and
the gradient of its content attention."""

from __future__ import annotations

import pytest
import torch

from adaptspeech.heads.las_attention import (
    ContentAttention,
    LocationAwareAttention,
    LocationAwareMultiHeadAttention,
    MultiHeadContentAttention,
    build_las_attention,
    masked_softmax,
)
from adaptspeech.heads.las_config import LASConfig

A, B, K, T = 6, 4, 8, 7  # decoder state, memory width, attention width, frames
VARIANTS = {
    (1, False): ContentAttention,
    (2, False): MultiHeadContentAttention,
    (1, True): LocationAwareAttention,
    (2, True): LocationAwareMultiHeadAttention,
}


def build(heads: int = 1, location: bool = False, seed: int = 0) -> ContentAttention:
    torch.manual_seed(seed)
    config = LASConfig(decoder_hidden=A, encoder_hidden_size=B, attention_dim=K, attention_heads=heads,
                       location_aware=location, location_kernel_size=3, location_channels=2)
    return build_las_attention(config, B).double()


def inputs(lengths: list[int], seed: int = 1):
    generator = torch.Generator().manual_seed(seed)
    n = len(lengths)
    s = torch.randn(n, A, generator=generator, dtype=torch.float64)
    h = torch.randn(n, T, B, generator=generator, dtype=torch.float64)
    mask = torch.arange(T)[None, :] < torch.tensor(lengths)[:, None]
    previous = torch.rand(n, T, generator=generator, dtype=torch.float64) * mask
    previous = previous / previous.sum(1, keepdim=True)
    return s, h, mask, previous


def naive(attention: ContentAttention, s, h, mask, previous):
    """The paper's equations with explicit loops: z_iu = sum_k phi_k psi_uk, softmax over real u, c = sum alpha h.

    Heads split k (and the value projection's output) into equal slices; location features are
    ``L (F * alpha_prev)`` with a same-padded convolution.
    """
    W, U = attention.phi.weight, attention.psi.weight
    heads = attention.heads
    n = s.shape[0]
    contexts = torch.zeros(n, B, dtype=s.dtype)
    weights = torch.zeros(n, T, dtype=s.dtype)
    for b in range(n):
        phi = [sum(W[k, a] * s[b, a] for a in range(A)) for k in range(K)]
        psi = [[sum(U[k, j] * h[b, u, j] for j in range(B)) for k in range(K)] for u in range(T)]
        if isinstance(attention, LocationAwareAttention):
            conv, proj = attention.location_conv.weight, attention.location_proj.weight
            width = conv.shape[-1]
            for u in range(T):
                f = [sum(conv[ch, 0, j] * previous[b, u + j - width // 2]
                         for j in range(width) if 0 <= u + j - width // 2 < T) for ch in range(conv.shape[0])]
                for k in range(K):
                    psi[u][k] = psi[u][k] + sum(proj[k, ch] * f[ch] for ch in range(len(f)))
        values = h[b] @ attention.value_proj.weight.T if heads > 1 else h[b]
        for head in range(heads):
            ks = range(head * K // heads, (head + 1) * K // heads)
            z = [sum(phi[k] * psi[u][k] for k in ks) for u in range(T)]
            real = [u for u in range(T) if mask[b, u]]
            denominator = sum(torch.exp(z[u]) for u in real)
            alpha = [torch.exp(z[u]) / denominator if mask[b, u] else torch.zeros((), dtype=s.dtype)
                     for u in range(T)]
            columns = slice(head * B // heads, (head + 1) * B // heads)
            contexts[b, columns] = sum(alpha[u] * values[u, columns] for u in range(T))
            weights[b] += torch.stack(alpha) / heads
    return contexts, weights


@pytest.mark.parametrize(("variant", "cls"), list(VARIANTS.items()))
def test_variants_match_the_papers_equations(variant, cls):
    attention = build(*variant)
    assert type(attention) is cls
    s, h, mask, previous = inputs([7, 4, 1])
    context, weights = attention(s, attention.prepare(h, mask), previous)
    expected_context, expected_weights = naive(attention, s, h, mask, previous)
    torch.testing.assert_close(context, expected_context)
    torch.testing.assert_close(weights, expected_weights)


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_weights_sum_to_one_and_are_exactly_zero_on_padding(variant):
    attention = build(*variant)
    s, h, mask, previous = inputs([7, 3, 1, 5])
    _, weights = attention(s, attention.prepare(h, mask), previous)
    assert (weights[~mask] == 0).all()
    torch.testing.assert_close(weights.sum(-1), torch.ones(4, dtype=weights.dtype))
    assert (weights[mask] > 0).all()


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_padded_frames_cannot_change_the_context(variant):
    attention = build(*variant)
    s, h, mask, previous = inputs([7, 3])
    context, weights = attention(s, attention.prepare(h, mask), previous)
    h2 = h.clone()
    h2[1, 3:] = 1e4 * torch.randn(4, B, dtype=h.dtype)
    context2, weights2 = attention(s, attention.prepare(h2, mask), previous)
    assert torch.equal(weights, weights2)  # the same computation: padded frames meet exact zero weights only
    assert torch.equal(context, context2)


def test_masked_softmax_of_a_fully_padded_row_is_zero_not_nan():
    scores = torch.randn(2, 4)
    mask = torch.tensor([[True, True, False, False], [False, False, False, False]])
    weights = masked_softmax(scores, mask)
    assert torch.equal(weights[1], torch.zeros(4))
    torch.testing.assert_close(weights[0].sum(), torch.tensor(1.0))


def test_gradient_of_w_and_u_follows_the_chain_rule():
    """dE/dW and dE/dU by the chain rule (sums over b, v, u written out) against autograd."""
    attention = build(1, False)
    s, h, mask, previous = inputs([7])
    G = torch.randn(B, dtype=s.dtype)  # E = <G, c_i>, so dE/dc_ib = G_b
    context, _ = attention(s, attention.prepare(h, mask), previous)
    (context[0] @ G).backward()
    with torch.no_grad():
        W, U = attention.phi.weight, attention.psi.weight
        phi, psi = W @ s[0], h[0] @ U.T  # [K], [T, K]
        alpha = torch.softmax(psi @ phi, dim=0)
        dE_dalpha = [sum(G[b] * h[0, v, b] for b in range(B)) for v in range(T)]  # dc_b/dalpha_v = h_vb
        dE_dz = [sum(dE_dalpha[v] * alpha[v] * (float(u == v) - alpha[u]) for v in range(T)) for u in range(T)]
        dE_dW = torch.zeros_like(W)
        dE_dU = torch.zeros_like(U)
        for k in range(K):
            for a in range(A):
                dE_dW[k, a] = sum(dE_dz[u] * psi[u, k] for u in range(T)) * s[0, a]
            for j in range(B):
                dE_dU[k, j] = sum(dE_dz[u] * phi[k] * h[0, u, j] for u in range(T))
    torch.testing.assert_close(attention.phi.weight.grad, dE_dW)
    torch.testing.assert_close(attention.psi.weight.grad, dE_dU)


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_gradcheck_and_no_gradient_into_padding(variant):
    attention = build(*variant)
    s, h, mask, previous = inputs([5, 3])
    h.requires_grad_(True)
    s.requires_grad_(True)

    def run(s_, h_):
        return attention(s_, attention.prepare(h_, mask), previous)[0]

    assert torch.autograd.gradcheck(run, (s, h), fast_mode=True)
    run(s, h).sum().backward()
    assert (h.grad[1, 3:] == 0).all()
    assert (h.grad[0, :5] != 0).any()
