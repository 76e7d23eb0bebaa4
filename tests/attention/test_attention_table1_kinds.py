"""The kinds of Table 1 of Wu et al. 2022 ("Input-independent attention weights are expressive enough") against
naive references written from the equations with explicit loops.

Reference formulas (loops over batch, head, query, key; nothing shared with the package):

* shared QK (Baseline (Q)): ``q = W_Q x``, ``k_j = q_j / ||q_j||`` per head, ``A_ij = q_i . k_j / sqrt(d_k)`` over
  the visible keys (real frames of the allowed chunks) other than ``i``, or ``{i}`` if there is no other.
* sparse (Fig. 1b/1c mirrored): the first ``ceil(h/2)`` heads use ``|i - j| < l`` (strided) or
  ``i // l == j // l`` (fixed), the others ``(i - j) % l == 0`` or ``j % l >= l - c``; one head: the union.
* LSH (eqs. 2-14): the full vectors ``S(T(q_i))`` and ``R(T(k_j))`` built from the equations, ``M`` the largest
  norm of the visible queries and keys and ``q_i``, ``h = sign(a . x)``, candidates = same hash, ranked by eq. 3,
  the top ``C``.
* SYN. (Dense): ``A_i = W2(ReLU(W1 x_i + b1)) + b2`` once, the same weights for every head.
"""

from __future__ import annotations

import math

import pytest
import torch
from helpers.attention import influence, linear, softmax

from adaptspeech.attention import ATTENTION, AttentionConfig, EncoderAttention

HIDDEN = 16
LSH = ["lsh_sign_alsh", "lsh_xbox", "lsh_xbox_qnf", "lsh_simple", "lsh_simple_alsh"]
SPARSE = ["sparse_strided", "sparse_fixed"]
NEW_KINDS = ["shared_qk", *SPARSE, *LSH, "synthesizer_dense_shared"]

#: small patterns and ``C`` so the restrictions matter at ``T = 11``.
SETTINGS: dict[str, dict] = {
    "sparse_strided": {"sparse_block_size": 3},
    "sparse_fixed": {"sparse_block_size": 4, "sparse_summary": 2},
    **{kind: {"lsh_num_keys": 3} for kind in LSH},
    "lsh_sign_alsh": {"lsh_num_keys": 3, "sign_alsh_m": 3, "sign_alsh_u": 0.6},
    "synthesizer_dense_shared": {"synthesizer_max_len": 16},
}


def build(kind: str, heads: int = 4, **overrides: object) -> EncoderAttention:
    torch.manual_seed(0)
    settings = {"kind": kind, "hidden_size": HIDDEN, "num_heads": heads, **SETTINGS.get(kind, {}), **overrides}
    return ATTENTION.get(kind)(AttentionConfig(**settings)).eval()


def visible(mask: torch.Tensor, b: int, i: int, j: int, chunk: int, left: int) -> bool:
    """Key ``j`` is a real frame in an allowed chunk of query ``i``."""
    if not mask[b, j]:
        return False
    if chunk <= 0:
        return True
    diff = i // chunk - j // chunk
    return diff >= 0 and (left < 0 or diff <= left)


def sparse_pattern(kind: str, heads: int, h: int, i: int, j: int, block: int, summary: int) -> bool:
    if kind == "sparse_strided":
        first, second = abs(i - j) < block, (i - j) % block == 0
    else:
        first, second = i // block == j // block, j % block >= block - summary
    if heads == 1:
        return first or second
    return first if h < math.ceil(heads / 2) else second


