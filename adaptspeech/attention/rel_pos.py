"""``rel_pos``: Transformer-XL relative-position self-attention (Dai et al. 2019, as WeNet implements it), with chunk
(streaming) masks.

Scores, per head, with ``q_i, k_j`` the projected query / key, ``p_r = W_pos R_r`` the projected sinusoid of
the relative position ``r = i - j`` and the learnable biases ``u = pos_bias_u``, ``v = pos_bias_v``::

    A_ij = ((q_i + u) . k_j + (q_i + v) . p_{i-j}) / sqrt(d_k)        (terms (ac) + (bd) of Transformer-XL)

The ``(bd)`` term is one matrix product with all ``2T-1`` positions followed by :func:`~.positional.rel_shift`
(pad and reshape), exactly as WeNet and transformers' ``Wav2Vec2ConformerSelfAttention`` compute it. Names
and shapes match that module (``linear_q/k/v/out``, ``linear_pos`` without bias, ``pos_bias_u/v``
``[h, d_k]``), so wav2vec2-conformer rel-pos checkpoints load unchanged and the outputs agree to float
rounding.

Speed (forward + backward at least as fast as transformers' module, see ``scripts/bench_attention.py``): the
seed's zero column is put into the position matrix (one zero row, ``O(T D)``) instead of copying the
``T x 2T`` score matrix to pad it, the ``1/sqrt(d_k)`` scale is folded into ``q + v``, and one ``baddbmm``
computes the content scores and adds the position scores in the same pass.

Memory: the full path holds ``h x T x T`` content and position scores and their gradients (3.2 GB for
one width-768 layer's forward + backward at T = 4000, as transformers' module). Above
``attention.memory_efficient_threshold`` frames (or always with ``attention.memory_efficient: true``) the same
equations are computed in blocks of ``attention.query_block_size`` queries by
:func:`~.blockwise.blockwise_relative_attention`, whose backward recomputes each block: memory linear in ``T``,
outputs and gradients equal to float rounding (tested against this full path and against transformers).
"""

from __future__ import annotations

from typing import ClassVar

import torch
from torch import nn
from torch.nn import functional as F

from .base import EncoderAttention
from .blockwise import blockwise_relative_attention
from .config import AttentionConfig
from .masks import masked_softmax
from .options.rel_pos import RelPosOptions
from .positional import RelativePositionTable, relative_scores_prepadded
from .registry import ATTENTION

#: key / value cache of :meth:`RelPositionSelfAttention.forward_chunk`: ``(key, value)``, each
#: ``[B, h, M, d_k]``.
ChunkCache = tuple[torch.Tensor, torch.Tensor]


