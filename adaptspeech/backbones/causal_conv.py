"""Causal, limited look-ahead or dynamic chunk depthwise convolution in the conformer convolution module, for streaming.

transformers' ``Wav2Vec2ConformerConvolutionModule`` pads its depthwise convolution symmetrically ("same" padding,
``(k-1)/2`` frames on each side), so every frame looks ``(k-1)/2`` frames into the future of every layer: a chunked
encoder would wait for them at every layer. The setting ``backbone_config.conv_lookahead`` (the fbank Conformer and the
wav2vec2-conformer backbones) changes that:

- ``None`` (the default): transformers' symmetric convolution.
- ``0``: causal (WeNet's ``causal: true``, ``lorder = k - 1``): pads ``k - 1`` frames on the left, none on the right.
- ``r`` in ``1 .. (k-1)/2``: a limited look-ahead, ``k - 1 - r`` frames on the left and up to ``r`` on the right: at
  full context the ``r`` frames ahead, under chunk masks only those of the running chunk
  (:class:`ChunkDepthwiseConv1d`).
- ``"chunk"``: dynamic chunk convolution (Li et al., ICASSP 2023, "Dynamic Chunk Convolution for Unified Streaming and
  Non-Streaming Conformer ASR"; :class:`ChunkDepthwiseConv1d` with ``r = (k-1)/2``): the symmetric kernel, whose
  frames past the end of the running chunk (the chunk size the attention masks use) are zeros. At full context it *is*
  the symmetric convolution. ``conv_lookahead: (k-1)/2`` is the same convolution.

The kernel and its weights are unchanged in every case (the state dict keeps its keys and shapes), so a pretrained or
symmetric model can be made causal, look-ahead or dynamic-chunk and fine-tuned.

Streamed (:mod:`adaptspeech.stream_state`), the convolution continues from the last ``k - 1 - r`` input frames of the
previous chunk instead of zeros (``k - 1`` causal, ``(k-1)/2`` dynamic chunk), and the frames past the chunk's end are
zeros, so chunk-by-chunk encoding equals the whole-sequence forward under the same chunk mask.

Deviation from NeMo's look-ahead (``conv_context_size: [left, right]``), whose right context crosses into the next
chunk: under chunk-masked attention a frame of the next chunk depends on that whole chunk at the layer below, so an
exact stream of that convolution would wait one more chunk per layer (4 x 640 ms on the demo base), and NeMo's
cache-drop recomputation is not exact there. Here the look-ahead stops at the chunk's end, in training (the chunk drawn
per batch) as in decoding, so a look-ahead model streams exactly with no latency beyond the chunk; without chunks it
adds ``r`` frames per layer.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F

from ..attention.chunking import active_chunking
from ..attention.config import AttentionConfig
from ..stream_state import StreamState, current_stream

#: the ``conv_lookahead`` value of the dynamic chunk convolution
CHUNK = "chunk"


class ShiftedDepthwiseConv1d(nn.Conv1d):
    """The causal depthwise ``nn.Conv1d`` (``[B, D, T] -> [B, D, T]``): padded ``k - 1`` frames before, none after, so
    no chunk mask can change it."""

    def __init__(self, channels: int, kernel_size: int, bias: bool = False) -> None:
        super().__init__(channels, channels, kernel_size, padding=0, groups=channels, bias=bias)
        self.left = kernel_size - 1
        self.right = 0

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:  # type: ignore[override]
        """``[B, D, T] -> [B, D, T]``; inside a stream the left padding is the previous chunk's last frames."""
        state = current_stream()
        if state is None:
            return super().forward(F.pad(hidden_states, (self.left, 0)))
        return super().forward(_continue_stream(self, state, hidden_states, self.left))

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, left={self.left}, right={self.right}"