def transformed(kind: str, x: torch.Tensor, big_m: float, u: float, m: int, side: str) -> torch.Tensor:
    """``S(x)`` (side "query") or ``R(x)`` (side "key") as full vectors, straight from eqs. 4-14."""
    zero = torch.zeros(1)
    if kind == "lsh_sign_alsh":
        y = u * x / big_m
        if side == "query":
            return torch.cat([y, torch.zeros(m)])
        return torch.cat([y, torch.tensor([0.5 - y.norm().item() ** (2**i) for i in range(1, m + 1)])])
    if kind in ("lsh_xbox", "lsh_xbox_qnf"):
        if side == "key":
            return torch.cat([x, torch.tensor([math.sqrt(max(big_m**2 - x.norm().item() ** 2, 0.0))])])
        return torch.cat([x * (big_m / x.norm().item() if kind == "lsh_xbox_qnf" else 1.0), zero])
    y = x / big_m
    rest = torch.tensor([math.sqrt(max(1 - y.norm().item() ** 2, 0.0))])
    if kind == "lsh_simple":
        return torch.cat([y, rest])
    return torch.cat([y, zero, rest]) if side == "query" else torch.cat([y, rest, zero])


def reference(module: EncoderAttention, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Explicit-loop output of a shared-QK / sparse / LSH module."""
    config = module.config
    kind, heads, dk = config.kind, config.num_heads, config.hidden_size // config.num_heads
    batch, frames, _ = x.shape
    out = torch.zeros(batch, frames, HIDDEN)
    for b in range(batch):
        q = [linear(module.q_proj, x[b, t]) for t in range(frames)]
        v = [linear(module.value_proj, x[b, t]) for t in range(frames)]
        for i in range(frames):
            concat = []
            for h in range(heads):
                qh = [vec[h * dk : (h + 1) * dk] for vec in q]
                kh = [vec / vec.norm() for vec in qh]
                seen = [j for j in range(frames) if visible(mask, b, i, j, config.chunk_size, config.num_left_chunks)]
                if kind in SPARSE:
                    block, summary = config.sparse_block_size, getattr(config, "sparse_summary", None)  # fixed only
                    keys = [j for j in seen if sparse_pattern(kind, heads, h, i, j, block, summary)]
                    keys = [j for j in keys if j != i] or keys
                elif kind in LSH:
                    big_m = max([qh[i].norm().item()] + [max(qh[j].norm().item(), kh[j].norm().item()) for j in seen])
                    u, m = getattr(config, "sign_alsh_u", None), getattr(config, "sign_alsh_m", None)  # Sign-ALSH only
                    a = module.projection[h]
                    positive = float(a @ transformed(kind, qh[i], big_m, u, m, "query")) >= 0
                    codes = {j: float(a @ transformed(kind, kh[j], big_m, u, m, "key")) for j in seen}
                    same = [j for j in seen if (codes[j] >= 0) == positive and j != i]
                    same.sort(key=lambda j: -codes[j] if positive else codes[j])
                    keys = same[: config.lsh_num_keys] or [j for j in seen if j == i]
                else:  # shared_qk
                    keys = [j for j in seen if j != i] or seen
                if not keys:
                    concat.append(torch.zeros(dk))
                    continue
                weights = softmax([float(qh[i] @ kh[j]) / math.sqrt(dk) for j in keys])
                concat.append(sum(w * v[j][h * dk : (h + 1) * dk] for w, j in zip(weights, keys)))
            out[b, i] = linear(module.output_proj, torch.cat(concat))
    return out


def inputs(frames: int = 11) -> tuple[torch.Tensor, torch.Tensor]:
    torch.manual_seed(1)
    x = torch.randn(2, frames, HIDDEN)
    mask = torch.tensor([[True] * frames, [True] * (frames - 3) + [False] * 3])
    return x, mask


@pytest.mark.parametrize("chunk", [(0, -1), (4, 1)])
@pytest.mark.parametrize("heads", [4, 1])
@pytest.mark.parametrize("kind", ["shared_qk", *SPARSE, *LSH])
def test_matches_the_explicit_loop_reference(kind: str, heads: int, chunk: tuple[int, int]) -> None:
    module = build(kind, heads=heads, chunk_size=chunk[0], num_left_chunks=chunk[1]).requires_grad_(False)
    x, mask = inputs()
    torch.testing.assert_close(module(x, mask), reference(module, x, mask), atol=1e-5, rtol=1e-4)


def test_shared_dense_synthesizer_matches_eq_16_once_for_all_heads() -> None:
    module = build("synthesizer_dense_shared").requires_grad_(False)
    x, mask = inputs()
    batch, frames, _ = x.shape
    heads, dk = 4, HIDDEN // 4
    w2, b2 = module.dense2_weight[0], module.dense2_bias[0]  # [N, L], [L]
    expected = torch.zeros(batch, frames, HIDDEN)
    for b in range(batch):
        v = [linear(module.value_proj, x[b, t]) for t in range(frames)]
        keys = [j for j in range(frames) if mask[b, j]]
        for i in range(frames):
            hidden = torch.relu(linear(module.dense1, x[b, i]))
            row = [float(hidden @ w2[:, j] + b2[j]) for j in keys]
            weights = softmax(row)
            concat = [sum(w * v[j][h * dk : (h + 1) * dk] for w, j in zip(weights, keys)) for h in range(heads)]
            expected[b, i] = linear(module.output_proj, torch.cat(concat))
    torch.testing.assert_close(module(x, mask), expected, atol=1e-5, rtol=1e-4)
    # one F for all heads ("SYN. (Dense)"); synthesizer_dense keeps one per head ("SYN. (Dense+M)")
    assert module.dense1.out_features == module.synthesizer_hidden
    assert build("synthesizer_dense").dense2_weight.shape[0] == heads


@pytest.mark.parametrize("kind", NEW_KINDS)
def test_padding_invariance_with_small_patterns(kind: str) -> None:
    module = build(kind)
    real = torch.randn(1, 9, HIDDEN)
    alone = module(real)
    padded = torch.cat([real, 100 * torch.randn(1, 4, HIDDEN)], dim=1)
    mask = torch.tensor([[True] * 9 + [False] * 4])
    torch.testing.assert_close(module(padded, mask)[:, :9], alone, atol=1e-5, rtol=0)


@pytest.mark.parametrize("kind", NEW_KINDS)
def test_gradients_reach_every_parameter_with_small_patterns(kind: str) -> None:
    module = build(kind).train()
    x = torch.randn(2, 11, HIDDEN, requires_grad=True)
    padding = torch.tensor([[True] * 11, [True] * 8 + [False] * 3])
    (module(x, padding) * torch.randn(2, 11, HIDDEN) * padding[..., None]).sum().backward()
    for name, param in module.named_parameters():
        assert param.grad is not None and param.grad.abs().sum() > 0, f"{kind}: no gradient for {name}"
    assert x.grad[1, 8:].abs().sum() == 0


@pytest.mark.parametrize(("chunk_size", "num_left_chunks"), [(3, 0), (3, 1), (4, -1)])
@pytest.mark.parametrize("kind", NEW_KINDS)
def test_no_frame_depends_on_frames_outside_its_chunks(kind: str, chunk_size: int, num_left_chunks: int) -> None:
    frames = 10
    i, j = torch.arange(frames)[:, None], torch.arange(frames)[None, :]
    diff = i // chunk_size - j // chunk_size
    allowed = (diff >= 0) & ((diff <= num_left_chunks) if num_left_chunks >= 0 else True)
    seen = influence(build(kind, chunk_size=chunk_size, num_left_chunks=num_left_chunks), frames, HIDDEN)
    assert not (seen & ~allowed).any()
    if kind == "shared_qk":  # dense apart from the own key: every other frame of the allowed chunks matters
        off_diagonal = ~torch.eye(frames, dtype=torch.bool)
        assert torch.equal(seen & off_diagonal, allowed & off_diagonal)


def test_sparse_patterns_score_only_their_blocks() -> None:
    """Scores per pattern grow as ``T (l + T / l)``, not ``T^2``: at ``T = 400``, ``l = 20`` at most ``3 T l``."""
    for kind in SPARSE:
        module = build(kind, sparse_block_size=20)
        for groups in module.groups(400, torch.device("cpu")):
            assert groups.queries.shape[0] * groups.queries.shape[1] == 400  # every query once
            assert groups.queries.numel() * groups.keys.shape[1] <= 3 * 400 * 20 < 400**2
            assert sorted(groups.queries.reshape(-1).tolist()) == list(range(400))


def test_lsh_attends_to_at_most_c_keys_sharing_the_hash() -> None:
    module = build("lsh_simple", lsh_num_keys=2)
    x, _ = inputs(20)
    query, key = module.queries_and_keys(x)
    allowed = torch.ones(1, 1, 20, 20, dtype=torch.bool)
    index, selected = module.select_keys(query, key, allowed)
    assert index.shape[-1] == 2 and selected.sum(-1).max() <= 2 and selected.any(-1).all()


def test_lsh_hashing_is_seeded_saved_and_not_learned(tmp_path) -> None:
    first, second = build("lsh_xbox"), build("lsh_xbox")
    assert torch.equal(first.projection, second.projection)
    assert not torch.equal(first.projection, build("lsh_xbox", lsh_seed=1).projection)
    assert "projection" in first.state_dict() and "projection" not in dict(first.named_parameters())
    with torch.no_grad():
        first.projection.normal_()
    torch.save(first.state_dict(), tmp_path / "lsh.pt")
    second.load_state_dict(torch.load(tmp_path / "lsh.pt"))
    x, mask = inputs()
    torch.testing.assert_close(second(x, mask), first(x, mask))


def test_lsh_selection_has_no_gradient() -> None:
    module = build("lsh_sign_alsh")
    query, key = module.queries_and_keys(torch.randn(1, 8, HIDDEN))
    index, selected = module.select_keys(query, key, torch.ones(1, 1, 8, 8, dtype=torch.bool))
    assert not index.requires_grad and not selected.requires_grad and query.requires_grad


def test_xbox_qnf_selects_what_xbox_selects() -> None:
    """Eq. 13 scales the query by ``M / ||q|| > 0``: sign hashing (eq. 2) and eq. 3 see the same signs."""
    x, mask = inputs()
    torch.testing.assert_close(build("lsh_xbox_qnf")(x, mask), build("lsh_xbox")(x, mask))


def test_table1_kind_settings_are_validated() -> None:
    with pytest.raises(ValueError, match="sparse_summary"):
        AttentionConfig(kind="sparse_fixed", sparse_block_size=2, sparse_summary=3)
    with pytest.raises(ValueError, match="sign_alsh_u"):
        AttentionConfig(kind="lsh_sign_alsh", sign_alsh_u=1.5)
    with pytest.raises(ValueError, match="lsh_num_keys=8 applies only"):
        AttentionConfig(kind="mhsa", lsh_num_keys=8)
    with pytest.raises(ValueError, match="sparse_block_size must be a positive integer"):
        AttentionConfig(kind="sparse_strided", sparse_block_size=0)
    config = AttentionConfig(kind="lsh_sign_alsh", sign_alsh_m=3, lsh_seed=5)
    assert AttentionConfig.from_dict(config.to_dict()) == config


@pytest.mark.parametrize("kind", LSH)
def test_hash_codes_are_a_dot_the_transformed_vectors(kind: str) -> None:
    """The module's folded transformations give ``a^T S(x)`` and ``a^T R(x)`` of the full vectors of eqs. 4-14."""
    module = build(kind)
    transform_query, transform_key = module.transforms()
    dk, (u, m) = HIDDEN // 4, (getattr(module.config, "sign_alsh_u", None), getattr(module.config, "sign_alsh_m", None))
    a = module.projection[0]
    torch.manual_seed(3)
    for _ in range(5):
        x = torch.randn(dk) * 2
        big_m = x.norm().item() * 1.3
        for side, transform in (("query", transform_query), ("key", transform_key)):
            scale, extras = transform(x.norm(), torch.tensor(big_m))
            code = scale * (a[:dk] @ x) + extras @ a[dk:]
            expected = a @ transformed(kind, x, big_m, u, m, side)
            torch.testing.assert_close(code, expected, rtol=1e-5, atol=1e-6)