@ATTENTION.register("rel_pos", options=RelPosOptions)
class RelPositionSelfAttention(EncoderAttention):
    """Multi-head self-attention with Transformer-XL relative positions and optional chunk masks.

    Args:
        config (`AttentionConfig`): ``hidden_size`` (even), ``num_heads``, ``dropout``, ``bias``,
            ``max_relative_positions``, ``chunk_size``, ``num_left_chunks``, ``memory_efficient``,
            ``memory_efficient_threshold``, ``query_block_size``.
    """

    roles: ClassVar[dict[str, str]] = {
        "query": "linear_q",
        "key": "linear_k",
        "value": "linear_v",
        "output": "linear_out",
        "pos": "linear_pos",
        "pos_bias_u": "pos_bias_u",
        "pos_bias_v": "pos_bias_v",
    }
    streams: ClassVar[bool] = True

    def __init__(self, config: AttentionConfig) -> None:
        super().__init__(config)
        if self.hidden_size % 2:
            raise ValueError(f"rel_pos attention needs an even attention.hidden_size, got {self.hidden_size}")
        self.linear_q = nn.Linear(self.hidden_size, self.hidden_size, bias=config.bias)
        self.linear_k = nn.Linear(self.hidden_size, self.hidden_size, bias=config.bias)
        self.linear_pos = nn.Linear(self.hidden_size, self.hidden_size, bias=False)
        self.pos_bias_u = nn.Parameter(torch.empty(self.num_heads, self.head_dim))
        self.pos_bias_v = nn.Parameter(torch.empty(self.num_heads, self.head_dim))
        self.positions = RelativePositionTable(self.hidden_size, config.max_relative_positions)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Xavier-uniform ``pos_bias_u/v`` (as transformers initialises them)."""
        nn.init.xavier_uniform_(self.pos_bias_u)
        nn.init.xavier_uniform_(self.pos_bias_v)

    @torch.no_grad()
    def init_from_hf(self, hf_attention: nn.Module) -> list[str]:
        """Copy q/k/v/out (and ``linear_pos``, ``pos_bias_u/v`` where the source has them).

        From a module without relative positions (``Wav2Vec2Attention``, or a conformer layer with rotary or
        no position embeddings) ``linear_pos`` and both position biases are zeroed: the ``(bd)`` term and
        ``u`` then vanish and the swapped layer computes exactly what the original did, learning positions
        from there.
        """
        source_bias = getattr(hf_attention, "pos_bias_u", None)
        if isinstance(source_bias, torch.Tensor) and tuple(source_bias.shape) != tuple(self.pos_bias_u.shape):
            raise ValueError(
                f"attention.num_heads={self.num_heads} differs from the pretrained relative attention's "
                f"{source_bias.shape[0]} heads: its position biases pos_bias_u/v {tuple(source_bias.shape)} cannot "
                "start this attention; keep num_heads at 0 (the backbone's) or set attention.init_from_pretrained: "
                "false"
            )
        copied = super().init_from_hf(hf_attention)
        if "linear_pos.weight" not in copied:
            self.linear_pos.weight.zero_()
            self.pos_bias_u.zero_()
            self.pos_bias_v.zero_()
        return copied

    # --- scores ---------------------------------------------------------------------------------------------
    def _position_scores(self, query: torch.Tensor, num_keys: int) -> torch.Tensor:
        """The ``(bd)`` term ``(q_i + v) . p_{(M+i)-j} / sqrt(d_k)``: ``[B, h, C, L]`` (a view) for ``C`` queries
        that are the last ``C`` of ``L = M + C`` keys (``M = 0``: full self-attention).

        ``rel_shift``'s zero column comes from a zero first row of the position matrix, so the product is born
        padded (``[B, h, C, 2L]``) and the shift is pure reshaping (:func:`relative_scores_prepadded`)."""
        pos = F.pad(self.projected_positions(num_keys, query.dtype, query.device), (0, 0, 1, 0))  # [2L, D], row 0 = 0
        pos = pos.view(-1, self.num_heads, self.head_dim).permute(1, 2, 0)  # [h, d_k, 2L]
        query_v = (query + self.pos_bias_v[:, None, :]) * self.head_dim**-0.5  # [B, h, C, d_k]
        return relative_scores_prepadded(torch.matmul(query_v, pos), num_keys)

    def projected_positions(self, num_keys: int, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
        """``W_pos R_r`` for ``r = L-1 .. -(L-1)``: ``[2L-1, D]``.

        Without gradients (decoding) the projection of the longest table so far is kept and sliced (the projection
        is row by row, so a slice of it is the projection of the slice): a stream whose chunks see more and more keys
        projects each position once, not ``2L - 1`` positions per chunk and layer (at ``L`` = 1,500 keys and width
        256 that projection cost 30 times the chunk's attention). The cache is dropped when ``linear_pos`` changes
        (its version counter), the dtype or the device."""
        if torch.is_grad_enabled() or torch.compiler.is_exporting():  # exporting: torch ops of num_keys, no cache
            return self.linear_pos(self.positions(num_keys, dtype, device))
        weight = self.linear_pos.weight
        key = (weight.data_ptr(), weight._version, dtype, device)
        cached = self.__dict__.get("_projected_cache")
        if cached is None or cached[0] != key or (cached[1].shape[0] + 1) // 2 < num_keys:
            grown = max(num_keys, 2 * ((cached[1].shape[0] + 1) // 2) if cached is not None and cached[0] == key else 0)
            cached = (key, self.linear_pos(self.positions(grown, dtype, device)))
            self.__dict__["_projected_cache"] = cached  # not a buffer: never saved, never moved by .to()
        table = cached[1]
        centre = table.shape[0] // 2  # row of relative position 0
        return table[centre - num_keys + 1 : centre + num_keys]

    def _attend(
        self,
        query: torch.Tensor,
        key: torch.Tensor,
        value: torch.Tensor,
        allowed: torch.Tensor | None,
    ) -> torch.Tensor:
        """``softmax(((q + u) . k + (q + v) . p) / sqrt(d_k))`` over the allowed keys, times the values.

        ``[B, h, C, d_k]`` queries, ``[B, h, L, d_k]`` keys / values -> ``[B, h, C, d_k]``. One ``baddbmm`` adds
        the content scores to the position scores as it computes them (no separate pass over the ``C x L``
        matrix); the mask is applied in place on that fresh matrix.
        """
        batch, heads, queries, _ = query.shape
        keys = key.shape[2]
        bias = self._position_scores(query, keys).reshape(batch * heads, queries, keys)  # still a view
        query_u = (query + self.pos_bias_u[:, None, :]).reshape(batch * heads, queries, self.head_dim)
        scores = torch.baddbmm(
            bias, query_u, key.reshape(batch * heads, keys, self.head_dim).transpose(1, 2), alpha=self.head_dim**-0.5
        ).view(batch, heads, queries, keys)
        weights = self.attention_dropout(masked_softmax(scores, allowed))
        return torch.matmul(weights, value)

    def uses_blockwise(self, num_frames: int) -> bool:
        """Whether :meth:`forward` on ``num_frames`` frames takes the blockwise path (memory linear in ``T``):
        ``attention.memory_efficient`` if set, else ``num_frames > attention.memory_efficient_threshold``; never
        while a graph is exported (its block loop runs in Python: the graph holds the full path, whose outputs equal
        the blockwise ones to float rounding)."""
        if torch.compiler.is_exporting():
            return False
        forced = self.config.memory_efficient
        return num_frames > self.config.memory_efficient_threshold if forced is None else forced

    def _attend_blockwise(
        self,
        query: torch.Tensor,
        key: torch.Tensor,
        value: torch.Tensor,
        padding_mask: torch.Tensor | None,
    ) -> torch.Tensor:
        """:meth:`_attend` on the full sequence, in query blocks (:func:`~.blockwise.blockwise_relative_attention`):
        ``[B, h, T, d_k]`` query / key / value, ``[B, T]`` padding mask or None -> ``[B, h, T, d_k]``.

        The position table covers ``T .. -(T-1)`` (``2T`` rows): the row of position ``T`` stands where the full
        path puts its zero row, never read (see the blockwise module)."""
        frames = query.shape[2]
        table = self.positions(frames + 1, query.dtype, query.device)[:-1]  # [2T, D]: positions T .. -(T-1)
        positions = self.linear_pos(table).view(2 * frames, self.num_heads, self.head_dim).transpose(0, 1)
        return blockwise_relative_attention(
            query,
            key,
            value,
            self.pos_bias_u,
            self.pos_bias_v,
            positions,  # [h, 2T, d_k]
            padding_mask,
            *self.chunking(),
            self.config.query_block_size,
            self.dropout if self.training else 0.0,
        )

    def forward(self, hidden_states: torch.Tensor, padding_mask: torch.Tensor | None = None) -> torch.Tensor:
        """``[B, T, D]``, ``[B, T]`` bool or None -> ``[B, T, D]``; blockwise when :meth:`uses_blockwise`."""
        self.check_padding_mask(hidden_states, padding_mask)
        frames = hidden_states.shape[1]
        query = self.split_heads(self.linear_q(hidden_states))  # [B, h, T, d_k]
        key = self.split_heads(self.linear_k(hidden_states))
        value = self.split_heads(self.value_proj(hidden_states))
        if self.uses_blockwise(frames):
            context = self._attend_blockwise(query, key, value, padding_mask)
        else:
            context = self._attend(query, key, value, self.attention_mask(padding_mask, frames))
        return self.output_proj(self.merge_heads(context))

    # --- streaming ------------------------------------------------------------------------------------------
    def forward_chunk(self, chunk: torch.Tensor, cache: ChunkCache | None = None) -> tuple[torch.Tensor, ChunkCache]:
        """Streaming decoding, one chunk at a time (WeNet's chunk attention): ``C`` queries attend to the
        ``M`` cached keys of the previous chunks and to their own chunk, with the chunk form of ``rel_shift``
        (``C x (2L-1)`` scores, ``L = M + C``, first ``L`` columns kept).

        Feeding a sequence in chunks of the chunk size in force (:meth:`chunking`) equals :meth:`forward` on the
        whole sequence with the chunk mask (tested). No padding: stream one utterance (or equal-length ones) per batch.

        Args:
            chunk: ``[B, C, D]`` with ``C`` at most the chunk size (only the last chunk may be shorter).
            cache: ``(key, value)`` ``[B, h, M, d_k]`` from the previous call, or None at the start.

        Returns:
            ``([B, C, D], new_cache)``; the cache keeps the last ``num_left_chunks`` chunks (all when -1).
        """
        query, key, value, new_cache = self.stream_keys_values(chunk, cache, self.linear_q, self.linear_k)
        context = self._attend(query, key, value, None)
        return self.output_proj(self.merge_heads(context)), new_cache
