"""LSH / ALSH attention, Wu et al. 2022, section 3.2: each query attends to at most ``C`` keys that share its hash.

On shared-QK queries and keys (Wu et al. 2022, section 4: "We adopt the shared-QK attention for all the methods in
Sections 3.2 and 3.3"; keys ``k = q / ||q||`` per head, see :mod:`.shared_qk`), per head:

1. Norm bound ``M = max ||x||`` over the frames the query may see (eq. 4's ``max_{x in X}``; ``X`` = the real
   frames' queries and keys in the query's allowed chunks, and the query itself). The seed does not say over
   which set; taking the query's visible frames keeps padding and frames outside its chunks from changing its
   hash (padding invariance, streaming).
2. Transformations ``S`` (queries) and ``R`` (keys), each with its normalisation ``T`` folded in (eqs. 4-14):

   * ``lsh_sign_alsh`` (eqs. 4-6): ``T(x) = U x / M``; ``S(x) = [x; 0 ... 0]``,
     ``R(x) = [x; 1/2 - ||x||^2; ...; 1/2 - ||x||^(2^m)]`` (``m`` extra dims).
   * ``lsh_xbox`` (eqs. 7-8): no ``T``; ``S(x) = [x; 0]``, ``R(x) = [x; sqrt(M^2 - ||x||^2)]``.
   * ``lsh_xbox_qnf`` (eqs. 13-14): ``S(x) = [M x / ||x||; 0]``, ``R`` as XBOX. With sign hashing (eq. 2) the
     positive factor ``M / ||x||`` changes no sign, so its selections (and outputs) equal ``lsh_xbox``'s; it is
     kept as its own kind because Table 1 lists it.
   * ``lsh_simple`` (eqs. 9-10, symmetric): ``T(x) = x / M``; ``S(x) = R(x) = [x; sqrt(1 - ||x||^2)]``.
   * ``lsh_simple_alsh`` (eqs. 9, 11-12): ``T(x) = x / M``; ``S(x) = [x; 0; sqrt(1 - ||x||^2)]``,
     ``R(x) = [x; sqrt(1 - ||x||^2); 0]``.

3. Sign random projection (eq. 2): ``h(x) = sign(a^T x)`` (``>= 0`` counts as +), ``a ~ N(0, I)`` drawn once per
   head from ``lsh_seed`` and kept as the buffer ``projection`` ``[h, d_k + e]`` (saved with the module). A query
   attends to key ``j`` only if ``h(S(T(q))) = h(R(T(k_j)))`` and the key is allowed (real, in an allowed chunk);
   of those it takes the top ``C`` (``lsh_num_keys``) by eq. 3's ``a^T R(T(k_j))`` (``h(q) >= 0``) or
   ``-a^T R(T(k_j))`` (``h(q) < 0``). Its own key is left out unless nothing else is selected (Reformer's rule).
4. Attention over the ``<= C`` selected keys: ``softmax(q . k / sqrt(d_k))`` (eq. 1), values, heads
   concatenated, ``W_O``; computed as one fused ``scaled_dot_product_attention`` call with the selection
   scattered into a ``[B, h, T, T]`` mask (rows with no selected key give zeros).

Steps 1-3 run without gradient (the paper's observation 4: "there is no gradient during hashing") and in float32
(the paper hashes in 16-bit floats; float32 keeps ``M^2 - ||x||^2`` and ``1 - ||x||^2`` from rounding to noise,
and selections the same under bf16 autocast); gradients
reach ``W_Q`` through the scores and keys of step 4. Hashing is ``O(h T^2)`` (as Table 1's
``(HL + 2HL^2)/2`` term: each query's ``M`` enters every key code, so the codes are ``[B, h, T, T]``). Step 4 as
masked dense attention is ``O(h T^2 d_k)`` rather than the ``O(h T C d_k)`` of gathering each query's keys, but
the hashing already holds ``T x T`` tensors, and on CPU the gather (``T x C`` keys and values) was 15-20x slower
than the fused kernel at ``T = 500`` (docs/attention.md, "Table 1 reproduced").
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import ClassVar

import torch

from .config import AttentionConfig
from .options.lsh import LSHOptions, SignALSHOptions
from .registry import ATTENTION
from .shared_qk import SharedQKAttention, self_mask

#: ``(norm [...], M [...]) -> (scale [...], extras [..., e])``: the transformed vector is
#: ``[scale * x; extras]`` for a vector ``x`` of norm ``norm`` (``T`` folded into ``scale`` and ``extras``).
Transform = Callable[[torch.Tensor, torch.Tensor], tuple[torch.Tensor, torch.Tensor]]


def _zeros(norm: torch.Tensor, count: int) -> torch.Tensor:
    return norm.new_zeros(*norm.shape, count)


def _sqrt_rest(squared_norm: torch.Tensor, bound: torch.Tensor | float) -> torch.Tensor:
    """``sqrt(bound - squared_norm)`` clamped at 0 (rounding can push the difference slightly negative)."""
    return (bound - squared_norm).clamp_min(0.0).sqrt()


def sign_alsh_query(norm: torch.Tensor, big_m: torch.Tensor, u: float, m: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Eqs. 4-5: ``S(T(x)) = [U x / M; 0 ... 0]`` (``m`` zeros)."""
    return u / big_m, _zeros(norm, m)