class ChunkDepthwiseConv1d(nn.Conv1d):
    """A depthwise ``nn.Conv1d`` of kernel ``k`` (``[B, D, T] -> [B, D, T]``) with ``r`` frames of look-ahead that never
    looks past the end of the running chunk: the dynamic chunk convolution (``r = (k-1)/2``, odd ``k``) and the limited
    look-ahead (``1 <= r < (k-1)/2``).

    With the chunk size ``c`` in force for the call (:func:`~adaptspeech.attention.chunking.active_chunking`: chosen
    with ``chunk_attention``, drawn per batch by dynamic chunk training, or the attention config's ``chunk_size``),
    output frame ``t`` in chunk ``j = t // c`` (frames ``jc .. (j+1)c - 1``) is, with ``l = k - 1 - r`` left frames::

        y[d, t] = sum_{i=0}^{k-1} w[d, i] * x[d, t - l + i] * [0 <= t - l + i < min((j+1)c, T)]  (+ b[d])

    i.e. its ``l`` left frames (previous chunks included) and at most ``r`` frames of its own chunk ahead of it, the
    frames past the chunk's end being zeros. With ``c = 0`` (full context) the mask is ``t - l + i < T``: the
    convolution padded ``l`` frames before and ``r`` after (for ``r = (k-1)/2`` transformers' symmetric ("same")
    convolution), computed by one ``conv1d`` call. The chunked case unfolds the zero-padded input into the ``k``
    frames around each frame (``[B, D, T, k]``), multiplies them by the kernel masked per frame (``[D, T, k]``) and
    sums: ``O(B D T k)`` memory, no loop over frames, and every size follows ``T`` (the graph of an export with a
    configured ``attention.chunk_size`` holds it).

    Deviations from the paper: the chunk is the attention's (WeNet's U2 draw, not a separate draw for the
    convolution), and the left context is never limited by ``num_left_chunks`` (the kernel's ``l`` left frames are
    always seen, whatever the attention's left chunks).
    """

    def __init__(self, channels: int, kernel_size: int, bias: bool = False,
                 attention: AttentionConfig | None = None, lookahead: int | None = None) -> None:
        if lookahead is None and kernel_size % 2 == 0:
            raise ValueError(f"conv_lookahead: chunk needs an odd conv_depthwise_kernel_size, got {kernel_size}")
        super().__init__(channels, channels, kernel_size, padding=0, groups=channels, bias=bias)
        #: frames ahead at full context (``(k-1)/2``: the dynamic chunk convolution)
        self.right = (kernel_size - 1) // 2 if lookahead is None else lookahead
        #: frames behind, cached between the chunks of a stream
        self.left = kernel_size - 1 - self.right
        #: the model's attention settings: their chunk_size unless the call chooses (None: the call's choice only)
        self.attention = attention if attention is not None else AttentionConfig()

    @property
    def dynamic_chunk(self) -> bool:
        """The symmetric kernel (``conv_lookahead: chunk``)."""
        return self.left == self.right

    def chunk_size(self) -> int:
        """Encoder frames per chunk in force for this call (0: full context)."""
        return active_chunking(self.attention)[0]

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:  # type: ignore[override]
        """``[B, D, T] -> [B, D, T]``; inside a stream ``hidden_states`` is one chunk, continued from the previous
        chunk's last ``l`` frames and followed by ``r`` zeros."""
        left, right = self.left, self.right
        state = current_stream()
        if state is not None:
            return super().forward(F.pad(_continue_stream(self, state, hidden_states, left), (0, right)))
        chunk = self.chunk_size()
        if chunk <= 0:
            return super().forward(F.pad(hidden_states, (left, right)))
        frames = hidden_states.shape[-1]
        windows = F.pad(hidden_states, (left, right)).unfold(-1, left + right + 1, 1)  # [B, D, T, k]: t - l .. t + r
        position = torch.arange(frames, device=hidden_states.device)
        source = position[:, None] + torch.arange(-left, right + 1, device=hidden_states.device)  # [T, k]
        visible = source < (position // chunk + 1)[:, None] * chunk  # not past the end of t's chunk
        kernels = self.weight[:, 0, None, :] * visible.to(windows.dtype)  # [D, T, k]: each frame's masked kernel
        out = (windows * kernels).sum(-1)  # faster than an einsum of the masked windows with the kernel
        return out if self.bias is None else out + self.bias[:, None]

    def extra_repr(self) -> str:
        kind = "dynamic_chunk=True" if self.dynamic_chunk else f"lookahead={self.right}, within the chunk"
        return f"{super().extra_repr()}, {kind}"



def _continue_stream(conv: nn.Module, state: StreamState, hidden_states: torch.Tensor, keep: int) -> torch.Tensor:
    """``[B, D, keep + C]``: ``conv``'s cached last ``keep`` input frames of the previous chunk (zeros at the start)
    followed by this chunk ``[B, D, C]``; the cache becomes the last ``keep`` frames of that."""
    past = state.get(conv)
    if past is None:
        past = hidden_states.new_zeros(*hidden_states.shape[:2], keep)
    extended = torch.cat([past, hidden_states], dim=-1)
    state.put(conv, extended[..., extended.shape[-1] - keep :])
    return extended


def conv_stream_refusal(conv: nn.Module, setting: object) -> str | None:
    """Why the depthwise convolution ``conv`` (of a layer whose ``backbone_config.conv_lookahead`` is ``setting``)
    cannot stream, or None when it can (causal, look-ahead within the chunk or dynamic chunk)."""
    if isinstance(conv, (ChunkDepthwiseConv1d, ShiftedDepthwiseConv1d)):
        return None
    ahead = (conv.kernel_size[0] - 1) // 2
    return (
        f"looks {ahead} frame(s) ahead (backbone_config.conv_lookahead={setting!r}); streaming needs "
        "backbone_config.conv_lookahead: 0 (causal), 1 .. (k-1)/2 (look-ahead within the chunk) or chunk (dynamic "
        "chunk convolution: the same weights, and the symmetric convolution at full context)"
    )


def check_conv_lookahead(lookahead: object, kernel_size: int) -> None:
    """ValueError naming ``backbone_config.conv_lookahead`` unless it is None, ``"chunk"`` or an int in
    ``0 .. (k-1)/2``."""
    if lookahead is None or lookahead == CHUNK:
        return
    if isinstance(lookahead, bool) or not isinstance(lookahead, int) or not 0 <= lookahead <= (kernel_size - 1) // 2:
        raise ValueError(
            f"backbone_config.conv_lookahead must be null (symmetric), chunk (dynamic chunk convolution), 0 (causal) "
            f"or a look-ahead of 1 .. {(kernel_size - 1) // 2} frames (conv_depthwise_kernel_size={kernel_size}), "
            f"got {lookahead!r}"
        )


def set_conv_lookahead(
    encoder_layers: nn.ModuleList, lookahead: int | str | None, attention: AttentionConfig | None = None
) -> int:
    """Give the depthwise convolution of every conformer layer ``lookahead`` frames of right context within the chunk
    (0: causal) or make it a dynamic chunk convolution (``"chunk"``, its chunk size that of ``attention`` or of the
    call); returns how many layers changed. ``None`` leaves transformers' symmetric convolution; layers without a
    ``conv_module`` (wav2vec2's) refuse any other value."""
    if lookahead is None:
        return 0
    convs = [getattr(layer, "conv_module", None) for layer in encoder_layers]
    if not convs or any(conv is None for conv in convs):
        raise ValueError(
            f"backbone_config.conv_lookahead={lookahead!r} applies to conformer backbones (fbank_conformer, "
            "wav2vec2_conformer): these encoder layers have no convolution module"
        )
    for conv in convs:
        old = conv.depthwise_conv
        kernel = old.kernel_size[0]
        check_conv_lookahead(lookahead, kernel)
        bias = old.bias is not None
        if lookahead == 0:
            new: nn.Conv1d = ShiftedDepthwiseConv1d(old.in_channels, kernel, bias=bias)
        else:
            new = ChunkDepthwiseConv1d(old.in_channels, kernel, bias=bias, attention=attention,
                                       lookahead=None if lookahead == CHUNK else lookahead)
        new.to(device=old.weight.device, dtype=old.weight.dtype)
        with torch.no_grad():
            new.weight.copy_(old.weight)
            if old.bias is not None:
                new.bias.copy_(old.bias)
        conv.depthwise_conv = new
    return len(convs)
