"""Each kind against a naive reference written straight from the papers' equations with explicit loops.

Reference formulas (loops over batch, head, query, key / window offset; nothing shared with the package):

* ``mhsa``: ``A_ij = q_i . k_j / sqrt(d_k)``.
* ``rel_pos`` (Transformer-XL, Dai et al. 2019, as in WeNet):
  ``A_ij = ((q_i + u) . k_j + (q_i + v) . (W_pos R_{i-j})) / sqrt(d_k)`` with the sinusoid
  ``R_r[2m] = sin(r / 10000^(2m/D))``, ``R_r[2m+1] = cos(r / 10000^(2m/D))``.
* ``ldsa`` (Xu et al. 2021, eqs. 1-4): ``B_tj = softmax_j(ReLU(x_t W1^i) W2^i)`` over the valid neighbours,
  ``Y_t = sum_j B_tj V_{t+j-floor(c/2)}``, heads concatenated, ``W_O``.
* ``synthesizer_dense`` (Wu et al. 2022, eq. 16): ``A_i = W2(ReLU(W1 x_i + b1)) + b2``, first ``T`` entries.
* ``synthesizer_random``: ``A`` itself, cropped to ``T x T``.

All: softmax over the keys that are real frames, weighted sum of values, heads concatenated, output projection.
"""

from __future__ import annotations

import math

import pytest
import torch
from helpers.attention import linear, softmax

from adaptspeech.attention import ATTENTION, AttentionConfig, EncoderAttention, settings_for_kind

HIDDEN, HEADS, DK = 16, 4, 4


def build(kind: str, **settings: object) -> EncoderAttention:
    torch.manual_seed(0)
    shared = {"hidden_size": HIDDEN, "num_heads": HEADS, "synthesizer_max_len": 12, "context_width": 5}
    config = AttentionConfig(kind=kind, **settings_for_kind(kind, {**shared, **settings}))
    module = ATTENTION.get(kind)(config).eval()
    for name, param in module.named_parameters():
        if name.startswith("pos_bias"):
            torch.nn.init.normal_(param)
    return module.requires_grad_(False)


def attend(
    module: EncoderAttention, x: torch.Tensor, mask: torch.Tensor, score, values: torch.Tensor | None = None
) -> torch.Tensor:
    """Naive attention: for each (b, head, i) a softmax of ``score(b, head, i, j)`` over the real keys ``j``,
    the weighted sum of the head's values, heads concatenated, output projection."""
    batch, frames, _ = x.shape
    out = torch.zeros(batch, frames, HIDDEN)
    for b in range(batch):
        v = [linear(module.value_proj, x[b, t]) for t in range(frames)] if values is None else values[b]
        keys = [j for j in range(frames) if mask[b, j]]
        for i in range(frames):
            concat = []
            for h in range(HEADS):
                weights = softmax([score(b, h, i, j) for j in keys])
                concat.append(sum(w * v[j][h * DK : (h + 1) * DK] for w, j in zip(weights, keys)))
            out[b, i] = linear(module.output_proj, torch.cat(concat))
    return out


def inputs() -> tuple[torch.Tensor, torch.Tensor]:
    torch.manual_seed(1)
    x = torch.randn(2, 7, HIDDEN)
    mask = torch.tensor([[True] * 7, [True] * 5 + [False] * 2])
    return x, mask


def head(vector: torch.Tensor, h: int) -> torch.Tensor:
    return vector[h * DK : (h + 1) * DK]


def test_mhsa_matches_reference() -> None:
    module = build("mhsa")
    x, mask = inputs()
    q = [[linear(module.q_proj, x[b, t]) for t in range(7)] for b in range(2)]
    k = [[linear(module.k_proj, x[b, t]) for t in range(7)] for b in range(2)]

    def score(b: int, h: int, i: int, j: int) -> float:
        return float(head(q[b][i], h) @ head(k[b][j], h)) / math.sqrt(DK)

    torch.testing.assert_close(module(x, mask), attend(module, x, mask, score), atol=1e-5, rtol=0)