def sign_alsh_key(norm: torch.Tensor, big_m: torch.Tensor, u: float, m: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Eqs. 4, 6: ``R(T(x)) = [y; 1/2 - ||y||^2; ...; 1/2 - ||y||^(2^m)]`` with ``y = U x / M``."""
    scale = u / big_m
    scaled = norm * scale
    return scale, torch.stack([0.5 - scaled ** (2**i) for i in range(1, m + 1)], dim=-1)


def xbox_query(norm: torch.Tensor, big_m: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Eq. 7: ``S(x) = [x; 0]``."""
    return torch.ones_like(norm), _zeros(norm, 1)


def xbox_key(norm: torch.Tensor, big_m: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Eq. 8 (and 14): ``R(x) = [x; sqrt(M^2 - ||x||^2)]``."""
    return torch.ones_like(norm), _sqrt_rest(norm**2, big_m**2)[..., None]


def qnf_query(norm: torch.Tensor, big_m: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Eq. 13: ``S(x) = [lambda x; 0]``, ``lambda = M / ||x||``."""
    return big_m / norm.clamp_min(torch.finfo(norm.dtype).tiny), _zeros(norm, 1)


def simple_lsh(norm: torch.Tensor, big_m: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Eqs. 9-10: ``S(T(x)) = [x / M; sqrt(1 - ||x / M||^2)]`` (queries and keys)."""
    return 1.0 / big_m, _sqrt_rest((norm / big_m) ** 2, 1.0)[..., None]


def simple_alsh_query(norm: torch.Tensor, big_m: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Eqs. 9, 11: ``S(T(x)) = [x / M; 0; sqrt(1 - ||x / M||^2)]``."""
    scale, rest = simple_lsh(norm, big_m)
    return scale, torch.cat([torch.zeros_like(rest), rest], dim=-1)


def simple_alsh_key(norm: torch.Tensor, big_m: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Eqs. 9, 12: ``R(T(x)) = [x / M; sqrt(1 - ||x / M||^2); 0]``."""
    scale, rest = simple_lsh(norm, big_m)
    return scale, torch.cat([rest, torch.zeros_like(rest)], dim=-1)


class LSHAttention(SharedQKAttention):
    """Base of the LSH / ALSH kinds (module docstring): subclasses set :attr:`extra_dims` and return their
    transformations from :meth:`transforms`.

    Args:
        config (`AttentionConfig`): ``hidden_size``, ``num_heads``, ``dropout``, ``bias``, chunk settings,
            ``lsh_num_keys`` (``C``), ``lsh_seed``.
    """

    #: ``e``: dimensions ``S`` and ``R`` append to a ``d_k``-vector.
    extra_dims: ClassVar[int] = 1

    def __init__(self, config: AttentionConfig) -> None:
        super().__init__(config)
        self.num_keys = config.lsh_num_keys
        self.seed = config.lsh_seed
        self.register_buffer("projection", self.draw_projection())

    def draw_projection(self) -> torch.Tensor:
        """``a ~ N(0, I)``, one per head: ``[h, d_k + e]``, the same for the same ``lsh_seed``."""
        generator = torch.Generator().manual_seed(self.seed)
        return torch.randn(self.num_heads, self.head_dim + self.extra_dims, generator=generator)

    def reset_parameters(self) -> None:
        """Redraw ``projection`` from ``lsh_seed`` (the same values: it is not learned)."""
        with torch.no_grad():
            self.projection.copy_(self.draw_projection())

    def transforms(self) -> tuple[Transform, Transform]:
        """``(S, R)``: the query and key transformations (with ``T`` folded in)."""
        raise NotImplementedError(f"{type(self).__name__} must implement transforms")

    @torch.no_grad()
    def select_keys(
        self, query: torch.Tensor, key: torch.Tensor, allowed: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Steps 1-3 of the module docstring.

        Args:
            query, key: ``[B, h, T, d_k]``.
            allowed: bool ``[B or 1, 1, T, T]``: padding and chunk masks.

        Returns:
            ``index`` long ``[B, h, T, C']`` and ``selected`` bool ``[B, h, T, C']`` (``C' = min(C, T)``): the
            key positions each query attends to (slots with ``selected`` False take no part).
        """
        with torch.autocast(query.device.type, enabled=False):  # hash in float32 even under bf16 autocast
            return self._select_keys(query.float(), key.float(), allowed)

    def _select_keys(
        self, query: torch.Tensor, key: torch.Tensor, allowed: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        frames = query.shape[2]
        projection = self.projection.float()
        a_x, a_e = projection[:, : self.head_dim], projection[:, self.head_dim :]  # [h, d_k], [h, e]
        query_norm, key_norm = query.norm(dim=-1), key.norm(dim=-1)  # [B, h, T]
        frame_norm = torch.maximum(query_norm, key_norm)
        visible = torch.where(allowed, frame_norm[..., None, :], torch.zeros((), device=query.device))
        big_m = torch.maximum(visible.amax(dim=-1), query_norm).clamp_min(torch.finfo(torch.float32).tiny)
        transform_query, transform_key = self.transforms()
        q_scale, q_extra = transform_query(query_norm, big_m)  # [B, h, T], [B, h, T, e]
        query_code = q_scale * torch.einsum("bhtd,hd->bht", query, a_x) + torch.einsum("bhte,he->bht", q_extra, a_e)
        k_scale, k_extra = transform_key(key_norm[..., None, :], big_m[..., :, None])  # [B, h, T, T], [.., e]
        key_code = k_scale * torch.einsum("bhjd,hd->bhj", key, a_x)[..., None, :] + torch.einsum(
            "bhije,he->bhij", k_extra, a_e
        )  # a^T R(T(k_j)) with query i's M: [B, h, T, T]
        query_sign = torch.where(query_code >= 0, 1.0, -1.0)[..., None]  # h(S(T(q_i)))
        ranked = query_sign * key_code  # eq. 3
        same_hash = (key_code >= 0) == (query_sign > 0)
        candidates = allowed & same_hash
        is_self = self_mask(frames, query.device)
        others = candidates & ~is_self
        candidates = torch.where(others.any(dim=-1, keepdim=True), others, allowed & is_self)
        ranked = ranked.masked_fill(~candidates, float("-inf"))
        top, index = ranked.topk(min(self.num_keys, frames), dim=-1)
        return index, torch.isfinite(top)

    def forward(self, hidden_states: torch.Tensor, padding_mask: torch.Tensor | None = None) -> torch.Tensor:
        """``[B, T, D]``, ``[B, T]`` bool or None -> ``[B, T, D]``."""
        self.check_padding_mask(hidden_states, padding_mask)
        frames = hidden_states.shape[1]
        query, key = self.queries_and_keys(hidden_states)
        value = self.split_heads(self.value_proj(hidden_states))
        allowed = self.attention_mask(padding_mask, frames)
        if allowed is None:
            allowed = torch.ones(1, 1, frames, frames, dtype=torch.bool, device=hidden_states.device)
        index, selected = self.select_keys(query, key, allowed)
        # step 4 as one fused masked attention: the selection scattered into a [B, h, T, T] mask (hashing already
        # holds [B, h, T, T] codes); on CPU 15-20x faster at T = 500 than gathering T x C keys and values
        mask = torch.zeros(*index.shape[:3], frames, dtype=torch.bool, device=index.device)
        mask.scatter_(-1, index, selected)
        context = self.fused_attention(query, key, value, mask)  # rows with no selected key: zeros
        return self.output_proj(self.merge_heads(context))

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, num_keys={self.num_keys}, seed={self.seed}"


@ATTENTION.register("lsh_sign_alsh", options=SignALSHOptions)
class SignALSHAttention(LSHAttention):
    """Sign-ALSH (Shrivastava & Li 2015), eqs. 4-6, with ``U = sign_alsh_u``, ``m = sign_alsh_m``."""

    def __init__(self, config: AttentionConfig) -> None:
        self.u, self.m = float(config.sign_alsh_u), config.sign_alsh_m
        self.extra_dims = self.m
        super().__init__(config)

    def transforms(self) -> tuple[Transform, Transform]:
        return (
            functools.partial(sign_alsh_query, u=self.u, m=self.m),
            functools.partial(sign_alsh_key, u=self.u, m=self.m),
        )


@ATTENTION.register("lsh_xbox", options=LSHOptions)
class XBOXAttention(LSHAttention):
    """XBOX (Bachrach et al. 2014), eqs. 7-8."""

    def transforms(self) -> tuple[Transform, Transform]:
        return xbox_query, xbox_key


@ATTENTION.register("lsh_xbox_qnf", options=LSHOptions)
class XBOXQNFAttention(LSHAttention):
    """XBOX with the query normalised first (QNF, Huang et al. 2018), eqs. 13-14."""

    def transforms(self) -> tuple[Transform, Transform]:
        return qnf_query, xbox_key


@ATTENTION.register("lsh_simple", options=LSHOptions)
class SimpleLSHAttention(LSHAttention):
    """Simple LSH (Neyshabur & Srebro 2015), eqs. 9-10 (symmetric)."""

    def transforms(self) -> tuple[Transform, Transform]:
        return simple_lsh, simple_lsh


@ATTENTION.register("lsh_simple_alsh", options=LSHOptions)
class SimpleALSHAttention(LSHAttention):
    """Simple ALSH (Neyshabur & Srebro 2015), eqs. 9, 11-12."""

    extra_dims: ClassVar[int] = 2

    def transforms(self) -> tuple[Transform, Transform]:
        return simple_alsh_query, simple_alsh_key