def sinusoid(r: int) -> torch.Tensor:
    """``R_r`` straight from the formula."""
    out = torch.zeros(HIDDEN, dtype=torch.float64)
    for m in range(HIDDEN // 2):
        angle = r / 10000 ** (2 * m / HIDDEN)
        out[2 * m], out[2 * m + 1] = math.sin(angle), math.cos(angle)
    return out.float()


def test_rel_pos_matches_reference() -> None:
    module = build("rel_pos")
    x, mask = inputs()
    q = [[linear(module.linear_q, x[b, t]) for t in range(7)] for b in range(2)]
    k = [[linear(module.linear_k, x[b, t]) for t in range(7)] for b in range(2)]
    p = {r: module.linear_pos.weight @ sinusoid(r) for r in range(-6, 7)}
    u, v = module.pos_bias_u, module.pos_bias_v

    def score(b: int, h: int, i: int, j: int) -> float:
        qi = head(q[b][i], h)
        content = (qi + u[h]) @ head(k[b][j], h)  # terms (a) + (c)
        position = (qi + v[h]) @ head(p[i - j], h)  # terms (b) + (d), relative position i - j
        return float(content + position) / math.sqrt(DK)

    torch.testing.assert_close(module(x, mask), attend(module, x, mask, score), atol=1e-5, rtol=0)


@pytest.mark.parametrize("bias", [True, False])
def test_ldsa_matches_reference(bias: bool) -> None:
    module = build("ldsa", bias=bias)
    x, mask = inputs()
    c, half = 5, 2
    out = torch.zeros(2, 7, HIDDEN)
    for b in range(2):
        v = [linear(module.v_proj, x[b, t]) for t in range(7)]  # eq. (2)
        for t in range(7):
            hidden = torch.relu(linear(module.w1, x[b, t]))
            concat = []
            for h in range(HEADS):
                logits, neighbours = [], []
                for j in range(c):  # eq. (1), softmax over the valid neighbours only
                    n = t + j - half
                    if 0 <= n < 7 and mask[b, n]:
                        logit = head(hidden, h) @ module.w2[h, :, j]
                        if module.w2_bias is not None:
                            logit = logit + module.w2_bias[h, j]
                        logits.append(float(logit))
                        neighbours.append(n)
                weights = softmax(logits)
                concat.append(sum(w * head(v[n], h) for w, n in zip(weights, neighbours)))  # eq. (3)
            out[b, t] = linear(module.out_proj, torch.cat(concat))  # eq. (4)
    torch.testing.assert_close(module(x, mask), out, atol=1e-5, rtol=0)


def test_ldsa_hybrid_is_ldsa_then_mhsa() -> None:
    module = build("ldsa", hybrid=True)
    x, mask = inputs()
    plain = build("ldsa")
    plain.load_state_dict({k: v for k, v in module.state_dict().items() if not k.startswith("mhsa.")})
    expected = module.mhsa(plain(x, mask), mask)
    torch.testing.assert_close(module(x, mask), expected, atol=1e-6, rtol=0)


def test_synthesizer_dense_matches_reference() -> None:
    module = build("synthesizer_dense")
    x, mask = inputs()
    n = module.synthesizer_hidden
    rows = {}
    for b in range(2):
        for i in range(7):
            hidden = torch.relu(linear(module.dense1, x[b, i]))  # W1 x + b1, all heads
            for h in range(HEADS):
                hid = hidden[h * n : (h + 1) * n]
                rows[b, h, i] = [  # eq. (16), column j of W2 and b2
                    float(hid @ module.dense2_weight[h, :, j] + module.dense2_bias[h, j]) for j in range(7)
                ]
    expected = attend(module, x, mask, lambda b, h, i, j: rows[b, h, i][j])
    torch.testing.assert_close(module(x, mask), expected, atol=1e-5, rtol=0)


@pytest.mark.parametrize("init", ["random", "fixed_patterns"])
def test_synthesizer_random_matches_reference(init: str) -> None:
    module = build("synthesizer_random", synthesizer_init=init)
    x, mask = inputs()
    logits = module.logits.detach()
    expected = attend(module, x, mask, lambda b, h, i, j: float(logits[h, i, j]))
    torch.testing.assert_close(module(x, mask), expected, atol=1e-5, rtol=0)
